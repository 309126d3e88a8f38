"""BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot and BitShift on every integer width.

BitShift follows opset 28, which takes signed types too (opset 11: unsigned ones only): a
right shift of a signed value is arithmetic, and a count that is negative or not below the
width gives what the sign fill alone gives (-1 for a right shift of a negative value, else 0),
as onnxruntime gives 0 for unsigned counts past the width. The count is replaced by 0 there
before shifting: LLVM's shifts by such counts are poison.
"""

from __future__ import annotations

from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, require_dtype, string_attr

INTS = te.INT_DTYPES

BITWISE: dict[str, Callable[[te.Expr, te.Expr], te.Expr]] = {
    "BitwiseAnd": lambda a, b: te.binary("and", a, b),
    "BitwiseOr": lambda a, b: te.binary("or", a, b),
    "BitwiseXor": lambda a, b: te.binary("xor", a, b),
}


def _define(name: str) -> None:
    fn = BITWISE[name]

    @register_op(name)
    def _op(ctx: OpContext) -> list[te.Tensor]:
        a, b = ctx.input(0), ctx.input(1)
        if a.dtype != b.dtype or a.dtype not in INTS:
            raise ctx.error(f"{name} of {a.dtype} and {b.dtype}: it takes two inputs of one "
                            "integer type")
        return [elementwise(ctx, fn, [0, 1])]


for _name in BITWISE:
    _define(_name)


def _all_ones(dtype: str) -> te.Const:
    return te.Const(te.int_range(dtype)[1] if dtype in te.UNSIGNED_DTYPES else -1, dtype)


@register_op("BitwiseNot")
def bitwise_not(ctx: OpContext) -> list[te.Tensor]:
    require_dtype(ctx, INTS)
    return [elementwise(ctx, lambda x: te.binary("xor", x, _all_ones(x.dtype)), [0])]


def _shift(x: te.Expr, count: te.Expr, left: bool) -> te.Expr:
    width = 8 * te.ITEMSIZE[x.dtype]
    out_of_range = te.ge(count, te.as_expr(width, count.dtype))
    if count.dtype not in te.UNSIGNED_DTYPES:
        out_of_range = te.logical_or(te.lt(count, 0), out_of_range)
    zero = te.as_expr(0, x.dtype)
    if isinstance(count, te.Const) and 0 <= int(count.value) < width:
        return te.binary("shl" if left else "shr", x, count)
    shifted = te.binary("shl" if left else "shr", x, te.select(out_of_range, zero, count))
    if left or x.dtype in te.UNSIGNED_DTYPES:
        fill: te.Expr = zero
    else:
        fill = te.select(te.lt(x, 0), te.as_expr(-1, x.dtype), zero)
    return te.select(out_of_range, fill, shifted)


@register_op("BitShift")
def bit_shift(ctx: OpContext) -> list[te.Tensor]:
    x, y = ctx.input(0), ctx.input(1)
    if x.dtype != y.dtype or x.dtype not in INTS:
        raise ctx.error(f"BitShift of {x.dtype} by {y.dtype}: it takes two inputs of one "
                        "integer type")
    direction = string_attr(ctx, "direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    left = direction == "LEFT"
    return [elementwise(ctx, lambda a, b: _shift(a, b, left), [0, 1])]
