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
    training = pinned.run_time(ctx, 2, elementwise=False)
    if training is not None and training.size == 1:
        _check_inference_at_run_time(ctx, training)
    elif ctx.has_input(2) and bool(np.asarray(ctx.const(2, "Dropout training_mode")).any()):
        ratio = pinned.run_time(ctx, 1)
        if ratio is not None and ratio.size == 1:
            pinned.require(ctx, te.eq(pinned.elements(ratio)[0], te.const(0, ratio.dtype)),
                           "ratio must be 0 in training mode (random masks are not compiled)")
        else:
            _no_training(ctx)
    results: list[te.Tensor | Alias] = [Alias(0)]
    if len(ctx.out_shapes) > 1:
        results.append(te.compute(ctx.out_shapes[1], lambda *i: te.Const(True, "bool"),
                                  name="dropout_mask"))
    return results


def _no_training(ctx: OpContext) -> None:
    """A constant training mode: only ratio 0 (the identity) is compiled."""
    ratio = ctx.optional_const(1)
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    if r != 0.0:
        raise ctx.error(f"Dropout in training mode (ratio {r}) is not supported",
                        hint="export the model for inference (training_mode=False)")


def _check_inference_at_run_time(ctx: OpContext, training: te.Tensor) -> None:
    """training_mode given at run time: off, or with ratio 0, else the run stops."""
    off = te.unary("not", te.cast("bool", pinned.elements(training)[0]))
    ratio_given = pinned.run_time(ctx, 1)
    if ratio_given is not None and ratio_given.size == 1:
        r = pinned.elements(ratio_given)[0]
        off = te.logical_or(off, te.eq(r, te.const(0, r.dtype)))
    elif ctx.has_input(1) and ctx.consts[1] is None:
        raise ctx.error("Dropout ratio must be a constant (known at compile time)")
    else:
        ratio = ctx.optional_const(1)
        if ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0:
            return
    pinned.require(ctx, off, "training_mode must be false, or ratio 0 (random masks are "
                   "training, which is not compiled)")
