"""Schedules as data: primitives recorded in a trace and applied to one stage's loops.

A stage starts with one loop per axis of its compute (spatial, then reduce). Primitives replace
loops by new ones and record how every earlier loop variable is computed from the new ones, so
the lowering can rewrite the compute body without the compute ever mentioning tiling.

`StageSchedule` holds one stage's loops (split, fuse, reorder, tile, loop kinds, prefetch pragma,
tensorize); `Schedule` holds all stages of a kernel and the primitives that relate them
(compute_inline, compute_at, cache_read, cache_write, rfactor). A stage computed at another
stage's loop is re-scheduled at lowering time over the region that loop needs: its trace is
replayed, by loop name, on loops as long as that region (`StageSchedule.replayed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lowering import te
from lowering.intrinsics import GemmBlock
from lowering.loop_ir import LOOP_KINDS

if TYPE_CHECKING:
    from lowering.tensorize import MmaMatch


class ScheduleError(Exception):
    """A primitive's precondition failed; the message says which and why."""


class Loop:
    def __init__(self, name: str, extent: int, origin: str) -> None:
        self.var = te.Var(name)
        self.extent = extent
        self.origin = origin  # "spatial" | "reduce"
        self.kind = "serial"
        # set by a non-divisible split: the real extent is min(factor, bound - outer*factor),
        # with `outer` an expression of enclosing loop variables
        self.tail: tuple[te.Expr, int, te.Expr | int] | None = None
        # the real extent when it depends on enclosing loops (a region computed at another
        # stage's loop, clipped to the tensor): at most `extent`
        self.bound: te.Expr | None = None
        self.pragmas: list[str] = []

    @property
    def name(self) -> str:
        return self.var.name

    def extent_expr(self) -> te.Expr:
        """The number of iterations, an expression of enclosing loops when it is partial."""
        if self.tail is not None:
            outer, factor, bound = self.tail
            return te.minimum(te.Const(factor, "int64"), bound - outer * factor)
        if self.bound is not None:
            return self.bound
        return te.Const(self.extent, "int64")

    def __repr__(self) -> str:
        return f"{self.name}<{self.extent}>"


# Primitive records: small frozen values that print themselves; a schedule is a list of them.
@dataclass(frozen=True)
class Split:
    loop: str
    factor: int


@dataclass(frozen=True)
class BlockSplit:
    loop: str
    threads: int
    tile: int


@dataclass(frozen=True)
class TreeReduce:
    threads: int


@dataclass(frozen=True)
class Fuse:
    outer: str
    inner: str


@dataclass(frozen=True)
class Reorder:
    order: tuple[str, ...]


@dataclass(frozen=True)
class Annotate:
    loop: str
    kind: str


@dataclass(frozen=True)
class Pragma:
    loop: str
    kind: str


@dataclass(frozen=True)
class Tensorize:
    loops: tuple[str, ...]
    intrinsic: GemmBlock


@dataclass(frozen=True)
class MmaTile:
    """`StageSchedule.mma_tile`: the stage on a matrix instruction (`match`), a block of
    warps[0] x warps[1] warps each owning one accumulator fragment, the reduction staged in
    chunks of `ksteps` instruction steps."""

    match: MmaMatch
    warps: tuple[int, int]
    ksteps: int


PRAGMAS = ("prefetch", "keep_loop")


