"""Helpers every operator family shares: broadcasting, axes, padding geometry."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lowering import te


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        dims = {s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {list(shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_load(t: te.Tensor, idx: Sequence[te.Expr]) -> te.Expr:
    """`t` read at output index `idx` under numpy broadcasting (right-aligned, size-1 → 0)."""
    off = len(idx) - len(t.shape)
    return t[tuple(
        te.Const(0, "int64") if n == 1 else idx[off + d] for d, n in enumerate(t.shape)
    )] if t.shape else t[()]


def elementwise(
    inputs: Sequence[te.Tensor],
    fn: Callable[..., te.Expr],
    name: str,
    out_shape: Sequence[int] | None = None,
) -> te.Tensor:
    shape = tuple(out_shape) if out_shape is not None else broadcast_shape(
        *[t.shape for t in inputs]
    )
    return te.compute(
        shape,
        lambda *i: fn(*[broadcast_load(t, i) for t in inputs]),
        name=name,
    )


def clamp_index(i: te.Expr, n: int) -> te.Expr:
    """Keep a data-dependent index inside [0, n) so a bad value can never read out of bounds."""
    return te.minimum(te.maximum(i, te.Const(0, i.dtype)), te.Const(n - 1, i.dtype))
