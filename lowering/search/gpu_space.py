"""The schedule space of any computation on a GPU target: the GPU default schedule
(lowering/gpu_schedule.py), no knobs yet. Its cost model counts what every thread moves and
computes against the device's bandwidth and peak (the larger of the two), enough to rank the
kernels of one model for a tuning budget; templates of their own come with their spaces."""

from __future__ import annotations

from lowering import te
from lowering.gpu_schedule import gpu_default_schedule
from lowering.lower import lower_kernel
from lowering.machine import GpuMachine
from lowering.search.space import BuiltKernel, Config, ScheduleSpace


class GpuDefaultSpace(ScheduleSpace):
    kind = "gpu-default"

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        machine = self.target.machine
        assert isinstance(machine, GpuMachine)
        return BuiltKernel(lower_kernel(name, self.inputs, self.outputs,
                                        lambda t: gpu_default_schedule(t, machine)))

    def cost(self, config: Config) -> float:
        machine = self.target.machine
        assert isinstance(machine, GpuMachine)
        moved = sum(t.size * te.ITEMSIZE[t.dtype] for t in [*self.inputs, *self.outputs])
        work = 0
        for t in self.outputs:
            body = t.op.body if t.op is not None else None
            steps = 1
            if isinstance(body, te.Reduce):
                for ax in body.axes:
                    steps *= ax.extent
            work += 2 * t.size * steps
        return max(moved / machine.memory_bandwidth, work / machine.peak_flops)

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        return self.cost(config) if one_core is None else one_core
