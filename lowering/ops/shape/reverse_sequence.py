"""ReverseSequence: along the time axis, the first sequence_lens[b] elements of each batch
entry b in reverse order, the rest as they are.

sequence_lens may be a graph input: it is read by the kernel at run time (it changes no
shape). A length outside [0, T] is an error in onnxruntime at run time; a kernel cannot
refuse, so it is clamped into [0, T] and every read stays inside the tensor.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.common import clamp_index, index_input


@register_op("ReverseSequence")
def reverse_sequence(ctx: OpContext) -> list[te.Tensor]:
    x, lens = ctx.input(0), index_input(ctx, 1)
    if len(x.shape) < 2:
        raise ctx.error(f"input has rank {len(x.shape)}, ReverseSequence needs 2 or more")
    batch_axis, time_axis = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if sorted((batch_axis, time_axis)) != [0, 1]:
        raise ctx.error(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1, "
                        "one each")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    if lens.shape != (batch,):
        raise ctx.error(f"sequence_lens has shape {list(lens.shape)}, expected [{batch}]")

    def body(*i: te.Expr) -> te.Expr:
        t = i[time_axis]
        n = clamp_index(te.cast("int64", lens[(i[batch_axis],)]), steps + 1)  # in [0, T]
        src = list(i)
        src[time_axis] = te.select(te.lt(t, n), n - 1 - t, t)
        return x[tuple(src)]

    return [te.compute(x.shape, body, name="reverse_sequence")]
