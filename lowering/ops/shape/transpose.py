"""Transpose: an index permutation (default: reverse the axes)."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op


@register_op("Transpose")
def transpose(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    rank = len(x.shape)
    perm = ctx.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {perm} is not a permutation of {rank} axes")
    inverse = [perm.index(d) for d in range(rank)]
    shape = tuple(x.shape[p] for p in perm)
    return [te.compute(shape, lambda *i: x[tuple(i[inverse[d]] for d in range(rank))],
                       name="transpose")]