class StageSchedule:
    """The loops of one compute stage and the trace of primitives that made them.

    `body` is what the stage computes (the compute's own body unless a multi-stage primitive
    rewrote it); `extents`/`bounds` replace spatial axes' extents (a region of the tensor).
    """

    def __init__(self, tensor: te.Tensor, body: te.Expr | None = None,
                 extents: dict[te.Var, int] | None = None,
                 bounds: dict[te.Var, te.Expr] | None = None) -> None:
        op = tensor.op
        if op is None:
            raise ScheduleError(f"{tensor.name} is a placeholder; it has no loops")
        self.tensor = tensor
        self.body = op.body if body is None else body
        reduce_axes = self.body.axes if isinstance(self.body, te.Reduce) else ()
        self.leaves: list[Loop] = []
        self.value: dict[te.Var, te.Expr] = {}
        for ax in list(op.axes) + list(reduce_axes):
            loop = Loop(ax.var.name, (extents or {}).get(ax.var, ax.extent), ax.kind)
            loop.bound = (bounds or {}).get(ax.var)
            if loop.bound is None and isinstance(loop.extent, te.DynExtent):
                loop.bound = loop.extent.dim  # runs to the run-time dimension
            self.leaves.append(loop)
            self.value[ax.var] = loop.var
        self.trace: list[object] = []
        self.tensorized: tuple[tuple[Loop, ...], GemmBlock] | None = None
        self.tree: int | None = None  # `tree_reduce`'s threads per block
        self.mma: MmaTile | None = None  # `mma_tile`'s plan
        self.rewritten: str | None = None  # `Schedule.rewrite`'s reason: an equivalent body

    # lookup -------------------------------------------------------------------------------
    def loop(self, name: str) -> Loop:
        for lp in self.leaves:
            if lp.name == name:
                return lp
        raise ScheduleError(f"no loop named {name} in {[lp.name for lp in self.leaves]}")

    def _rebind(self, old: te.Var, expr: te.Expr) -> None:
        for k, v in self.value.items():
            self.value[k] = te.substitute(v, {old: expr})
        for lp in self.leaves:
            if lp.tail is not None:
                outer, f, bound = lp.tail
                lp.tail = (te.substitute(outer, {old: expr}), f, bound)

    # primitives ---------------------------------------------------------------------------
    def split(self, loop: Loop, factor: int) -> tuple[Loop, Loop]:
        if loop not in self.leaves:
            raise ScheduleError(f"split: {loop.name} is not a current loop")
        if factor < 1:
            raise ScheduleError(f"split: factor {factor} < 1")
        if loop.tail is not None:
            raise ScheduleError(f"split: {loop.name} already has a partial extent")
        outer = Loop(loop.name + "o", math.ceil(loop.extent / factor), loop.origin)
        inner = Loop(loop.name + "i", min(factor, loop.extent), loop.origin)
        if factor < loop.extent and (loop.extent % factor or loop.bound is not None):
            inner.tail = (outer.var, factor, loop.extent if loop.bound is None else loop.bound)
        if loop.bound is not None:
            if factor < loop.extent:  # outer iterations past the bound would be empty
                outer.bound = (loop.bound + (factor - 1)) // factor
            else:
                inner.bound = loop.bound
        pos = self.leaves.index(loop)
        self.leaves[pos : pos + 1] = [outer, inner]
        self._rebind(loop.var, outer.var * factor + inner.var)
        self.trace.append(Split(loop.name, factor))
        return outer, inner

    def block_split(self, loop: Loop, threads: int, tile: int) -> tuple[Loop, Loop, Loop]:
        """GPU block tiles: `loop` = (outer * threads + thread) * tile + inner, with `outer`
        rounded up and `thread` always `threads` long, so that a block's threads all run (and
        all reach its barriers) even past the axis's end; `inner` runs `tile` iterations, or
        `min(tile, extent - (outer * threads + thread) * tile)` where the block tile does not
        divide the axis (none at all for a thread past the end), so only elements inside the
        tensor are computed. Returns (outer, thread, inner)."""
        if loop not in self.leaves:
            raise ScheduleError(f"block_split: {loop.name} is not a current loop")
        if threads < 1 or tile < 1:
            raise ScheduleError(f"block_split: threads {threads} or tile {tile} < 1")
        if loop.tail is not None or loop.bound is not None:
            raise ScheduleError(f"block_split: {loop.name} already has a partial extent")
        span = threads * tile
        outer = Loop(loop.name + "b", math.ceil(loop.extent / span), loop.origin)
        thread = Loop(loop.name + "t", threads, loop.origin)
        inner = Loop(loop.name + "i", tile, loop.origin)
        if loop.extent % span:
            inner.tail = (outer.var * threads + thread.var, tile, loop.extent)
        pos = self.leaves.index(loop)
        self.leaves[pos : pos + 1] = [outer, thread, inner]
        self._rebind(loop.var, (outer.var * threads + thread.var) * tile + inner.var)
        self.trace.append(BlockSplit(loop.name, threads, tile))
        return outer, thread, inner

    def tree_reduce(self, threads: int) -> None:
        """GPU targets: one block per output element (the spatial loops fused and bound to
        the grid); its `threads` threads (a power of two) each combine every `threads`-th of
        the reduction's values (neighbouring threads reading neighbouring values) into a
        slot of a local array, then halve the array in log2(threads) steps between
        barriers, and thread 0 combines the initial value with the total and stores it.
        One launch, where `split_reduction` takes two."""
        if not isinstance(self.body, te.Reduce):
            raise ScheduleError(f"tree_reduce: {self.tensor.name} is not a reduction")
        if threads < 2 or threads & (threads - 1):
            raise ScheduleError(f"tree_reduce: {threads} threads is not a power of two >= 2")
        if self.trace:
            raise ScheduleError(f"tree_reduce: {self.tensor.name} already has primitives")
        if any(lp.bound is not None for lp in self.leaves):
            raise ScheduleError("tree_reduce: a loop over a run-time dimension")
        spatial = [lp for lp in self.leaves if lp.origin == "spatial"]
        if not spatial:  # one output: a grid of one block
            self.leaves.insert(0, Loop(f"{self.tensor.name}_one", 1, "spatial"))
            spatial = self.leaves[:1]
        fused = spatial[0]
        for lp in spatial[1:]:
            fused = self.fuse(fused, lp)
        self.bind(fused, "block")
        self.tree = threads
        self.trace.append(TreeReduce(threads))

    def mma_tile(self, match: MmaMatch, warps: tuple[int, int], ksteps: int = 1) -> None:
        """GPU targets: compute the stage on the matrix instruction `match` maps it onto
        (`tensorize.match_mma`). A block of warps[0] x warps[1] warps computes an
        (m * warps[0]) x (n * warps[1]) tile of the fused i and j axes of one batch element,
        each warp one accumulator fragment; per chunk of `ksteps` x k reduction steps the
        block's threads copy the chunk's A and B slices into local memory (zero past the
        edges) between barriers, and each warp issues `ksteps` instructions on them; the
        fragments then go through local memory to the output, guarded at the edges, with the
        reduction's initial value added (`lower._mma`). The stage's loops are replaced
        whole, so it must have no other primitive."""
        if self.trace or self.body is not self.tensor.op.body:  # type: ignore[union-attr]
            raise ScheduleError(f"mma_tile: {self.tensor.name} already has primitives")
        if any(lp.bound is not None for lp in self.leaves):
            raise ScheduleError("mma_tile: a loop over a run-time dimension")
        if min(warps) < 1 or ksteps < 1:
            raise ScheduleError(f"mma_tile: warps {warps}, ksteps {ksteps}")
        self.mma = MmaTile(match, (int(warps[0]), int(warps[1])), int(ksteps))
        self.trace.append(self.mma)

    def fuse(self, outer: Loop, inner: Loop) -> Loop:
        pos = self.leaves.index(outer)
        if pos + 1 >= len(self.leaves) or self.leaves[pos + 1] is not inner:
            raise ScheduleError(f"fuse: {inner.name} does not directly follow {outer.name}")
        if outer.tail or inner.tail or outer.bound is not None or inner.bound is not None:
            raise ScheduleError("fuse: cannot fuse a loop with a partial extent")
        for lp in self.leaves:
            if lp.tail is not None and any(v in (outer.var, inner.var) for v in _vars_of(lp.tail[0])):
                if self.leaves.index(lp) < pos:
                    raise ScheduleError(f"fuse: {lp.name} depends on the fused loops")
        if outer.origin != inner.origin:
            raise ScheduleError("fuse: cannot fuse a spatial loop with a reduce loop")
        fused = Loop(outer.name + inner.name, outer.extent * inner.extent, outer.origin)
        self.leaves[pos : pos + 2] = [fused]
        self._rebind(outer.var, fused.var // inner.extent)
        self._rebind(inner.var, fused.var % inner.extent)
        self.trace.append(Fuse(outer.name, inner.name))
        return fused

    def reorder(self, *loops: Loop) -> None:
        """Put `loops` in the given order, in the positions they occupy now."""
        positions = sorted(self.leaves.index(lp) for lp in loops)
        for pos, lp in zip(positions, loops, strict=True):
            self.leaves[pos] = lp
        self.trace.append(Reorder(tuple(lp.name for lp in loops)))

    def tile(self, x: Loop, y: Loop, fx: int, fy: int) -> tuple[Loop, Loop, Loop, Loop]:
        """Split `x` by `fx` and `y` by `fy`, ordered xo, yo, xi, yi."""
        xo, xi = self.split(x, fx)
        yo, yi = self.split(y, fy)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def annotate(self, loop: Loop, kind: str) -> None:
        if kind not in LOOP_KINDS:
            raise ScheduleError(f"unknown loop kind {kind}")
        if kind == "parallel" and loop.origin == "reduce":
            raise ScheduleError(f"parallel: {loop.name} is a reduction loop")
        loop.kind = kind
        self.trace.append(Annotate(loop.name, kind))

    def parallel(self, loop: Loop) -> None:
        self.annotate(loop, "parallel")

    def vectorize(self, loop: Loop) -> None:
        self.annotate(loop, "vectorize")

    def unroll(self, loop: Loop) -> None:
        self.annotate(loop, "unroll")

    def bind(self, loop: Loop, axis: str) -> None:
        """GPU targets: run `loop`'s iterations as the blocks of the grid (`axis` "block") or
        as the threads of a block ("thread"); a spatial loop only (iterations independent)."""
        if axis not in ("block", "thread"):
            raise ScheduleError(f"bind: unknown axis {axis}; known: block, thread")
        if loop.origin == "reduce":
            raise ScheduleError(f"bind: {loop.name} is a reduction loop")
        self.annotate(loop, axis)

    def pragma(self, loop: Loop, kind: str) -> None:
        """"prefetch": each iteration of `loop` first prefetches what the next one reads;
        "keep_loop": a vector loop stays a loop (interleave 1), which LLVM would otherwise
        unroll fully when short and then vectorise the loop around it instead."""
        if kind not in PRAGMAS:
            raise ScheduleError(f"unknown pragma {kind}; known: {PRAGMAS}")
        if loop not in self.leaves:
            raise ScheduleError(f"pragma: {loop.name} is not a current loop")
        loop.pragmas.append(kind)
        self.trace.append(Pragma(loop.name, kind))

    def tensorize(self, loops: Sequence[Loop], intrinsic: GemmBlock) -> None:
        """Replace the innermost loops `loops` (two spatial, one reduce: the m, n, k of
        `C[m, n] += A[m, k] * B[k, n]`) by a call of `intrinsic`'s micro-kernel. The access
        strides are matched when the stage is lowered (they depend on buffer placement)."""
        loops = tuple(loops)
        body = self.body
        if not (isinstance(body, te.Reduce) and body.combiner == "sum"):
            raise ScheduleError("tensorize: the stage is not a sum reduction")
        if self.tensor.dtype != "float32":
            raise ScheduleError(f"tensorize: {intrinsic.routine} computes float32, the stage "
                                f"is {self.tensor.dtype}")
        if {id(lp) for lp in loops} != {id(lp) for lp in self.leaves[len(self.leaves) - len(loops):]}:
            raise ScheduleError(f"tensorize: {[lp.name for lp in loops]} are not the innermost "
                                f"loops of {[lp.name for lp in self.leaves]}")
        origins = sorted(lp.origin for lp in loops)
        if origins != ["reduce", "spatial", "spatial"]:
            raise ScheduleError(f"tensorize: {intrinsic.routine} needs two spatial loops and one "
                                f"reduce loop, got {origins}")
        if any(lp.kind == "parallel" for lp in loops):
            raise ScheduleError("tensorize: a tensorized loop cannot be parallel")
        self.tensorized = (loops, intrinsic)
        self.trace.append(Tensorize(tuple(lp.name for lp in loops), intrinsic))

    # replay ---------------------------------------------------------------------------------
    def replayed(self, extents: dict[te.Var, int], bounds: dict[te.Var, te.Expr]) -> StageSchedule:
        """This schedule re-applied, by loop name, to spatial axes of other extents."""
        new = StageSchedule(self.tensor, self.body, extents, bounds)
        for p in self.trace:
            if isinstance(p, Split):
                new.split(new.loop(p.loop), p.factor)
            elif isinstance(p, TreeReduce):
                new.tree_reduce(p.threads)
            elif isinstance(p, MmaTile):
                new.mma_tile(p.match, p.warps, p.ksteps)
            elif isinstance(p, BlockSplit):
                new.block_split(new.loop(p.loop), p.threads, p.tile)
            elif isinstance(p, Fuse):
                new.fuse(new.loop(p.outer), new.loop(p.inner))
            elif isinstance(p, Reorder):
                new.reorder(*[new.loop(n) for n in p.order])
            elif isinstance(p, Annotate):
                new.annotate(new.loop(p.loop), p.kind)
            elif isinstance(p, Pragma):
                new.pragma(new.loop(p.loop), p.kind)
            elif isinstance(p, Tensorize):
                new.tensorize([new.loop(n) for n in p.loops], p.intrinsic)
        return new

    def check(self) -> None:
        """Loop-structure invariants the lowering relies on."""
        for pos, lp in enumerate(self.leaves):
            if lp.kind == "parallel" and pos != 0:
                raise ScheduleError(f"parallel loop {lp.name} must be the outermost loop")
            if lp.kind in ("block", "thread") and pos != ("block", "thread").index(lp.kind):
                raise ScheduleError(f"{lp.kind} loop {lp.name} must be loop "
                                    f"{('block', 'thread').index(lp.kind)} of the nest")
            if lp.tail is not None:
                enclosing = {id(x.var) for x in self.leaves[:pos]}
                for v in _vars_of(lp.tail[0]):
                    if id(v) not in enclosing:
                        raise ScheduleError(
                            f"partial loop {lp.name} must stay inside loop {v.name}"
                        )
        if self.tensorized is not None:
            loops = self.tensorized[0]
            inner = self.leaves[len(self.leaves) - len(loops):]
            if {id(lp) for lp in loops} != {id(lp) for lp in inner}:
                raise ScheduleError("tensorize: the tensorized loops are no longer innermost")

    def describe(self) -> str:
        return "; ".join(repr(p) for p in self.trace)


def _vars_of(e: te.Expr) -> list[te.Var]:
    if isinstance(e, te.Var):
        return [e]
    return [v for c in te.children(e) for v in _vars_of(c)]


def producer_order(outputs: Sequence[te.Tensor],
                   body_of: Callable[[te.Tensor], te.Expr]) -> list[te.Tensor]:
    """Compute tensors the outputs depend on (reading through `body_of`), producers first."""
    order: list[te.Tensor] = []
    seen: set[int] = set()

    def visit(t: te.Tensor) -> None:
        if id(t) in seen or t.op is None:
            return
        seen.add(id(t))
        for dep in te.tensors_read(body_of(t)):
            visit(dep)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def map_loads(e: te.Expr, f: Callable[[te.Load], te.Expr]) -> te.Expr:
    """`e` with every load replaced by `f(load)` (the load's indices rewritten first)."""
    if isinstance(e, te.Load):
        return f(te.Load(e.tensor, [map_loads(i, f) for i in e.indices]))
    if not te.children(e):
        return e  # a variable, a constant, a loop-IR load
    if isinstance(e, (te.Binary, te.Unary, te.Select, te.Cast, te.Reduce)):
        return te.map_children(e, lambda x: map_loads(x, f))
    raise ScheduleError(f"cannot rewrite a {type(e).__name__} expression")


# Where a stage's nest goes: its own root nest, substituted into its readers, or inside a loop
# (named) of the consumer stage.
ROOT, INLINE = "root", "inline"


@dataclass(frozen=True)
class AttachAt:
    consumer: te.Tensor
    loop: str
    # GPU staging (`Schedule.stage`): the region is what the whole block reads, held in local
    # memory and copied by the block's threads together, between barriers
    shared: bool = False


@dataclass(frozen=True)
class StageStep:
    """A multi-stage primitive as recorded in `Schedule.trace` (tensors by name)."""

    primitive: str
    stage: str
    args: tuple[str, ...] = ()


class Schedule:
    """All stages of one kernel: `s[tensor]` is that stage's `StageSchedule`.

    `make` builds a stage's schedule the first time it is asked for (the default: no
    primitives); stages are the computes the outputs depend on, te-inline computes inlined.
    """

    def __init__(self, outputs: Sequence[te.Tensor],
                 make: Callable[[te.Tensor], StageSchedule] | None = None) -> None:
        self.outputs = list(outputs)
        self._make = make or StageSchedule
        self._stages: dict[int, StageSchedule] = {}
        self._attach: dict[int, str | AttachAt] = {}
        self.trace: list[StageStep] = []

    def __getitem__(self, t: te.Tensor) -> StageSchedule:
        if t.op is None:
            raise ScheduleError(f"{t.name} is a placeholder; it has no loops")
        s = self._stages.get(id(t))
        if s is None:
            s = self._stages[id(t)] = self._make(t)
        return s

    # the graph as the schedule sees it ------------------------------------------------------
    def body_of(self, t: te.Tensor) -> te.Expr:
        assert t.op is not None
        s = self._stages.get(id(t))
        return t.op.body if s is None else s.body

    def attachment(self, t: te.Tensor) -> str | AttachAt:
        assert t.op is not None
        return self._attach.get(id(t), INLINE if t.op.inline else ROOT)

    def stages(self) -> list[te.Tensor]:
        return producer_order(self.outputs, self.body_of)

    def consumers(self, t: te.Tensor) -> list[te.Tensor]:
        """Non-inlined stages that read `t`, directly or through inlined stages."""
        out: list[te.Tensor] = []
        for s in self.stages():
            if any(d is t for d in te.tensors_read(self.body_of(s))):
                more = self.consumers(s) if self.attachment(s) == INLINE else [s]
                out += [c for c in more if all(c is not x for x in out)]
        return out

    def _stage(self, t: te.Tensor, primitive: str) -> None:
        if t.op is None or all(t is not s for s in self.stages()):
            raise ScheduleError(f"{primitive}: {t.name} is not a compute stage of this schedule")

    # primitives -------------------------------------------------------------------------------
    def compute_inline(self, t: te.Tensor) -> None:
        """Substitute `t` into the stages that read it; it gets no buffer."""
        self._stage(t, "compute_inline")
        if any(t is o for o in self.outputs):
            raise ScheduleError(f"compute_inline: {t.name} is an output")
        if isinstance(self.body_of(t), te.Reduce):
            raise ScheduleError(f"compute_inline: {t.name} is a reduction")
        self._attach[id(t)] = INLINE
        self.trace.append(StageStep("compute_inline", t.name))

    def compute_at(self, producer: te.Tensor, consumer: te.Tensor, loop: Loop) -> None:
        """Emit `producer`'s nest inside `consumer`'s loop `loop`, computing only the region
        that the consumer's body under that loop reads."""
        self._stage(producer, "compute_at")
        self._stage(consumer, "compute_at")
        if any(producer is o for o in self.outputs):
            raise ScheduleError(f"compute_at: {producer.name} is an output")
        if loop not in self[consumer].leaves:
            raise ScheduleError(f"compute_at: {loop.name} is not a loop of {consumer.name}")
        readers = self.consumers(producer)
        if len(readers) != 1 or readers[0] is not consumer:
            raise ScheduleError(f"compute_at: {producer.name} is read by "
                                f"{[r.name for r in readers]}, not only by {consumer.name}")
        self._attach[id(producer)] = AttachAt(consumer, loop.name)
        self.trace.append(StageStep("compute_at", producer.name, (consumer.name, loop.name)))

    def cache_read(self, t: te.Tensor, readers: Sequence[te.Tensor]) -> te.Tensor:
        """A stage copying `t`, which `readers` read instead of `t`; returns the copy."""
        copy = te.compute(t.shape, lambda *i: t[i], name=f"{t.name}_local")
        for r in readers:
            self._stage(r, "cache_read")
            if all(d is not t for d in te.tensors_read(self.body_of(r))):
                raise ScheduleError(f"cache_read: {r.name} does not read {t.name}")
            s = self[r]
            s.body = map_loads(s.body, lambda ld: te.Load(copy, ld.indices)
                               if ld.tensor is t else ld)
        self.trace.append(StageStep("cache_read", t.name, tuple(r.name for r in readers)))
        return copy

    def stage(self, t: te.Tensor, reader: te.Tensor, loop: Loop) -> te.Tensor:
        """GPU targets: `reader` reads `t` through a copy in local memory (returned). Each
        iteration of `reader`'s `loop` (a loop inside its thread loop, a chunk of the
        reduction) starts with a barrier, the block's threads copying together the region of
        `t` that every thread of the block reads under `loop`, and a second barrier; the
        reads then come from that copy, so a value the block's threads share is loaded from
        device memory once per block instead of once per thread."""
        s = self[reader]
        if len(s.leaves) < 2 or s.leaves[1].kind != "thread":
            raise ScheduleError(f"stage: {reader.name}'s second loop is not a thread loop")
        if loop not in s.leaves[2:]:
            raise ScheduleError(f"stage: {loop.name} is not a loop of {reader.name} inside "
                                "its thread loop")
        copy = self.cache_read(t, [reader])
        self._attach[id(copy)] = AttachAt(reader, loop.name, shared=True)
        self.trace.append(StageStep("stage", t.name, (reader.name, loop.name)))
        return copy

    def cache_write(self, t: te.Tensor) -> te.Tensor:
        """`t`'s computation moves to a new stage (returned); `t` becomes a copy of it. Call it
        before other primitives on `t`, then schedule `s[t]` and `s[returned]`."""
        self._stage(t, "cache_write")
        assert t.op is not None
        old = self._stages.get(id(t))
        if old is not None and old.trace:
            raise ScheduleError(f"cache_write: {t.name} already has primitives applied")
        body, axes = self.body_of(t), t.op.axes
        cache = te.compute(t.shape, lambda *i: te.substitute(
            body, {ax.var: v for ax, v in zip(axes, i, strict=True)}), name=f"{t.name}_cache")
        self._stages[id(t)] = StageSchedule(t, body=te.Load(cache, [ax.var for ax in axes]))
        self.trace.append(StageStep("cache_write", t.name))
        return cache

    def rewrite(self, t: te.Tensor, body: te.Expr, why: str) -> StageSchedule:
        """Compute `t` by `body`, an expression of the same value over `t`'s output axes and
        reduce axes of its own (e.g. an integer product over packed words,
        `tensorize.IntDotMatch.body`); the stage's loops start again from it (returned).
        `why` names the rewrite in the trace and in `StageSchedule.rewritten`."""
        self._stage(t, "rewrite")
        s = self._stages[id(t)] = StageSchedule(t, body=body)
        s.rewritten = why
        self.trace.append(StageStep("rewrite", t.name, (why,)))
        return s

    def rfactor(self, t: te.Tensor, loop: Loop, factor_axis: int | None = None) -> te.Tensor:
        """Split the reduction `t` over its reduce loop `loop`: a new stage (returned) holds the
        partial results with `loop` as a spatial axis (at `factor_axis`, default last), and `t`
        becomes the reduction of those partials over it. Re-fetch `s[t]` afterwards."""
        s = self[t]
        body = s.body
        assert t.op is not None
        if not isinstance(body, te.Reduce):
            raise ScheduleError(f"rfactor: {t.name} is not a reduction")
        if loop not in s.leaves or loop.origin != "reduce":
            raise ScheduleError(f"rfactor: {loop.name} is not a reduce loop of {t.name}")
        axes = t.op.axes
        pos = len(axes) if factor_axis is None else factor_axis
        if not 0 <= pos <= len(axes):
            raise ScheduleError(f"rfactor: factor_axis {factor_axis} out of range")
        others = [lp for lp in s.leaves if lp.origin == "reduce" and lp is not loop]
        new_axes = [te.reduce_axis(lp.extent, lp.name) for lp in others]
        # a partial loop (non-divisible split) runs to its full extent in the new stage, so
        # out-of-range reduction indices are masked with the combiner's identity
        guard = any(lp.tail is not None or lp.bound is not None for lp in [loop, *others])

        def partial(*idx: te.Var) -> te.Expr:
            spatial = list(idx)
            fvar = spatial.pop(pos)
            loops: dict[te.Var, te.Expr] = {loop.var: fvar}
            loops.update({lp.var: ax.var for lp, ax in zip(others, new_axes, strict=True)})
            vmap: dict[te.Var, te.Expr] = {ax.var: v for ax, v in zip(axes, spatial, strict=True)}
            conds = []
            for rax in body.axes:
                vmap[rax.var] = te.substitute(s.value[rax.var], loops)
                conds.append(te.lt(vmap[rax.var], rax.extent))
            x = te.substitute(body.body, vmap)
            if guard:
                x = te.select(te.all_of(conds), x, te.reduce_identity(body.combiner, x.dtype))
            return te.reduce(body.combiner, x, new_axes) if new_axes else x

        shape = list(t.shape)
        shape.insert(pos, loop.extent)
        rf = te.compute(shape, partial, name=f"{t.name}_rf")
        r = te.reduce_axis(loop.extent, loop.name)
        idx: list[te.Expr] = [ax.var for ax in axes]
        idx.insert(pos, r.var)
        final = te.Reduce(body.combiner, te.Load(rf, idx), [r], body.init)
        self._stages[id(t)] = StageSchedule(t, body=final)
        self.trace.append(StageStep("rfactor", t.name, (loop.name,)))
        return rf
