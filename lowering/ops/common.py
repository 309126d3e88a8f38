"""Helpers every operator family shares: broadcasting, axes, padding geometry."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lowering import te

if TYPE_CHECKING:
    from lowering.ops import OpContext


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def axis_of(ctx: OpContext, axis: int, rank: int) -> int:
    """`normalize_axis` for an operator's axis: an out-of-range axis is the node's error."""
    try:
        return normalize_axis(int(axis), rank)
    except ValueError as e:
        raise ctx.error(str(e)) from None


def require_float(ctx: OpContext, dtype: str, what: str) -> None:
    """Refuse `what` (an operator's name) on a non-float element type: for the operators whose
    definitions are floating-point arithmetic only."""
    if dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"{what} of {dtype} tensors is not supported (float only)")


def index_input(ctx: OpContext, i: int) -> te.Tensor:
    """Input `i`, a tensor of indices: int32 or int64, as ONNX allows."""
    t = ctx.input(i)
    if t.dtype not in ("int64", "int32"):
        raise ctx.error(f"indices (input {i}) must be int32 or int64, got {t.dtype}")
    return t


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


def data_index(raw: te.Expr, n: int) -> te.Expr:
    """An index read from a tensor (any integer type) as a position along an axis of length n:
    int64, a negative value counting from the end (once), then clamped into [0, n). ONNX leaves
    out-of-range indices undefined; generated code must never touch memory outside the tensor,
    so such an index reads (or writes) the nearest edge instead."""
    i = te.cast("int64", raw)
    return clamp_index(te.select(te.lt(i, 0), i + n, i), n)


def unflatten(i: te.Expr, shape: Sequence[int | te.Expr]) -> tuple[te.Expr, ...]:
    """The row-major index into `shape` (sizes, constant or not) of flat position `i`."""
    out: list[te.Expr] = []
    for d in reversed(shape):
        out.insert(0, i % d)
        i = i // d
    return tuple(out)
