"""Identity and inference-mode Dropout: the output is the input's bytes (a zero-copy alias).

Dropout's optional mask output is all true. Dropout with training_mode true is accepted only
with ratio 0 (which is the identity). A training_mode (or ratio) given at run time is checked
when the model runs (pinned.py): training off or ratio 0, else the run stops, since drawing
random masks is training, which aotc does not compile.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import Alias, OpContext, pinned, register_op


@register_op("Identity")
def identity(ctx: OpContext) -> list[te.Tensor | Alias]:
    return [Alias(0)]


@register_op("Dropout")
def dropout(ctx: OpContext) -> list[te.Tensor | Alias]:
    training = _training(ctx)
    if training is not False:
        zero_ratio = _ratio_is_zero(ctx)
        if zero_ratio is False and training is True:
            ratio = ctx.optional_const(1)
            r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
            raise ctx.error(f"Dropout in training mode (ratio {r}) is not supported",
                            hint="export the model for inference (training_mode=False)")
        if zero_ratio is not True:  # one of them is known only at run time: checked then
            off = te.const(training is False, "bool") if isinstance(training, bool) else \
                te.unary("not", training)
            pinned.require(ctx, te.logical_or(off, te.const(zero_ratio, "bool") if isinstance(
                zero_ratio, bool) else zero_ratio), "training_mode must be false, or ratio 0 "
                "(random masks are training, which is not compiled)")
    results: list[te.Tensor | Alias] = [Alias(0)]
    if len(ctx.out_shapes) > 1:
        results.append(te.compute(ctx.out_shapes[1], lambda *i: te.Const(True, "bool"),
                                  name="dropout_mask"))
    return results


def _training(ctx: OpContext) -> bool | te.Expr:
    """training_mode: a constant, or a bool loaded at run time (a check can then stop it)."""
    given = pinned.run_time(ctx, 2, elementwise=False)
    if given is not None and given.size == 1:
        return te.cast("bool", pinned.elements(given)[0])
    return ctx.has_input(2) and bool(np.asarray(ctx.const(2, "Dropout training_mode")).any())


def _ratio_is_zero(ctx: OpContext) -> bool | te.Expr:
    """Whether the ratio is 0 (the default is 0.5): a constant answer, or one at run time."""
    given = pinned.run_time(ctx, 1)
    if given is not None and given.size == 1:
        r = pinned.elements(given)[0]
        return te.eq(r, te.const(0, r.dtype))
    ratio = ctx.optional_const(1)
    return ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0
