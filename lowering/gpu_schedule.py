"""The schedule every stage gets on a GPU target without a template: one thread per output
element.

A stage's spatial loops are fused into one and split by the machine's threads per block; the
outer part is bound to the grid's blocks and the inner part to a block's threads, so that
neighbouring threads write neighbouring elements (coalesced stores, and coalesced loads
wherever the inputs follow the output's layout). Reduce loops run serially inside each thread
(short ones unrolled, as on the CPU). A stage with no spatial loop (a reduction to one value)
keeps its loops serial; the renderer runs such a nest on a single thread.

Decided from the stage's loops and the target's `GpuMachine`, never from operator names.
"""

from __future__ import annotations

from lowering import te
from lowering.default_schedule import StageShape
from lowering.machine import GpuMachine
from lowering.schedule import ScheduleError, StageSchedule


def gpu_default_schedule(tensor: te.Tensor, machine: GpuMachine) -> StageSchedule:
    s = StageSchedule(tensor)
    if any(lp.bound is not None for lp in s.leaves):
        raise ScheduleError(f"{tensor.name}: a loop over a run-time dimension; GPU targets "
                            "take static shapes only for now")
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    if spatial:
        fused = spatial[0]
        for lp in spatial[1:]:
            fused = s.fuse(fused, lp)
        threads = min(machine.block_threads, fused.extent)
        blocks, lanes = s.split(fused, threads)
        s.bind(blocks, "block")
        s.bind(lanes, "thread")
    for lp in reduce[len(reduce) - StageShape.of(tensor).short_reduce():]:
        s.unroll(lp)
    return s
