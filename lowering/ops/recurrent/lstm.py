"""LSTM (opset 14): gates i, o, f, c in that order in W, R and B; peepholes P (i, o, f).

Per step, with x the step's projection (X·Wᵀ + Wb + Rb) and g = R·h:
i = f(x_i + g_i + P_i ⊙ c), f = f(x_f + g_f + P_f ⊙ c) (1 - i with input_forget),
c' = f ⊙ c + i ⊙ g(x_c + g_c), o = f(x_o + g_o + P_o ⊙ c'), h' = o ⊙ h(c').
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.recurrent.common import build, parse, projection, vector
from lowering.recurrence import MatVec, Pointwise


@register_op("LSTM")
def lstm(ctx: OpContext) -> list[te.Tensor]:
    spec = parse(ctx, 4, ("Sigmoid", "Tanh", "Tanh"), n_initial=2)
    hid, n = spec.hidden, 4 * spec.hidden
    p = ctx.inputs[7] if ctx.has_input(7) else None
    if p is not None and tuple(p.shape) != (spec.directions, 3 * hid):
        raise ctx.error(f"P must be {[spec.directions, 3 * hid]}, got {list(p.shape)}")
    input_forget = bool(ctx.attr("input_forget", 0))
    b = spec.b
    proj = projection(spec, None if b is None else lambda d, g: b[d, g] + b[d, g + n])
    x, h, c, g = vector(n, "x"), vector(hid, "h"), vector(hid, "c"), vector(n, "g")
    peep = vector(3 * hid, "p")
    j = te.Var("j")

    def pre(gate: int) -> te.Expr:
        return x[j + gate * hid] + g[j + gate * hid]

    xi, xf = pre(0), pre(2)
    if p is not None:
        xi = xi + peep[j] * c[j]
        xf = xf + peep[j + 2 * hid] * c[j]
    i = spec.gate(0, xi)
    f = 1.0 - i if input_forget else spec.gate(0, xf)
    c_new = f * c[j] + i * spec.gate(1, pre(3))
    xo = pre(1)
    if p is not None:
        xo = xo + peep[j + hid] * c_new
    h_new = spec.gate(0, xo) * spec.act(2)(c_new)
    phases = [MatVec(g, h, 0), Pointwise(j, hid, ((c, c_new), (h, h_new)))]
    return build(ctx, spec, proj, x, [h, c], phases, [g],
                 [] if p is None else [(peep, p)])
