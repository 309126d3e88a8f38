"""STFT: the DFT of each frame of a signal ([batch, length, 1 or 2]), frames frame_step apart,
each multiplied by the window when one is given; onesided (the default) keeps bins
0..frame_length//2. Frames are an inline view of the signal (frame f, sample t reads sample
f·step + t), so the transform (dft.py's direct sum) reads the signal in place.

frame_step and frame_length set the output shape and must be constants; the window is data and
may be computed at run time.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, register_op
from lowering.ops.signal.dft import dft, int_scalar


@register_op("STFT")
def stft(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"STFT of {x.dtype} is not supported (floats only)")
    if len(x.shape) != 3 or x.shape[2] not in (1, 2):
        raise ctx.error(f"signal shape {list(x.shape)}: expected [batch, length, 1 or 2]")
    batch, length, parts = x.shape
    step = int_scalar(ctx, 1, "frame_step")
    window = ctx.input(2) if ctx.has_input(2) else None
    if window is not None and len(window.shape) != 1:
        raise ctx.error(f"window has shape {list(window.shape)}, expected one axis")
    if ctx.has_input(3):
        frame = int_scalar(ctx, 3, "frame_length")
    elif window is not None:
        frame = window.shape[0]
    else:
        frame = length
    if window is not None and window.shape[0] != frame:
        raise ctx.error(f"window of {window.shape[0]} samples for frames of {frame}")
    if step <= 0 or frame <= 0 or frame > length:
        raise ctx.error(f"frame_step {step} and frame_length {frame} must be positive, the "
                        f"frame no longer than the signal ({length})")
    count = 1 + (length - frame) // step

    def sample(b: te.Var, f: te.Var, t: te.Var, p: te.Var) -> te.Expr:
        v = x[b, f * step + t, p]
        return v if window is None else v * te.cast(x.dtype, window[t])

    frames = te.compute((batch, count, frame, parts), sample, name="stft_frames", inline=True)
    onesided = bool(ctx.attr("onesided", 1))
    out = dft(frames, 2, frame, inverse=False, onesided=onesided)
    if onesided and "onesided" not in ctx.attrs and ctx.out_shapes[0][2:3] == (frame,) != (
            out.shape[2],):
        raise ctx.error("onnx's shape inference gives this STFT all frame_length bins: it takes "
                        "an absent onesided as 0, the spec (and onnxruntime) as 1",
                        hint="write the onesided attribute explicitly")
    if out.shape != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {list(out.shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    return [out]
