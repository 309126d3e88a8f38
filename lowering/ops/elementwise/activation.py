"""Activations with attributes or a second operand: LeakyRelu, PRelu, HardSigmoid, HardSwish,
Gelu, Elu, Selu, Celu, ThresholdedRelu, Mish.

Formulas follow the ONNX definitions in the branch order onnxruntime uses, so NaN inputs give
NaN (ThresholdedRelu gives 0, as onnxruntime).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.elementwise.operands import elementwise, fmax, fmin, require_dtype, string_attr

FLOATS = te.FLOAT_DTYPES


def _float_op(ctx: OpContext, fn: Callable[[te.Expr], te.Expr]) -> list[te.Tensor]:
    require_dtype(ctx, FLOATS)
    return [elementwise(ctx, fn, [0])]


@register_op("LeakyRelu")
def leaky_relu(ctx: OpContext) -> list[te.Tensor]:
    alpha = float(ctx.attr("alpha", 0.01))
    return _float_op(ctx, lambda x: te.select(te.lt(x, 0), x * alpha, x))


@register_op("PRelu")
def prelu(ctx: OpContext) -> list[te.Tensor]:
    """Slope broadcasts to X (unidirectional); the output has X's shape."""
    require_dtype(ctx, te.NUMERIC_DTYPES)
    if ctx.out_shapes[0] != ctx.input(0).shape:
        raise ctx.error(f"slope of shape {list(ctx.input(1).shape)} does not broadcast to "
                        f"X of shape {list(ctx.input(0).shape)}")
    return [elementwise(ctx, lambda x, s: te.select(te.lt(x, 0), s * x, x), [0, 1])]


def _hard_sigmoid(x: te.Expr, alpha: float, beta: float) -> te.Expr:
    return fmax(fmin(x * alpha + beta, te.as_expr(1.0, x.dtype)), te.as_expr(0.0, x.dtype))


@register_op("HardSigmoid")
def hard_sigmoid(ctx: OpContext) -> list[te.Tensor]:
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    return _float_op(ctx, lambda x: _hard_sigmoid(x, alpha, beta))


@register_op("HardSwish")
def hard_swish(ctx: OpContext) -> list[te.Tensor]:
    return _float_op(ctx, lambda x: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5))


def _gelu_exact(x: te.Expr) -> te.Expr:
    return x * 0.5 * (te.unary("erf", x * math.sqrt(0.5)) + 1.0)


def _gelu_tanh(x: te.Expr) -> te.Expr:
    inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
    return x * 0.5 * (te.unary("tanh", inner) + 1.0)


@register_op("Gelu")
def gelu(ctx: OpContext) -> list[te.Tensor]:
    approximate = string_attr(ctx, "approximate", "none")
    fns = {"none": _gelu_exact, "tanh": _gelu_tanh}
    if approximate not in fns:
        raise ctx.error(f"Gelu approximate='{approximate}' is not defined (none, tanh)")
    return _float_op(ctx, fns[approximate])


@register_op("Elu")
def elu(ctx: OpContext) -> list[te.Tensor]:
    alpha = float(ctx.attr("alpha", 1.0))
    return _float_op(
        ctx, lambda x: te.select(te.lt(x, 0), (te.unary("exp", x) - 1.0) * alpha, x)
    )


@register_op("Selu")
def selu(ctx: OpContext) -> list[te.Tensor]:
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return _float_op(ctx, lambda x: te.select(
        te.gt(x, 0), x * gamma, (te.unary("exp", x) * alpha - alpha) * gamma))


@register_op("Celu")
def celu(ctx: OpContext) -> list[te.Tensor]:
    alpha = float(ctx.attr("alpha", 1.0))
    if alpha == 0.0:
        raise ctx.error("Celu alpha must be nonzero")

    def fn(x: te.Expr) -> te.Expr:
        zero = te.as_expr(0.0, x.dtype)
        neg = (te.unary("exp", x / alpha) - 1.0) * alpha
        return fmax(x, zero) + fmin(neg, zero)

    return _float_op(ctx, fn)


@register_op("ThresholdedRelu")
def thresholded_relu(ctx: OpContext) -> list[te.Tensor]:
    alpha = float(ctx.attr("alpha", 1.0))
    return _float_op(ctx, lambda x: te.select(te.gt(x, alpha), x, te.as_expr(0.0, x.dtype)))


@register_op("Mish")
def mish(ctx: OpContext) -> list[te.Tensor]:
    return _float_op(ctx, lambda x: x * te.unary("tanh", te.unary("softplus", x)))
