"""The schedule space of any computation: the default schedule's decisions per stage, as knobs.

Knobs come from static analysis of each stage (how many spatial and reduce loops, how long), so a
knob exists only where its options make different kernels:
- `sI.vec`: which spatial loop is vectorised (0 = innermost, k = k-th from the innermost moved
  innermost, -1 = none, which leaves the reduce loops innermost);
- `sI.block`: reductions, block of the vectorised loop (the output slice kept hot);
- `sI.split`: element-wise stages, split of a long vectorised loop (chunks for the threads);
- `sI.fuse`: how many outer loops are fused into the parallel loop;
- `sI.unroll`: unroll the short innermost reduce loops (a convolution window).
The first option of each knob is what `default_schedule` does on its own.
"""

from __future__ import annotations

from lowering import te
from lowering.default_schedule import (
    ELEMENTWISE_SPLIT,
    NO_VEC,
    REDUCTION_BLOCK,
    StageChoices,
    StageShape,
    default_schedule,
)
from lowering.lower import lower_kernel, stages_of
from lowering.nest import NestOp
from lowering.search.cost_model import stage_seconds, threaded_seconds
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace

_MAX_VEC_CANDIDATES = 3  # vectorising a loop far from the innermost one strides through memory
_BLOCK_LANE_MULTIPLES = (2, 4, 8, 16, 32, 64)
_SPLITS = (1024, 2048, ELEMENTWISE_SPLIT, 16384)


def stage_knobs(shape: StageShape, lanes: int, prefix: str) -> list[Knob]:
    """The knobs of one stage with this structure on a target with `lanes` f32 lanes."""
    knobs: list[Knob] = []
    auto = shape.auto_vec(lanes)
    vec = [auto]
    if auto == NO_VEC and shape.spatial and shape.spatial[-1] > 1:
        vec.append(0)
    for k in range(1, len(shape.spatial)):
        if len(vec) > _MAX_VEC_CANDIDATES:
            break
        if shape.spatial[-1 - k] >= lanes:
            vec.append(k)
    if shape.reduce and auto != NO_VEC:
        vec.append(NO_VEC)
    if len(vec) > 1:
        knobs.append(Knob(f"{prefix}vec", tuple(vec)))
    longest = max((shape.spatial[-1 - k] for k in vec if k != NO_VEC), default=1)

    def effective(factors: list[int]) -> tuple[int, ...]:
        # a factor no shorter than every candidate loop does nothing: it is the same as 0
        out: list[int] = []
        for f in factors:
            f = f if 0 < f < longest else 0
            if f not in out:
                out.append(f)
        return tuple(out)

    if shape.reduce:
        blocks = effective([REDUCTION_BLOCK, 0, *(lanes * m for m in _BLOCK_LANE_MULTIPLES)])
        if len(blocks) > 1:
            knobs.append(Knob(f"{prefix}block", blocks))
    else:
        splits = effective([shape.auto_split(), 0, *_SPLITS])
        if len(splits) > 1:
            knobs.append(Knob(f"{prefix}split", splits))
    outer = sum(1 for e in (shape.spatial[:-1] if auto != NO_VEC else shape.spatial) if e > 1)
    if outer >= 2:  # 0: all of them (the default)
        knobs.append(Knob(f"{prefix}fuse", (0, *range(outer - 1, 0, -1))))
    if shape.short_reduce():
        # unrolled windows measured 2-6x faster (3x3 pooling, direct convolutions)
        knobs.append(Knob(f"{prefix}unroll", (True, False)))
    return knobs


class DefaultSpace(ScheduleSpace):
    kind = "default"

    def __init__(self, inputs, outputs, consts, target) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.lanes = target.vector_lanes_f32
        # (a hand-written nest has no knobs: lowering/nest.py)
        self.stages = [t for t in stages_of(self.outputs)
                       if t.op is not None and not t.op.inline and not isinstance(t.op, NestOp)]
        for i, t in enumerate(self.stages):
            self.knobs += stage_knobs(StageShape.of(t), self.lanes, f"s{i}.")
        self._estimates: dict[str, tuple[float, float]] = {}

    def choices(self, config: Config, stage: int) -> StageChoices:
        def get(name: str) -> object:
            return config.get(f"s{stage}.{name}")

        return StageChoices(vec=get("vec"), block=get("block"), split=get("split"),  # type: ignore[arg-type]
                            fuse=get("fuse"), unroll=bool(get("unroll")))  # type: ignore[arg-type]

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        index = {id(t): i for i, t in enumerate(self.stages)}

        def schedule(t: te.Tensor):
            return default_schedule(t, self.lanes, self.choices(config, index[id(t)]))

        return BuiltKernel(lower_kernel(name, self.inputs, self.outputs, schedule))

    def cost(self, config: Config) -> float:
        return self._estimate(config)[0]

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        serial, threaded = self._estimate(config)
        if one_core is None:
            return threaded
        return one_core * threaded / serial if serial > 0 else one_core

    def _estimate(self, config: Config) -> tuple[float, float]:
        """(one-core, threaded) estimates, cached: the search asks for the same ones often."""
        key = repr(sorted(config.items()))
        if key not in self._estimates:
            kernel = self.build(config).kernel
            stages = stage_seconds(kernel, self.target.machine)
            self._estimates[key] = (sum(stages), threaded_seconds(
                kernel, stages, self.target.machine.cores))
        return self._estimates[key]
