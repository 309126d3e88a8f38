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
local-memory staging), which suits a GPU whose local memory is ordinary memory. `tile_axes`
finds the two axes from the stage's loads alone.

Staged tiles (`stage_tiles`, where the machine has local memory): a block's threads form a
2-D grid over the two tile axes, so a block computes a rectangle of (threads x register tile)
outputs; the reduction is split into chunks, and per chunk the block's threads copy the slices
of the operands the rectangle reads into local memory together (`Schedule.stage`, barriers on
either side), then each computes its register tile from the copies. An operand is then read
from device memory once per block instead of once per thread.

Run-time dimensions (`te.DynExtent` axes, `--input-shape x=1,1..N`): the grid stays sized for
the bound N (the launches are constants; computing it from the length at launch time would
save idle threads at short lengths, not needed for correctness), and the kernels take the
length as an argument. A spatial loop over the dimension is fused at the bound like any other,
and a guard (a loop of `min(1, length - index)` iterations, right inside the thread loop)
makes a thread past the length compute, load and store nothing; a register-tiled axis over it
instead runs its tile loop `min(tile, length - start)` times (none past it); reduce loops over
it run to the length. Staging, matrix instructions, partial sums and trees are not offered
for such stages (gpu_space.py).

Decided from the stage's loops and the target's `GpuMachine`, never from operator names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowering import te
from lowering.default_schedule import SHORT_LOOP
from lowering.machine import GpuMachine
from lowering.regions import infer_region
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
    if any(lp.bound is not None and not isinstance(lp.bound, te.DimVar) for lp in s.leaves):
        raise ScheduleError(f"{tensor.name}: a loop whose extent depends on another")
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    # spatial loops over a run-time dimension (module docstring): the grid is laid out for
    # the bound, and the threads past the length skip the element (`guarded`) or, for a
    # register-tiled axis, run a tile loop of no iterations (the split's partial extent)
    dynamic = {id(lp): lp.bound for lp in spatial if lp.bound is not None}
    guarded: list[tuple[te.Var, te.Expr]] = []
    inner: list[Loop] = []
    same = s.body is tensor.op.body or s.rewritten is not None  # type: ignore[union-attr]
    found = tile_axes(tensor) if tile != (1, 1) and same else None
    axis_of = {id(lp): ax.var for lp, ax in zip(spatial, tensor.op.axes, strict=True)}  # type: ignore[union-attr]
    if found is not None:
        rows, cols = spatial[found[0]], spatial[found[1]]
        outer_spatial = []
        for lp in spatial:
            factor = tile[0] if lp is rows else tile[1] if lp is cols else 1
            if factor > 1 and lp.extent > 1:
                out, inn = s.split(lp, min(factor, lp.extent))
                out.bound = None  # to the bound: past the length its tile loop runs 0 times
                outer_spatial.append(out)
                inner.append(inn)
            else:
                outer_spatial.append(lp)
        spatial = outer_spatial
        s.reorder(*spatial, *reduce, *inner)
    for lp in spatial:
        if id(lp) in dynamic:
            guarded.append((axis_of[id(lp)], dynamic[id(lp)]))  # type: ignore[arg-type]
            lp.bound = None
    if spatial:
        fused = spatial[0]
        for lp in spatial[1:]:
            fused = s.fuse(fused, lp)
        count = min(threads or machine.block_threads, machine.max_block_threads)
        blocks, lanes = s.split(fused, max(1, min(count, fused.extent)))  # 0: an empty tensor
        s.bind(blocks, "block")
        s.bind(lanes, "thread")
        if guarded:
            _guard(s, guarded)
    elif guarded:
        raise ScheduleError(f"{tensor.name}: a run-time dimension without a spatial loop")
    short = [lp for lp in reduce if 2 <= lp.extent <= SHORT_LOOP and lp.bound is None]
    for lp in reduce[len(reduce) - _innermost_run(reduce, short):]:
        s.unroll(lp)
    for lp in inner:
        s.unroll(lp)
    if inner and vector_columns(tensor, machine, inner[-1].extent):
        s.vectorize(inner[-1])
    return s


@dataclass(frozen=True)
class Guard:
    """`bind_threads`' record of a guard: the stage's axes that stop at a run-time length."""

    axes: tuple[str, ...]


def _guard(s: StageSchedule, guarded: list[tuple[te.Var, te.Expr]]) -> None:
    """Put a loop of `min(1, length - index)` iterations (the loop IR's "if") for each
    run-time axis right inside the thread loop: a thread whose element lies past the length
    computes, loads and stores nothing (its indices would read the bound's stale rows, and a
    gather's garbage indices could leave the buffers)."""
    for k, (var, length) in enumerate(guarded):
        index = s.value[var]
        lp = Loop(f"{var.name}_in{k}", 1, "spatial")
        lp.bound = te.minimum(te.Const(1, "int64"), length - index)
        s.leaves.insert(2 + k, lp)
    s.trace.append(Guard(tuple(v.name for v, _ in guarded)))


VECTOR_LANES = 4  # the renderer's vector registers: float4


