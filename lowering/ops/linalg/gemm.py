"""Gemm: `Y = alpha * op(A) @ op(B) + beta * C`, one product stage plus an element-wise epilogue.

transA/transB are index remaps into the product; alpha, beta and the (unidirectionally
broadcast) C are applied by one element-wise stage in the same kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import broadcast_load
from lowering.ops.linalg.product import product


@register_op("Gemm")
def gemm(ctx: OpContext) -> list[te.Tensor]:
    a, b = ctx.input(0), ctx.input(1)
    c = ctx.inputs[2] if ctx.has_input(2) else None
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.error(f"Gemm needs 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    if a.dtype != b.dtype:
        raise ctx.error(f"operand dtypes differ ({a.dtype} vs {b.dtype})")
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    trans_a, trans_b = bool(ctx.attr("transA", 0)), bool(ctx.attr("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    k2, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != k2:
        raise ctx.error(f"inner dimensions differ ({k} vs {k2})")
    if c is not None:
        if c.dtype != a.dtype:
            raise ctx.error(f"C has dtype {c.dtype}, A has {a.dtype}")
        if len(c.shape) > 2 or any(
            d not in (1, full) for d, full in zip(c.shape[::-1], (n, m), strict=False)
        ):
            raise ctx.error(f"C of shape {list(c.shape)} does not broadcast to [{m}, {n}]")

    def a_at(idx: Sequence[te.Expr], kv: te.Expr) -> te.Expr:
        return a[kv, idx[0]] if trans_a else a[idx[0], kv]

    def b_at(idx: Sequence[te.Expr], kv: te.Expr) -> te.Expr:
        return b[idx[1], kv] if trans_b else b[kv, idx[1]]

    prod = product((m, n), k, a_at, b_at, name="gemm")
    use_c = c is not None and beta != 0.0
    if alpha == 1.0 and not use_c:
        return [prod]
    dtype = a.dtype
    is_float = dtype in te.FLOAT_DTYPES
    if not is_float and not (alpha.is_integer() and beta.is_integer()):
        raise ctx.error(f"alpha={alpha}, beta={beta} must be integers for {dtype} data")

    def scale(x: te.Expr, s: float) -> te.Expr:
        if s == 1.0:
            return x
        return x * te.Const(s if is_float else int(s), dtype)

    def epilogue(i: te.Expr, j: te.Expr) -> te.Expr:
        y = scale(prod[i, j], alpha)
        if use_c:
            assert c is not None
            y = y + scale(broadcast_load(c, (i, j)), beta)
        return y

    return [te.compute((m, n), epilogue, name="gemm_epilogue")]
