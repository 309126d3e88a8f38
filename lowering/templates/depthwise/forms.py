"""Which of the template's forms apply to a pattern, and what a form needs to know of it."""

from __future__ import annotations

import math

from lowering import te
from lowering.search.cost_model import arithmetic_cost
from lowering.templates.depthwise.pattern import Axis, DepthwisePattern

# Pools with narrower outputs do not take the row form: its short interior runs between scalar
# borders lost to the default schedule's padded copy there (3x3/2 max pools, one core: 16 and
# 32 wide 1.4-1.9x slower, 56 and 64 wide 2.2-2.6x faster). They take rows of whole vectors or
# the split planes (narrow_pool_form; 3x3/2 over 32x32 planes: 0.35x the default's time).
POOL_MIN_WIDTH = 48
# planes up to this many outputs may run as one masked vector loop (LLVM unrolls it fully, so
# the masks become constants)
MASKED_MAX_PLANE = 256
# The padded-plane form is offered for output rows of at most this many vectors.
PADDED_MAX_ROW_VECTORS = 2
# An epilogue dearer than this many instructions per element (a swish's sigmoid, a GELU) runs
# as its own vector loop over each finished plane instead of inside the window's loops, whose
# scalar borders and remainders would pay it one element at a time.
PLANE_EPILOGUE_COST = 8.0


def exact_in_float(pat: DepthwisePattern) -> bool:
    """Whether an integer window's sum of products is exact in float32: 8-bit inputs and
    weights less their zero points (|value| <= 255) over few enough taps that every partial
    sum stays below 2^24. Its vector loop is then a load and an FMA per tap (against a
    load, a multiply and an add in int32), and the int32 result is the same."""
    if pat.x_value is None or pat.weight is None or pat.x.dtype not in ("int8", "uint8"):
        return False
    weights = te.tensors_read(pat.weight)
    if not weights or any(t.dtype not in ("int8", "uint8") for t in weights):
        return False
    return pat.h.taps * pat.w.taps * 255 * 255 < 1 << 24


def plane_epilogue(pat: DepthwisePattern) -> bool:
    """Whether the epilogue runs as its own pass over each plane (PLANE_EPILOGUE_COST): the
    window sums are then stored in the output, so it must have their type."""
    epi = pat.epilogue
    return (epi is not None and epi.dtype == pat.conv.dtype
            and arithmetic_cost(te.expand_inline(epi.op.body)) > PLANE_EPILOGUE_COST)  # type: ignore[union-attr]


def valid_run(valid: list[bool]) -> tuple[int, int]:
    """The source positions that hold input elements, as one run [first, end)."""
    first = valid.index(True)
    return first, first + sum(valid)


def padded_plane_ok(pat: DepthwisePattern, lanes: int, masked_tails: bool) -> bool:
    """Whether the padded-plane form applies: stride 1 on both axes (every tap is then the
    virtual output index plus a constant), the input elements one run per axis, and, where
    a row's last partial vector runs under a mask (`masked_tails`), short rows
    (PADDED_MAX_ROW_VECTORS): on wider ones the row form's loop overhead is small, and the
    padded form's two copies of the plane cost more than they save (one core, 3x3, 16 lanes:
    56- and 112-wide planes 1.3-1.6x slower padded; 28-wide 1.2x faster). Without masks the
    row form pays each row's remainder in scalars, and LLVM's GVN turns the row's overlapping
    tap loads into loop-carried vectors that it shifts with cross-lane shuffles; the padded
    form's one loop over the plane does neither (one Zen 1 core, 3x3 at 8 lanes: 28- to
    112-wide planes 0.75-0.85x the row form's time)."""
    if pat.w.out > PADDED_MAX_ROW_VECTORS * lanes and masked_tails and not pat.integer:
        return False
    for a in (pat.h, pat.w):
        if a.stride != 1 or not any(a.valid):
            return False
        first, end = valid_run(a.valid)
        if not all(a.valid[first:end]):
            return False
    return True


