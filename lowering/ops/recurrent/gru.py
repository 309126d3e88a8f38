"""GRU (opset 14): gates z, r, h in that order in W, R and B.

Per step, with x the step's projection (X·Wᵀ + Wb, plus Rb except Rb_h when
linear_before_reset) and R_z, R_r, R_h the blocks of R:
z = f(x_z + R_z·h), r = f(x_r + R_r·h),
h~ = g(x_h + R_h·(r ⊙ h) + Rb_h)           (linear_before_reset = 0; Rb_h inside x_h)
h~ = g(x_h + r ⊙ (R_h·h + Rb_h))            (linear_before_reset = 1),
h' = (1 - z) ⊙ h~ + z ⊙ h.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.recurrent.common import build, parse, projection, vector
from lowering.recurrence import MatVec, Pointwise


@register_op("GRU")
def gru(ctx: OpContext) -> list[te.Tensor]:
    spec = parse(ctx, 3, ("Sigmoid", "Tanh"))
    hid, n = spec.hidden, 3 * spec.hidden
    before = bool(ctx.attr("linear_before_reset", 0))
    b = spec.b
    if b is None:
        proj = projection(spec, None)
    elif before:  # Rb_h is applied inside the reset
        proj = projection(spec, lambda d, g: b[d, g] + te.select(
            te.lt(g, 2 * hid), b[d, g + n], te.Const(0.0, "float32")))
    else:
        proj = projection(spec, lambda d, g: b[d, g] + b[d, g + n])
    x, h = vector(n, "x"), vector(hid, "h")
    j = te.Var("j")
    if before:
        g = vector(n, "g")
        bias = vector(2 * n, "b")
        z = spec.gate(0, x[j] + g[j])
        r = spec.gate(0, x[j + hid] + g[j + hid])
        rec_h = g[j + 2 * hid] + (bias[j + n + 2 * hid] if b is not None else 0.0)
        h_new = (1.0 - z) * spec.gate(1, x[j + 2 * hid] + r * rec_h) + z * h[j]
        phases = [MatVec(g, h, 0), Pointwise(j, hid, ((h, h_new),))]
        return build(ctx, spec, proj, x, [h], phases, [g], [] if b is None else [(bias, b)])
    g_zr, zt, rh, g_h = vector(2 * hid, "gzr"), vector(hid, "z"), vector(hid, "rh"), \
        vector(hid, "gh")
    z = spec.gate(0, x[j] + g_zr[j])
    r = spec.gate(0, x[j + hid] + g_zr[j + hid])
    h_new = (1.0 - zt[j]) * spec.gate(1, x[j + 2 * hid] + g_h[j]) + zt[j] * h[j]
    phases = [MatVec(g_zr, h, 0), Pointwise(j, hid, ((zt, z), (rh, r * h[j]))),
              MatVec(g_h, rh, 2 * hid), Pointwise(j, hid, ((h, h_new),))]
    return build(ctx, spec, proj, x, [h], phases, [g_zr, zt, rh, g_h])
