"""The schedule space of any computation: the default schedule's parameters per stage."""

from __future__ import annotations

from lowering.default_schedule import default_schedule
from lowering.lower import lower_kernel
from lowering.search.space import BuiltKernel, Config, ScheduleSpace


class DefaultSpace(ScheduleSpace):
    kind = "default"

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        lanes = self.target.vector_lanes_f32  # type: ignore[attr-defined]
        return BuiltKernel(lower_kernel(name, self.inputs, self.outputs,
                                        lambda t: default_schedule(t, lanes)))

    def cost(self, config: Config) -> float:
        return self.flops() / 1e9