def vector_columns(tensor: te.Tensor, machine: GpuMachine, cols: int) -> bool:
    """Whether a register tile's columns are held as float4 vectors (TVM's Mali schedule):
    on a machine without fast local memory (where staging is not the way to reuse loads)
    whose loads are 16 bytes wide, for a float32 stage whose tile has a multiple of 4
    columns. The renderer checks that the output and the loads that move with the columns
    are contiguous in them, and keeps the scalar form where not (and at a partial tile)."""
    return (machine.local_memory == 0 and machine.vector_bytes >= 4 * VECTOR_LANES
            and tensor.dtype == "float32" and cols % VECTOR_LANES == 0)


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


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def block_shape(tensor: te.Tensor, tile: Tile, threads: int) -> tuple[int, int]:
    """Threads (along rows, along cols) of a staged block over `tensor`'s tile axes: about
    square (the most reuse of both operands' copies for the threads), no longer along an
    axis than its register tiles need, at most `threads` in all."""
    axes = tile_axes(tensor)
    assert axes is not None
    row_tiles = math.ceil(tensor.shape[axes[0]] / tile[0])
    col_tiles = math.ceil(tensor.shape[axes[1]] / tile[1])
    tx = min(_pow2_at_least(math.isqrt(max(1, threads - 1)) + 1), _pow2_at_least(col_tiles))
    tx = min(tx, threads)
    ty = min(max(1, threads // tx), _pow2_at_least(row_tiles))
    tx = min(max(1, threads // ty), _pow2_at_least(col_tiles))
    return ty, tx


def staged_loads(tensor: te.Tensor) -> list[te.Load]:
    """The loads of a register-tiled reduction worth staging: each of a tensor read once by
    the reduction's body (not by its initial value), moving with the reduction's first axis
    (new values every chunk) and ignoring one of the tile axes (shared by a row or column of
    the block's threads)."""
    axes = tile_axes(tensor)
    op = tensor.op
    if axes is None or op is None or not isinstance(op.body, te.Reduce):
        return []
    body = op.body
    loads = te.loads_in(body.body)
    in_init = {id(t) for t in te.tensors_read(body.init)}
    first = body.axes[0].var
    out = []
    for ld in loads:
        if sum(x.tensor is ld.tensor for x in loads) != 1 or id(ld.tensor) in in_init:
            continue
        if any(te.loads_in(ix) for ix in ld.indices):
            continue  # an indirect read: its box is not known before it runs
        if not any(te.mentions(ix, first) for ix in ld.indices):
            continue
        if any(not any(te.mentions(ix, op.axes[pos].var) for ix in ld.indices) for pos in axes):
            out.append(ld)
    return out


def staged_bytes(tensor: te.Tensor, tile: Tile, block: tuple[int, int], chunk: int) -> int:
    """Local memory a staged block of `block` threads with `tile` register tiles and chunks
    of `chunk` reduction steps holds: the box of each staged operand that the block tile
    reads in one chunk (the same bound inference the lowering does)."""
    op = tensor.op
    axes = tile_axes(tensor)
    assert op is not None and isinstance(op.body, te.Reduce) and axes is not None
    sweep: dict[te.Var, te.Expr] = {}
    inner: dict[te.Var, int] = {}
    for pos, n, span in zip(axes, tile, block, strict=True):
        v = te.Var(f"sweep{pos}")
        sweep[op.axes[pos].var] = v
        inner[v] = min(n * span, op.axes[pos].extent)
    for i, ax in enumerate(op.body.axes):
        inner[ax.var] = min(chunk, ax.extent) if i == 0 else ax.extent
    total = 0
    for ld in staged_loads(tensor):
        region = infer_region([[te.substitute(ix, sweep) for ix in ld.indices]],
                              ld.tensor.shape, inner, {})
        total += math.prod(region.extent) * max(1, te.ITEMSIZE.get(ld.tensor.dtype, 1))
    return total


def stage_tiles(sched: Schedule, t: te.Tensor, machine: GpuMachine, tile: Tile,
                threads: int | None, chunk: int) -> bool:
    """Schedule `t` as a staged block tile (module docstring): whether it applied (a
    register-tiled reduction with operands to stage whose copies fit the machine's local
    memory); if not, `t` is left as it was."""
    count = min(threads or machine.block_threads, machine.max_block_threads)
    axes = tile_axes(t)
    if machine.local_memory <= 0 or axes is None or not staged_loads(t) or chunk < 1:
        return False
    tile = (min(tile[0], t.shape[axes[0]]), min(tile[1], t.shape[axes[1]]))
    block = block_shape(t, tile, count)
    if staged_bytes(t, tile, block, chunk) > machine.local_memory:
        return False
    s = sched[t]
    if s.trace or s.body is not t.op.body or any(lp.bound is not None for lp in s.leaves):  # type: ignore[union-attr]
        return False
    spatial = [lp for lp in s.leaves if lp.origin == "spatial"]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    rows, cols = spatial[axes[0]], spatial[axes[1]]
    rb, rt, ri = s.block_split(rows, block[0], tile[0])
    cb, ct, ci = s.block_split(cols, block[1], tile[1])
    ko, ki = s.split(reduce[0], min(chunk, reduce[0].extent))
    outer = [rb if lp is rows else cb if lp is cols else lp for lp in spatial]
    s.reorder(*outer, rt, ct, ko, ki, *reduce[1:], ri, ci)
    fused = outer[0]
    for lp in outer[1:]:
        fused = s.fuse(fused, lp)
    s.bind(fused, "block")
    s.bind(s.fuse(rt, ct), "thread")
    inner = [ki, *reduce[1:]]
    short = [lp for lp in inner if 2 <= lp.extent <= SHORT_LOOP and lp.tail is None]
    for lp in inner[len(inner) - _innermost_run(inner, short):]:
        s.unroll(lp)
    s.unroll(ri)
    s.unroll(ci)
    for tensor in dict.fromkeys(ld.tensor for ld in staged_loads(t)):
        sched.stage(tensor, t, ko)
    return True
