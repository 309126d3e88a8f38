"""QLinearMatMul: MatMulInteger's int32 product requantized once to the output's scale and zero
point. Scales and zero points are per tensor, or per row (a, y) and per column (b)."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.quant.matmul_integer import col_axis, integer_matmul, row_axis
from lowering.ops.quant.params import check_param, param_at, requantize

A, A_SCALE, A_ZP, B, B_SCALE, B_ZP, Y_SCALE, Y_ZP = range(8)


@register_op("QLinearMatMul")
def qlinear_matmul(ctx: OpContext) -> list[te.Tensor]:
    a, b = ctx.input(A), ctx.input(B)
    out = ctx.out_dtypes[0]
    acc = integer_matmul(ctx, A, A_ZP, B, B_ZP)
    rows, cols = row_axis(a.shape), col_axis(b.shape)
    for i in (A_SCALE, Y_SCALE, Y_ZP):
        if ctx.has_input(i):
            check_param(ctx, i, a.shape, rows)
    check_param(ctx, B_SCALE, b.shape, cols)
    y_zp = ctx.input(Y_ZP) if ctx.has_input(Y_ZP) else None
    if y_zp is not None and y_zp.dtype != out:
        raise ctx.error(f"output zero point is {y_zp.dtype}, the output {out}")
    rank = len(acc.shape)
    # where a row and a column of the product sit in the output (1-D operands drop theirs)
    out_row = None if rows is None else rank - (2 if cols is not None else 1)
    out_col = None if cols is None else rank - 1
    a_s, b_s, y_s = ctx.input(A_SCALE), ctx.input(B_SCALE), ctx.input(Y_SCALE)

    def body(*idx: te.Expr) -> te.Expr:
        multiplier = param_at(a_s, idx, out_row) * param_at(b_s, idx, out_col) / param_at(y_s, idx, out_row)
        zp = None if y_zp is None else param_at(y_zp, idx, out_row)
        return requantize(acc[idx], multiplier, zp, out)

    return [te.compute(acc.shape, body, name="qlinear_matmul")]
