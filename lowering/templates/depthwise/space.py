"""The depthwise template's space: its knobs, its cost model and the entry the search selects."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.machine import Target
from lowering.search.cost_model import worth_parallel
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.templates.depthwise.build import _Builder
from lowering.templates.depthwise.forms import (
    POOL_MIN_WIDTH,
    masked_plane_ok,
    narrow_pool_form,
    padded_plane_ok,
    row_run_form,
    split_axis,
    split_ok,
)
from lowering.templates.depthwise.pattern import DepthwisePattern, analyze

# cycles of loop overhead per loop over a run of outputs (set-up, remainder, scalar borders)
PIECE_CYCLES = 20
# An integer window's tap in the row form, against a float one's load and FMA: the 8-bit load
# widened, its zero point subtracted, an int32 multiply and add, per use (the plane forms
# convert each element once, in their copy). MobileNetV2 int8's depthwise layers on one Zen 3
# core ran 2.3-5.5x the row form's float estimate at stride 1 and 4.5x at stride 2.
INTEGER_ROW_TAP = 4.0
# the forms of pools narrower than POOL_MIN_WIDTH (narrow_pool_form)
NARROW_FORMS = ("row_vectors", "split")
# cycles per vector of a NaN-aware maximum (te's max: llvm.maximumnum, six instructions on
# AVX-512; the narrow pools' cost)
MAX_CYCLES = 3


class DepthwiseTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> DepthwiseSpace | None:
        pat = analyze(outputs)
        if pat is None or not any(pat.x is t for t in inputs):
            return None
        if pat.weight is None and pat.w.out < POOL_MIN_WIDTH and \
                narrow_pool_form(pat, target.vector_lanes_f32) is None:
            return None
        return DepthwiseSpace(inputs, outputs, consts, target, pat)


class DepthwiseSpace(ScheduleSpace):
    kind = "depthwise"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target,
                 pat: DepthwisePattern) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.pat = pat
        self.knobs = [Knob("rows", (2, 1, 4))]  # output rows per interior iteration
        # the masked plane form fills padding with the combiner's identity, which an integer
        # input less its zero point does not have; the padded form copies an integer input's
        # values (less its zero point) and pads them with zeros
        if pat.weight is None and pat.w.out < POOL_MIN_WIDTH:  # a narrow pool: one form
            self.knobs.append(Knob("plane", (narrow_pool_form(pat, target.vector_lanes_f32),)))
        elif padded_plane_ok(pat, target.vector_lanes_f32, target.masked_vectors):
            forms = ("rows", "padded", "masked") if not pat.integer and masked_plane_ok(pat) \
                else ("rows", "padded")
            self.knobs.append(Knob("plane", forms))
        elif pat.integer and split_ok(pat):  # strided: the copy split by stride phase
            self.knobs.append(Knob("plane", ("rows", "split")))

    def canonical(self, config: Config) -> Config:
        """The split form has no rows per iteration to choose."""
        return {**config, "rows": 2} if config.get("plane") == "split" else config

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        form = config.get("plane", "rows")
        # the narrow pools' forms (whose cost counts their maxima) run in parallel from a time
        # worth sharing; the others from PARALLEL_MIN_WORK taps
        dear = form in NARROW_FORMS and worth_parallel(self.cost(config),
                                                       self.target.machine.cores)
        b = _Builder(self, int(config["rows"]), name, dear)  # type: ignore[call-overload]
        return BuiltKernel(b.padded_kernel() if form == "padded" else
                           b.masked_kernel() if form == "masked" else
                           b.row_vectors_kernel() if form == "row_vectors" else
                           b.split_kernel(self.target.vector_lanes_f32) if form == "split" else
                           b.kernel())

    def cost(self, config: Config) -> float:
        """Vector loads dominate: kh*kw per output vector, shared between rows of a block, at
        the machine's loads per cycle; each loop over a run of a row (or over a plane's stage)
        costs PIECE_CYCLES besides, which is what short rows pay for most, and the row form's
        outputs outside whole vectors cost a load per tap each (_scalar_taps). The padded-plane
        form copies the plane into its padding, computes one vector loop over the plane in the
        padded row pitch and copies the output rows out."""
        pat, m = self.pat, self.target.machine
        lanes = self.target.vector_lanes_f32
        loads = m.loads_per_cycle
        taps = pat.h.taps * pat.w.taps
        planes = math.prod(pat.conv.shape[:2])
        if config.get("plane") == "masked":  # a load, a select and an FMA per tap and vector
            vectors = math.ceil(pat.h.out * pat.w.out / lanes)
            return planes * (vectors * taps * 1.5 + PIECE_CYCLES) / m.hz
        # the narrow pools' forms: a load and a combine per tap and vector, a NaN-aware
        # maximum being MAX_CYCLES (llvm.maximumnum's sign and NaN fix-ups around the max)
        per_tap = 1 + (MAX_CYCLES if pat.combiner == "max" else 1)
        if config.get("plane") == "row_vectors":  # per row of whole vectors
            vectors = pat.h.out * math.ceil(pat.w.out / lanes)
            return planes * (vectors * taps * per_tap + pat.h.out * PIECE_CYCLES) / m.hz
        if config.get("plane") == "split":  # fill, copy, window, copy out
            (_, _, hq), (_, _, wq) = split_axis(pat.h, pat.x.shape[2]), \
                split_axis(pat.w, pat.x.shape[3])
            virtual = (pat.h.out - 1) * wq + pat.w.out
            per_plane = (pat.h.stride * pat.w.stride * hq * wq + pat.x.shape[2] * pat.x.shape[3]
                         ) / lanes + math.ceil(virtual / lanes) * taps * per_tap \
                + pat.h.out * (math.ceil(pat.w.out / lanes) + PIECE_CYCLES) + 3 * PIECE_CYCLES
            return planes * per_plane / m.hz
        if config.get("plane") == "padded":
            hp, wp = len(pat.h.valid), len(pat.w.valid)
            virtual = (pat.h.out - 1) * wp + pat.w.out
            per_plane = (hp * wp / lanes + math.ceil(virtual / lanes) * max(taps / loads, 1)
                         + pat.h.out * (math.ceil(pat.w.out / lanes) + PIECE_CYCLES)
                         + 3 * PIECE_CYCLES)
            return planes * per_plane / m.hz
        rows = int(config["rows"])  # type: ignore[call-overload]
        taps_h = pat.h.taps
        loads_per_row = (taps_h + (rows - 1) * min(taps_h, pat.h.stride)) * pat.w.taps / rows
        vectors = math.prod(pat.conv.shape) / lanes
        w_runs = pat.w.runs()
        pieces = planes * pat.h.out * len(w_runs)
        # (an integer tap along a strided row also gathers its 8-bit elements: stride times
        # the loads and shuffles)
        per_tap = INTEGER_ROW_TAP * pat.w.stride if pat.integer else 1.0
        return (vectors * max(loads_per_row, taps) * per_tap / loads
                + pieces * PIECE_CYCLES
                + planes * pat.h.out * self._scalar_taps(w_runs, lanes) * per_tap / loads) / m.hz

    def _scalar_taps(self, w_runs: list[tuple[int, int, tuple[int, ...]]], lanes: int) -> int:
        """Taps a row of the row form computes one element at a time: the border runs', and,
        without masked tails, the interior run's last partial vector (a 112-wide 3x3 row on 8
        lanes: 6 of its 110 interior outputs, 54 taps beside its 13 vectors' 117)."""
        pat = self.pat
        scalar = 0
        for first, end, taps_w in w_runs:
            vector, masked = row_run_form(pat, first, end, taps_w, self.target.masked_vectors)
            n = 0 if masked else (end - first) % lanes if vector else end - first
            scalar += n * len(taps_w) * pat.h.taps
        return scalar