def narrow_pool_form(pat: DepthwisePattern, lanes: int) -> str | None:
    """The form of a pool narrower than POOL_MIN_WIDTH: rows of whole vectors where every
    column tap of every column is a plain load (no padding to mask; unit stride, or a
    stride-s window of s adjacent columns, which LLVM reads as one group of whole vectors) and
    rows are whole vectors, else the split planes (a masked or gapped strided tap leaves LLVM
    half-width vectors and scalar remainders: a 3x3/2 pool over 32x32 planes ran 3x slower in
    rows), else None (the default schedule)."""
    w = pat.w
    offsets = sorted(r * w.dilation + w.offset - w.shift for r in range(w.taps))
    masked = any(not w.tap_ok(o, r) for o in range(w.out) for r in range(w.taps))
    grouped = w.stride == 1 or offsets == list(range(offsets[0], offsets[0] + w.stride))
    if not pat.integer and grouped and not masked and w.out % lanes == 0:
        return "row_vectors"
    return "split" if split_ok(pat) else None


def split_axis(a: Axis, size: int) -> tuple[list[int], int, int]:
    """The split form along one axis of an input `size` long: each tap's offset from the
    output's position times the stride (input position o*s + off: phase off % s, sub-plane
    index o + off // s + lead), the sub-plane positions before input position 0 (`lead`),
    and the sub-plane's length (room for every tap of every output and for the input)."""
    offs = [r * a.dilation + a.offset - a.shift for r in range(a.taps)]
    lead = max(0, -min(o // a.stride for o in offs))
    end = max(a.out + max(o // a.stride for o in offs), -(-size // a.stride))
    return offs, lead, lead + end


def split_ok(pat: DepthwisePattern) -> bool:
    """Whether the split form applies: a float pool or an integer convolution whose output
    planes each read their own input plane, and whose padding is exactly what lies outside the
    input (the sub-planes hold the whole input and the padding value around it). At stride 1
    it is the padded-plane form with the window run to whole vectors."""
    if (pat.weight is not None) != pat.integer:
        return False
    if pat.chan is not pat.k or pat.x.shape[:2] != pat.conv.shape[:2]:
        return False
    for a, size in ((pat.h, pat.x.shape[2]), (pat.w, pat.x.shape[3])):
        if not any(a.valid) or valid_run(a.valid) != (a.shift, a.shift + size) \
                or not all(a.valid[a.shift:a.shift + size]):
            return False
    return True


def masked_plane_ok(pat: DepthwisePattern) -> bool:
    """Whether the masked-plane form applies: stride 1 with input and output planes of one
    size (their rows one pitch), each output channel reading its own input channel, small
    planes, and at least three of them (the first and last run in the row form)."""
    h, w = pat.h, pat.w
    return (h.stride == 1 and w.stride == 1 and pat.x.shape[2:] == pat.conv.shape[2:]
            and pat.chan is pat.k and pat.x.shape[1] == pat.conv.shape[1]
            and h.out * w.out <= MASKED_MAX_PLANE and math.prod(pat.conv.shape[:2]) >= 3)


def row_run_form(pat: DepthwisePattern, first: int, end: int, taps_w: tuple[int, ...],
                 masked_tails: bool) -> tuple[bool, bool]:
    """How the row form computes the run [first, end) of an output row whose outputs read the
    column taps `taps_w`: (as a vector loop, its last partial vector under a mask). The
    interior run (every tap) of more than one output is vectorised; border runs are a column
    or two, each with its own taps, left serial. The interior's last partial vector runs
    under a mask where masks are cheap (`masked_tails`): as a scalar remainder it cost more
    than the vectors (14 of a 112-wide row's 110 interior outputs, each nine taps). Not along
    strided rows, whose masked loads LLVM turns into gathers (3x3/2 at 112: 11x slower)."""
    vector = len(taps_w) == pat.w.taps and end - first > 1
    return vector, vector and masked_tails and pat.w.stride == 1
