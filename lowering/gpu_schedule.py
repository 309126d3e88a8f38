"""The schedules of a GPU target's stages: one thread per output element, or per register
tile of a reduction.

Default: a stage's spatial loops are fused into one and split by the threads per block; the
outer part is bound to the grid's blocks and the inner part to a block's threads, so that
neighbouring threads write neighbouring elements (coalesced stores, and coalesced loads
wherever the inputs follow the output's layout). Reduce loops run serially inside each thread
(short ones unrolled, as on the CPU). A stage with no spatial loop (a reduction to one value)
keeps its loops serial; the renderer runs such a nest on a single thread.

Register tiles (`tile` = (rows, cols)): a reduction whose inputs each ignore one of two of
its spatial axes (a matrix product's A ignores the columns, B the rows; a convolution's
weights ignore the pixels, its input the output channels) gives each thread a rows x cols
tile of those two axes, innermost under the reduce loops: every value a thread loads is used
rows or cols times from registers (the renderer keeps the tile's partial results in a
register array, targets/gpu/render.py). This is TVM's Mali schedule (tiles in registers, no
local-memory staging), which suits a GPU whose local memory is ordinary memory; staged tiles
are a later template. `tile_axes` finds the two axes from the stage's loads alone.

Decided from the stage's loops and the target's `GpuMachine`, never from operator names.
"""

from __future__ import annotations

from lowering import te
from lowering.default_schedule import SHORT_LOOP
from lowering.machine import GpuMachine
from lowering.schedule import Loop, Schedule, ScheduleError, StageSchedule

Tile = tuple[int, int]


def tile_axes(tensor: te.Tensor) -> tuple[int, int] | None:
    """Positions (rows, cols) among the stage's spatial axes of a register tile: cols the
    innermost axis longer than 1, rows the innermost other one longer than 1, such that some
    tensor the reduction reads ignores rows and some other ignores cols (each load is then
    reused across the tile). None for a stage that is not such a reduction."""
    op = tensor.op
    if op is None or not isinstance(op.body, te.Reduce):
        return None
    loads = [ld for ld in te.loads_in(te.expand_inline(op.body.body)) if ld.tensor.op is None
             or not ld.tensor.op.inline]
    axes = [ax for ax in op.axes]
    long_axes = [i for i, ax in enumerate(axes) if ax.extent > 1]
    if len(long_axes) < 2 or not loads:
        return None

    def ignores(ld: te.Load, pos: int) -> bool:
        return not any(te.mentions(ix, axes[pos].var) for ix in ld.indices)

    cols = long_axes[-1]
    if not any(ignores(ld, cols) for ld in loads):
        return None
    for rows in reversed(long_axes[:-1]):
        if any(ignores(ld, rows) and not ignores(ld, cols) for ld in loads) and any(
                ignores(ld, cols) and not ignores(ld, rows) for ld in loads):
            return rows, cols
    return None


def gpu_default_schedule(tensor: te.Tensor, machine: GpuMachine, tile: Tile = (1, 1),
                         threads: int | None = None) -> StageSchedule:
    """The stage's schedule; `tile` applies where `tile_axes` finds the axes (else (1, 1)),
    `threads` per block defaults to the machine's."""
    return bind_threads(StageSchedule(tensor), machine, tile, threads)


def bind_threads(s: StageSchedule, machine: GpuMachine, tile: Tile = (1, 1),
                 threads: int | None = None) -> StageSchedule:
    """`s` (a stage's loops as created) scheduled as `gpu_default_schedule` says."""
    tensor = s.tensor
    if any(lp.bound is not None for lp in s.leaves):
        raise ScheduleError(f"{tensor.name}: a loop over a run-time dimension; GPU targets "
                            "take static shapes only for now")
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    inner: list[Loop] = []
    found = tile_axes(tensor) if tile != (1, 1) and s.body is tensor.op.body else None  # type: ignore[union-attr]
    if found is not None:
        rows, cols = spatial[found[0]], spatial[found[1]]
        outer_spatial = []
        for lp in spatial:
            factor = tile[0] if lp is rows else tile[1] if lp is cols else 1
            if factor > 1 and lp.extent > 1:
                out, inn = s.split(lp, min(factor, lp.extent))
                outer_spatial.append(out)
                inner.append(inn)
            else:
                outer_spatial.append(lp)
        spatial = outer_spatial
        s.reorder(*spatial, *reduce, *inner)
    if spatial:
        fused = spatial[0]
        for lp in spatial[1:]:
            fused = s.fuse(fused, lp)
        count = min(threads or machine.block_threads, machine.max_block_threads)
        blocks, lanes = s.split(fused, max(1, min(count, fused.extent)))  # 0: an empty tensor
        s.bind(blocks, "block")
        s.bind(lanes, "thread")
    short = [lp for lp in reduce if 2 <= lp.extent <= SHORT_LOOP]
    for lp in reduce[len(reduce) - _innermost_run(reduce, short):]:
        s.unroll(lp)
    for lp in inner:
        s.unroll(lp)
    return s


def _innermost_run(loops: list[Loop], short: list[Loop]) -> int:
    """How many of `loops`, innermost first, are in `short` without a gap."""
    n = 0
    for lp in reversed(loops):
        if all(lp is not x for x in short):
            break
        n += 1
    return n


def split_reduction(sched: Schedule, t: te.Tensor, partials: int) -> te.Tensor:
    """Two passes for a reduction of few outputs over many values: `partials` threads per
    output each combine every `partials`-th value (neighbouring threads read neighbouring
    values), into a stage of partial results (returned, not yet scheduled); `t` then combines
    those. Each pass is its own launch, so no thread waits on another's."""
    s = sched[t]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    fused = reduce[0]
    for lp in reduce[1:]:
        fused = s.fuse(fused, lp)
    _, lanes = s.split(fused, partials)
    return sched.rfactor(t, lanes)
