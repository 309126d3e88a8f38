"""MatMul: numpy matmul semantics (1-D operands promoted and dropped, broadcast batch dims)."""

from __future__ import annotations

from collections.abc import Sequence

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import broadcast_shape
from lowering.ops.linalg.product import batch_index, product


@register_op("MatMul")
def matmul(ctx: OpContext) -> list[te.Tensor]:
    a, b = ctx.input(0), ctx.input(1)
    if a.dtype != b.dtype:
        raise ctx.error(f"operand dtypes differ ({a.dtype} vs {b.dtype})")
    if not a.shape or not b.shape:
        raise ctx.error("MatMul operands must have rank >= 1")
    a_vec, b_vec = len(a.shape) == 1, len(b.shape) == 1
    a_shape = (1, *a.shape) if a_vec else a.shape
    b_shape = (*b.shape, 1) if b_vec else b.shape
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        raise ctx.error(f"inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    try:
        batch = broadcast_shape(a_shape[:-2], b_shape[:-2])
    except ValueError as e:
        raise ctx.error(f"batch dimensions do not broadcast: {e}") from None
    nb = len(batch)
    out_shape = (*batch, *([] if a_vec else [m]), *([] if b_vec else [n]))

    def split(idx: Sequence[te.Expr]) -> tuple[Sequence[te.Expr], te.Expr, te.Expr]:
        zero = te.Const(0, "int64")
        rest = list(idx[nb:])
        i = zero if a_vec else rest.pop(0)
        j = zero if b_vec else rest.pop(0)
        return idx[:nb], i, j

    def a_at(idx: Sequence[te.Expr], kv: te.Expr) -> te.Expr:
        bidx, i, _ = split(idx)
        pre = batch_index(a_shape[:-2], bidx)
        return a[(*pre, kv)] if a_vec else a[(*pre, i, kv)]

    def b_at(idx: Sequence[te.Expr], kv: te.Expr) -> te.Expr:
        bidx, _, j = split(idx)
        pre = batch_index(b_shape[:-2], bidx)
        return b[(*pre, kv)] if b_vec else b[(*pre, kv, j)]

    return [product(out_shape, k, a_at, b_at)]
