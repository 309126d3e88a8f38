"""RNN (opset 14): h' = f(X·Wᵀ + Wb + Rb + R·h) per step."""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.recurrent.common import build, parse, projection, vector
from lowering.recurrence import MatVec, Pointwise


@register_op("RNN")
def rnn(ctx: OpContext) -> list[te.Tensor]:
    spec = parse(ctx, 1, ("Tanh",))
    hid = spec.hidden
    b = spec.b
    proj = projection(spec, None if b is None else lambda d, g: b[d, g] + b[d, g + hid])
    x, h, g = vector(hid, "x"), vector(hid, "h"), vector(hid, "g")
    j = te.Var("j")
    phases = [MatVec(g, h, 0), Pointwise(j, hid, ((h, spec.gate(0, x[j] + g[j])),))]
    return build(ctx, spec, proj, x, [h], phases, [g])
