"""Concat: each output position reads the one input whose range along `axis` covers it.

A balanced tree of selects; only the taken branch's load is evaluated (the code generator branches),
so every load stays inside its input.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import normalize_axis


@register_op("Concat")
def concat(ctx: OpContext) -> list[te.Tensor]:
    ins = [ctx.input(i) for i in range(len(ctx.inputs))]
    rank = len(ins[0].shape)
    try:
        axis = normalize_axis(int(ctx.attr("axis")), rank)
    except (TypeError, ValueError) as e:
        raise ctx.error(f"bad axis: {e}") from None
    for t in ins:
        same = len(t.shape) == rank and all(
            a == b for d, (a, b) in enumerate(zip(t.shape, ins[0].shape, strict=True)) if d != axis
        )
        if not same or t.dtype != ins[0].dtype:
            raise ctx.error(f"input {t.dtype}{list(t.shape)} does not match "
                            f"{ins[0].dtype}{list(ins[0].shape)} off axis {axis}")
    parts = [t for t in ins if t.shape[axis] > 0]
    total = sum(t.shape[axis] for t in parts)
    shape = tuple(total if d == axis else n for d, n in enumerate(ins[0].shape))
    if not parts:
        return [te.compute(shape, lambda *i: te.Const(0, ins[0].dtype), name="concat")]
    starts = []
    off = 0
    for t in parts:
        starts.append(off)
        off += t.shape[axis]

    def body(*i: te.Expr) -> te.Expr:
        def read(k: int) -> te.Expr:
            idx = list(i)
            idx[axis] = i[axis] - starts[k]
            return parts[k][tuple(idx)]

        def pick(lo: int, hi: int) -> te.Expr:  # balanced: log2(inputs) compares
            if hi - lo == 1:
                return read(lo)
            mid = (lo + hi) // 2
            return te.select(te.lt(i[axis], starts[mid]), pick(lo, mid), pick(mid, hi))

        return pick(0, len(parts))

    return [te.compute(shape, body, name="concat")]
