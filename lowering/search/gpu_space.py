"""The schedule space of any computation on a GPU target: per stage, the register tile of a
reduction (lowering/gpu_schedule.py, where `tile_axes` finds one), whether its operands are
staged in local memory and in chunks of how many reduction steps (`stage_tiles`; only on a
machine with local memory), whether it runs on a matrix instruction (tensor cores: knob
`sI.mma`, the warps of a block along i and j and the instruction steps per chunk, where
`tensorize.match_mma` maps it onto one of the machine's `GpuMachine.mma`; float32 onto tf32
only where the target allows it, `GpuTarget.allow_tf32` from `--allow-tf32`), whether an
integer product of 8-bit values runs on a 4-way dot product (knob `sI.dot`, where
`tensorize.match_int_dot` maps it onto one of `GpuMachine.dots`: the stage rewritten over
packed words, then register-tiled as any reduction), or, for a reduction of few outputs over many values, how many
partial results per output a first pass computes (`split_reduction`, two launches) or how
many threads of one block combine each output in a tree (`StageSchedule.tree_reduce`, one
launch, local memory); and the threads per block. A stage with an axis over a run-time
dimension (`te.DynExtent`, a spatial or a reduce one) gets the register tile and the threads
only: staging, matrix instructions, partial sums and trees lay their blocks out for the
whole axis, so they are not offered there (`bind_threads` makes its loops stop at the
length).

The cost model counts, per stage, the values its threads load (a load that ignores a tile's
rows is shared by the tile's rows, and so on; a staged load by the block tile's rows, read
from device memory once per block, its copies then read from local memory) and its
arithmetic, against the device's bandwidth and peak; a grid with fewer threads than the
device keeps in flight runs at that fraction of the peak. A staged configuration whose copies
do not fit the machine's local memory is built and costed unstaged. Rough (no device to fit
it to yet); enough to prefer tiles that reuse loads while leaving the device enough threads,
which is the trade a register tile makes.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.gpu_schedule import (
    Tile,
    bind_threads,
    block_shape,
    split_reduction,
    stage_tiles,
    staged_bytes,
    staged_loads,
    tile_axes,
)
from lowering.intrinsics import GPU_INT_DOTS, MMA_INSTRUCTIONS
from lowering.lower import lower_schedule, stages_of
from lowering.machine import GpuMachine, GpuTarget
from lowering.nest import hand_nests
from lowering.schedule import Schedule, ScheduleError
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.tensorize import IntDotMatch, MmaMatch, match_int_dot, match_mma

_TILES: tuple[Tile, ...] = ((4, 4), (2, 4), (4, 2), (2, 2), (1, 4), (4, 8), (8, 4), (1, 1))
_PARTIALS = (64, 256, 1024, 4096)
# threads of a block-level tree reduction (one output per block)
_TREE_THREADS = (256, 64, 1024)
# a launch's fixed cost: what a tree reduction saves over a split one's second launch
_LAUNCH_SECONDS = 3e-6
# reduction steps per staged chunk, the default first (0: not staged)
_CHUNKS = (16, 8, 32)
# local memory's bandwidth as a multiple of device memory's, and a barrier's cost in cycles
_LOCAL_SPEEDUP = 8
_BARRIER_CYCLES = 64
# threads resident per compute unit that hide the latency of its loads (a rule of thumb: a
# few warps per scheduler)
_RESIDENT_WARPS = 16
# matrix-instruction tiles: (warps along i, warps along j, instruction steps per staged chunk)
_MMA_TILES = ((2, 2, 2), (2, 4, 2), (4, 2, 2), (1, 1, 2), (2, 2, 1))
# warps per compute unit that keep its tensor cores busy
_MMA_WARPS = 8


def _dynamic(t: te.Tensor) -> bool:
    """Whether a stage has a spatial or reduce axis over a run-time dimension."""
    assert t.op is not None
    reduce = t.op.body.axes if isinstance(t.op.body, te.Reduce) else ()
    return any(isinstance(ax.extent, te.DynExtent) for ax in [*t.op.axes, *reduce])


def mma_match(t: te.Tensor, machine: GpuMachine, arch: str | None,
              allow_opt_in: bool = False) -> MmaMatch | None:
    """The first of the machine's matrix instructions (available at `arch`, CUDA's sm_XX)
    that `t`'s computation matches (tensorize.match_mma; an opt-in one, tf32, only where
    `allow_opt_in`), else None."""
    sm = int("".join(ch for ch in arch if ch.isdigit()) or 0) if arch else 0
    for name in machine.mma:
        instr = MMA_INSTRUCTIONS[name]
        if sm and sm < instr.min_sm:
            continue
        found = match_mma(t, instr, allow_opt_in)
        if found:
            return found
    return None


def int_dot_match(t: te.Tensor, machine: GpuMachine, arch: str | None) -> IntDotMatch | None:
    """The machine's dot instruction (available at `arch`) that computes `t`'s integer
    products with the fewest zero-point corrections (tensorize.match_int_dot), else None."""
    sm = int("".join(ch for ch in arch if ch.isdigit()) or 0) if arch else 0
    found = [m for name in machine.dots if not (sm and sm < GPU_INT_DOTS[name].min_sm)
             for m in [match_int_dot(t, GPU_INT_DOTS[name])] if m]
    return min(found, key=lambda m: m.corrections) if found else None


def mma_bytes(match: MmaMatch, tile: tuple[int, int, int]) -> int:
    """Local memory of a matrix-instruction block: the staged A and B chunks (of the
    operand type) and the float32 output tile."""
    i = match.instr
    bm, bn, kc = i.m * tile[0], i.n * tile[1], i.k * tile[2]
    return te.ITEMSIZE[i.operand] * (bm * kc + kc * bn) + 4 * bm * bn


class GpuDefaultSpace(ScheduleSpace):
    kind = "gpu-default"

    def __init__(self, inputs, outputs, consts, target: GpuTarget) -> None:
        super().__init__(inputs, outputs, consts, target)  # type: ignore[arg-type]
        assert isinstance(target.machine, GpuMachine)
        self.machine: GpuMachine = target.machine
        self.stages = [t for t in stages_of(self.outputs) if t.op is not None and not t.op.inline]
        for t in hand_nests(self.stages):  # serial nests for CPUs (lowering/nest.py)
            raise ScheduleError(f"{t.name} is a hand-written serial nest")
        self.axes = [tile_axes(t) for t in self.stages]
        dynamic = [_dynamic(t) for t in self.stages]
        for i, (t, axes) in enumerate(zip(self.stages, self.axes, strict=True)):
            if axes is None:
                continue
            rows, cols = t.shape[axes[0]], t.shape[axes[1]]
            tiles = [tl for tl in _TILES if tl[0] <= rows and tl[1] <= cols]
            if len(tiles) > 1:
                self.knobs.append(Knob(f"s{i}.tile", tuple(list(tl) for tl in tiles)))
            assert isinstance(t.op.body, te.Reduce)  # type: ignore[union-attr]
            first = t.op.body.axes[0].extent  # type: ignore[union-attr]
            if self.machine.local_memory > 0 and staged_loads(t) and not dynamic[i]:
                chunks = [c for c in _CHUNKS if c < first] or [first]
                self.knobs.append(Knob(f"s{i}.stage", (*chunks, 0)))
        m = self.machine
        self.mma: list[MmaMatch | None] = [
            None if dyn else mma_match(t, m, target.arch, target.allow_tf32)
            for t, dyn in zip(self.stages, dynamic, strict=True)]
        self.dot: list[IntDotMatch | None] = [
            None if dyn else int_dot_match(t, m, target.arch)
            for t, dyn in zip(self.stages, dynamic, strict=True)]
        for i, got in enumerate(self.dot):
            if got is not None:
                self.knobs.append(Knob(f"s{i}.dot", (1, 0)))
        for i, found in enumerate(self.mma):
            if found is None:
                continue
            big_m, big_n, _ = found.extents
            tiles = [list(tl) for tl in _MMA_TILES
                     if 32 * tl[0] * tl[1] <= m.max_block_threads
                     and mma_bytes(found, tl) <= m.local_memory
                     and found.instr.m * tl[0] <= max(found.instr.m, big_m)
                     and found.instr.n * tl[1] <= max(found.instr.n, big_n)]
            if tiles:
                self.knobs.append(Knob(f"s{i}.mma", (*tiles, 0)))
        for i, t in enumerate(self.stages):
            assert t.op is not None
            if not isinstance(t.op.body, te.Reduce) or dynamic[i]:
                continue
            steps = math.prod(ax.extent for ax in t.op.body.axes)
            few = t.size < m.compute_units * m.simd_width * _RESIDENT_WARPS
            options = [p for p in _PARTIALS if steps >= 4 * p]
            if few and options:
                self.knobs.append(Knob(f"s{i}.partials", (options[0], 0, *options[1:])))
            trees = [n for n in _TREE_THREADS if n <= m.max_block_threads and steps >= 2 * n]
            if few and trees and m.local_memory > 0:
                self.knobs.append(Knob(f"s{i}.tree", (0, *trees)))
        threads = tuple(dict.fromkeys(n for n in (m.block_threads, 64, 128, 256)
                                      if n <= m.max_block_threads))
        if len(threads) > 1 and self.stages:
            self.knobs.append(Knob("threads", threads))

    def _tile(self, config: Config, i: int) -> Tile:
        got = config.get(f"s{i}.tile")
        return (1, 1) if got is None else (int(got[0]), int(got[1]))  # type: ignore[index]

    def _chunk(self, config: Config, i: int) -> int:
        return int(config.get(f"s{i}.stage") or 0)  # type: ignore[call-overload]

    def _staged(self, config: Config, i: int, threads: int) -> tuple[int, int] | None:
        """The block shape (threads along rows, cols) of stage `i` where the configuration
        stages it and its copies fit local memory, else None (as `stage_tiles` decides)."""
        chunk, t, m = self._chunk(config, i), self.stages[i], self.machine
        axes = self.axes[i]
        if not chunk or axes is None:
            return None
        tile = self._tile(config, i)
        tile = (min(tile[0], t.shape[axes[0]]), min(tile[1], t.shape[axes[1]]))
        block = block_shape(t, tile, min(threads, m.max_block_threads))
        return block if staged_bytes(t, tile, block, chunk) <= m.local_memory else None

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        threads = int(config["threads"]) if config.get("threads") else None  # type: ignore[call-overload]
        sched = Schedule(self.outputs)
        for i, t in enumerate(self.stages):
            partials = int(config.get(f"s{i}.partials") or 0)  # type: ignore[call-overload]
            tree = int(config.get(f"s{i}.tree") or 0)  # type: ignore[call-overload]
            mma = self._mma(config, i)
            dot = self.dot[i] if config.get(f"s{i}.dot") else None
            if dot is not None:  # the rewritten stage, register-tiled (never staged)
                sched.rewrite(t, dot.body(), dot.instr.name)
                bind_threads(sched[t], self.machine, self._tile(config, i), threads)
            elif mma is not None:
                found = self.mma[i]
                assert found is not None
                sched[t].mma_tile(found, (mma[0], mma[1]), mma[2])
            elif tree:
                sched[t].tree_reduce(tree)
            elif partials:
                rf = split_reduction(sched, t, partials)
                bind_threads(sched[rf], self.machine, (1, 1), threads)
                bind_threads(sched[t], self.machine, (1, 1), threads)
            elif not stage_tiles(sched, t, self.machine, self._tile(config, i), threads,
                                 self._chunk(config, i)):
                bind_threads(sched[t], self.machine, self._tile(config, i), threads)
        return BuiltKernel(lower_schedule(name, self.inputs, self.outputs, sched))

    def _mma(self, config: Config, i: int) -> tuple[int, int, int] | None:
        got = config.get(f"s{i}.mma")
        return None if not got else (int(got[0]), int(got[1]), int(got[2]))  # type: ignore[index]

    def _mma_cost(self, i: int, tile: tuple[int, int, int]) -> float:
        """Seconds of stage `i` on its matrix instruction: the padded fragments' work at the
        instruction's peak (`peak_share` of the tensor cores', scaled by how many warps the
        grid keeps per compute unit), or the operands' traffic (A once per block column, B
        once per block row, from device memory mostly through the caches), whichever is
        longer, plus two barriers a chunk."""
        m, found = self.machine, self.mma[i]
        assert found is not None
        ins = found.instr
        big_m, big_n, big_k = found.extents
        t = self.stages[i]
        batch = t.size // (big_m * big_n)
        bm, bn, kc = ins.m * tile[0], ins.n * tile[1], ins.k * tile[2]
        m_tiles, n_tiles, chunks = -(-big_m // bm), -(-big_n // bn), -(-big_k // kc)
        blocks = batch * m_tiles * n_tiles
        in_flight = min(1.0, blocks * tile[0] * tile[1] / (m.compute_units * _MMA_WARPS))
        work = 2 * blocks * bm * bn * chunks * kc
        compute = work / (m.mma_flops * ins.peak_share * in_flight)
        size = te.ITEMSIZE[ins.operand]
        traffic = batch * size * big_k * (big_m * n_tiles + big_n * m_tiles)
        traffic += t.size * te.ITEMSIZE.get(t.dtype, 4)
        waves = math.ceil(blocks / m.compute_units)
        barriers = waves * chunks * 2 * _BARRIER_CYCLES / (m.ghz * 1e9)
        return max(compute, traffic / (2 * m.memory_bandwidth)) + barriers

    def cost(self, config: Config) -> float:
        m = self.machine
        seconds = 0.0
        threads = int(config.get("threads") or m.block_threads)  # type: ignore[arg-type]
        for i, t in enumerate(self.stages):
            assert t.op is not None
            mma = self._mma(config, i)
            if mma is not None:
                seconds += self._mma_cost(i, mma)
                continue
            body = t.op.body
            steps = math.prod(ax.extent for ax in body.axes) if isinstance(body, te.Reduce) else 1
            rows, cols = self._tile(config, i)
            axes = self.axes[i]
            dot = self.dot[i] if config.get(f"s{i}.dot") else None
            tree = 0 if dot else int(config.get(f"s{i}.tree") or 0)  # type: ignore[call-overload]
            partials = 0 if tree or dot else int(config.get(f"s{i}.partials") or 0)  # type: ignore[call-overload]
            if dot is not None:  # one instruction per word, and one per correction
                steps = math.ceil(steps / dot.instr.group) * (1 + dot.corrections)
            value = body.body if isinstance(body, te.Reduce) else body
            block = None if partials or dot else self._staged(config, i, threads)
            staged = {id(ld.tensor) for ld in staged_loads(t)} if block else set()
            loads = local = 0.0  # bytes per output and reduction step: device, local memory
            for top in te.loads_in(value):
                size = te.ITEMSIZE.get(top.tensor.dtype, 1)
                if block is not None and id(top.tensor) in staged:
                    # once per block from device memory (uncached), per tile from local
                    spans = (rows * block[0], cols * block[1])
                    loads += 4 * size / _share(t, axes, top, spans)
                    local += size / _share(t, axes, top, (rows, cols))
                    continue
                for ld in te.loads_in(te.expand_inline(top)):
                    loads += te.ITEMSIZE[ld.tensor.dtype] / _share(t, axes, ld, (rows, cols))
            memory = t.size * steps * loads / (4 * m.memory_bandwidth)  # most from caches
            memory += t.size * steps * local / (_LOCAL_SPEEDUP * m.memory_bandwidth)
            if block is not None:  # two barriers per chunk, the blocks in waves
                n_blocks = t.size / (rows * cols * block[0] * block[1])
                chunks = math.ceil(body.axes[0].extent / self._chunk(config, i))  # type: ignore[union-attr]
                waves = math.ceil(n_blocks / m.compute_units)
                seconds += waves * chunks * 2 * _BARRIER_CYCLES / (m.ghz * 1e9)
            if tree:  # strided partials, then log2(tree) halvings between barriers
                waves = math.ceil(t.size / m.compute_units)
                seconds += max(memory, self._compute(t.size * tree, math.ceil(steps / tree),
                                                     tree))
                seconds += waves * (tree.bit_length()) * _BARRIER_CYCLES / (m.ghz * 1e9)
            elif partials:  # a first pass of size x partials threads, a second of size threads
                seconds += max(memory, self._compute(t.size * partials, steps // partials,
                                                     threads))
                seconds += self._compute(t.size, partials, threads) + _LAUNCH_SECONDS
            else:
                seconds += max(memory, self._compute(t.size / (rows * cols),
                                                     steps * rows * cols, threads))
        return seconds

    def canonical(self, config: Config) -> Config:
        """A tree reduction ignores the stage's partials; a matrix-instruction tile its
        register tile, staging, partials and tree; a dot-product stage its staging, partials,
        tree and matrix tile (set to their first options)."""
        out = dict(config)
        first = {k.name: k.options[0] for k in self.knobs}
        for i in range(len(self.stages)):
            if out.get(f"s{i}.tree") and f"s{i}.partials" in out:
                out[f"s{i}.partials"] = 0
            if out.get(f"s{i}.dot"):
                for name in (f"s{i}.stage", f"s{i}.partials", f"s{i}.tree", f"s{i}.mma"):
                    if name in out:
                        out[name] = first[name]
            if out.get(f"s{i}.mma"):
                for name in (f"s{i}.tile", f"s{i}.stage", f"s{i}.partials", f"s{i}.tree"):
                    if name in out:
                        out[name] = first[name]
        return out

    def _compute(self, n_threads: float, steps: float, block: int) -> float:
        """Seconds of `n_threads` threads of `steps` multiply-adds each, at the fraction of
        the peak that so many threads keep in flight (a partial block occupies a whole one)."""
        m = self.machine
        n = math.ceil(n_threads / block) * block
        in_flight = min(1.0, n / (m.compute_units * m.simd_width * _RESIDENT_WARPS))
        return 2 * n_threads * steps / (m.peak_flops * in_flight)

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        return self.cost(config) if one_core is None else one_core


def _share(t: te.Tensor, axes: tuple[int, int] | None, ld: te.Load,
           spans: tuple[int, int]) -> float:
    """How many outputs one value that `ld` loads serves: the product of `spans` (rows, cols
    of a tile) over the tile axes the load's indices ignore."""
    if axes is None:
        return 1.0
    assert t.op is not None
    share = 1.0
    for pos, n in zip(axes, spans, strict=True):
        if not any(te.mentions(ix, t.op.axes[pos].var) for ix in ld.indices):
            share *= n
    return share
