"""Identity and inference-mode Dropout: the output is the input's bytes (a zero-copy alias).

Dropout's optional mask output is all true. Dropout with training_mode true is accepted only
with ratio 0 (which is the identity); a training_mode computed at run time is rejected.
"""

from __future__ import annotations

import numpy as np

from lowering import te
from lowering.ops import Alias, OpContext, register_op


@register_op("Identity")
def identity(ctx: OpContext) -> list[te.Tensor | Alias]:
    return [Alias(0)]


@register_op("Dropout")
def dropout(ctx: OpContext) -> list[te.Tensor | Alias]:
    if ctx.has_input(2) and bool(np.asarray(ctx.const(2, "Dropout training_mode")).any()):
        ratio = ctx.optional_const(1)
        r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
        if r != 0.0:
            raise ctx.error(f"Dropout in training mode (ratio {r}) is not supported",
                            hint="export the model for inference (training_mode=False)")
    results: list[te.Tensor | Alias] = [Alias(0)]
    if len(ctx.out_shapes) > 1:
        results.append(te.compute(ctx.out_shapes[1], lambda *i: te.Const(True, "bool"),
                                  name="dropout_mask"))
    return results
