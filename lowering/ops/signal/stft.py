"""STFT: the DFT of each frame of a signal ([batch, length, 1 or 2]), frames frame_step apart,
each multiplied by the window when one is given; onesided (the default) keeps bins
0..frame_length//2. Frames are an inline view of the signal (frame f, sample t reads sample
f·step + t), so the transform (dft.py's direct sum) reads the signal in place.

frame_step and frame_length set the output shape. Given at run time (pinned.py), frame_step is
read when the kernel runs, with a check that it gives the output's frame count; frame_length is
one of the lengths whose bins fit the output's shape (each such length built, the run-time
value selecting where two fit). The window is data and may be computed at run time.
"""

from __future__ import annotations

from lowering import te
from lowering.ops import OpContext, pinned, register_op
from lowering.ops.signal.dft import dft, int_scalar


@register_op("STFT")
def stft(ctx: OpContext) -> list[te.Tensor]:
    x = ctx.input(0)
    if x.dtype not in te.FLOAT_DTYPES:
        raise ctx.error(f"STFT of {x.dtype} is not supported (floats only)")
    if len(x.shape) != 3 or x.shape[2] not in (1, 2):
        raise ctx.error(f"signal shape {list(x.shape)}: expected [batch, length, 1 or 2]")
    batch, length, parts = x.shape
    window = ctx.input(2) if ctx.has_input(2) else None
    if window is not None and len(window.shape) != 1:
        raise ctx.error(f"window has shape {list(window.shape)}, expected one axis")
    onesided = bool(ctx.attr("onesided", 1))
    out_shape = tuple(ctx.out_shapes[0])
    if len(out_shape) != 4:
        raise ctx.error(f"output shape {list(out_shape)}: expected 4 axes")
    step: int | te.Expr
    if pinned.run_time(ctx, 1) is not None:
        t = ctx.input(1)
        if t.size != 1 or t.dtype not in te.INT_DTYPES:
            raise ctx.error(f"frame_step must be one integer, got {t.dtype}{list(t.shape)}")
        step = te.cast("int64", pinned.elements(t)[0])
    else:
        step = int_scalar(ctx, 1, "frame_step")
    if pinned.run_time(ctx, 3) is None:
        if ctx.has_input(3):
            frame = int_scalar(ctx, 3, "frame_length")
        elif window is not None:
            frame = window.shape[0]
        else:
            frame = length
        if isinstance(step, te.Expr):
            pinned.require(ctx, _gives(step, length - frame, out_shape[1]),
                           f"frame_step must give {out_shape[1]} frames of {frame}")
        return [_stft(ctx, x, step, frame, window, onesided)]
    # frame_length given at run time: the lengths whose bins and frame count fit the output
    bins, count = out_shape[2], out_shape[1]
    frames = [f for f in ((2 * bins - 2, 2 * bins - 1) if onesided else (bins,))
              if 0 < f <= length and (window is None or f == window.shape[0])
              and _step_exists(step, length - f, count)]
    if not frames or ctx.input(3).size != 1:
        raise pinned.ambiguous(ctx, 3, "frame_length", "no one frame length")
    value = pinned.elements(ctx.input(3))[0]
    fits = [te.eq(value, te.const(f, value.dtype)) for f in frames]
    ok = [te.logical_and(fit, _gives(step, length - f, count)) if isinstance(step, te.Expr)
          else fit for fit, f in zip(fits, frames, strict=True)]
    pinned.require(ctx, te.any_of(ok), "frame_length must be " + " or ".join(map(str, frames)) +
                   (f" and frame_step give {count} frames" if isinstance(step, te.Expr) else ""))
    return [pinned.by_meaning(fits, [_stft(ctx, x, step, f, window, onesided) for f in frames],
                              "stft")]


def _step_exists(step: int | te.Expr, span: int, count: int) -> bool:
    """Whether a frame step (the constant, or some positive one when it is given at run time)
    gives `count` frames over a signal `span` samples longer than a frame."""
    if isinstance(step, int):
        return step > 0 and 1 + span // step == count
    if count == 1:
        return True  # any step past the span
    s = span // (count - 1)  # the largest step that still fits count frames
    return s >= 1 and span // s == count - 1


def _gives(step: te.Expr, span: int, count: int) -> te.Expr:
    """Whether a run-time step is positive and gives `count` frames (1 + span // step)."""
    one = te.const(1, "int64")
    return te.logical_and(te.ge(step, one), te.eq(
        one + te.const(span, "int64") // te.maximum(step, one), te.const(count, "int64")))


def _stft(ctx: OpContext, x: te.Tensor, step: int | te.Expr, frame: int,
          window: te.Tensor | None, onesided: bool) -> te.Tensor:
    batch, length, parts = x.shape
    if window is not None and window.shape[0] != frame:
        raise ctx.error(f"window of {window.shape[0]} samples for frames of {frame}")
    if frame <= 0 or frame > length:
        raise ctx.error(f"frame_length {frame} must be positive, no longer than the signal "
                        f"({length})")
    at: int | te.Expr
    if isinstance(step, int):
        if step <= 0:
            raise ctx.error(f"frame_step {step} must be positive")
        count = 1 + (length - frame) // step
        at = step
    else:  # checked by the caller
        count = ctx.out_shapes[0][1]
        at = te.maximum(step, te.const(1, "int64"))

    def sample(b: te.Var, f: te.Var, t: te.Var, p: te.Var) -> te.Expr:
        pos = f * at + t
        if not isinstance(at, int):  # (a run-time step failing its check reads in bounds)
            pos = te.minimum(pos, te.const(length - 1, "int64"))
        v = x[b, pos, p]
        return v if window is None else v * te.cast(x.dtype, window[t])

    frames = te.compute((batch, count, frame, parts), sample, name="stft_frames", inline=True)
    out = dft(frames, 2, frame, inverse=False, onesided=onesided)
    if onesided and "onesided" not in ctx.attrs and ctx.out_shapes[0][2:3] == (frame,) != (
            out.shape[2],):
        raise ctx.error("onnx's shape inference gives this STFT all frame_length bins: it takes "
                        "an absent onesided as 0, the spec (and onnxruntime) as 1",
                        hint="write the onesided attribute explicitly")
    if out.shape != tuple(ctx.out_shapes[0]):
        raise ctx.error(f"output shape {list(out.shape)} differs from the inferred "
                        f"{list(ctx.out_shapes[0])}")
    return out
