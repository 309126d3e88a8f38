"""Tensor expressions + schedules → loop IR kernels."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lowering import te
from lowering.affine import simplify_index
from lowering.loop_ir import (
    Barrier,
    Buffer,
    BufLoad,
    BufPtr,
    Call,
    For,
    Kernel,
    Prefetch,
    Seq,
    Stmt,
    Store,
)
from lowering.nest import NestOp
from lowering.regions import Region, infer_region
from lowering.schedule import (
    INLINE,
    ROOT,
    AttachAt,
    Loop,
    Schedule,
    ScheduleError,
    StageSchedule,
    map_loads,
    producer_order,
)
from lowering.tensorize import gemm_call

ScheduleFn = Callable[[te.Tensor], StageSchedule]
InlineFn = Callable[[te.Tensor], te.Expr | None]  # the body to substitute, None: has a buffer
# statements to put first in a loop's body (by id of the Loop): nests computed at that loop
Heads = dict[int, list[Stmt]]


def stages_of(outputs: Sequence[te.Tensor]) -> list[te.Tensor]:
    """Compute tensors the outputs depend on, producers first."""
    return producer_order(outputs, lambda t: t.op.body)  # type: ignore[union-attr]


def flat_index(buf: Buffer, idx: Sequence[te.Expr]) -> te.Expr:
    out: te.Expr = te.Const(0, "int64")
    for i, stride in zip(idx, buf.strides, strict=True):
        out = out + i * stride
    return out


@dataclass
class Placement:
    """Where a tensor computed at a loop lives: a tile buffer holding the region that starts at
    `starts` (one slot per iteration of the parallel loop `lead`), or a full-size buffer."""

    buf: Buffer
    starts: list[te.Expr] | None = None
    lead: te.Expr | None = None

    def index(self, idx: Sequence[te.Expr]) -> te.Expr:
        if self.starts is not None:  # folded: `(start + i) - start` is `i` once affine
            idx = [simplify_index(i - s) for i, s in zip(idx, self.starts, strict=True)]
        if self.lead is not None:
            idx = [self.lead, *idx]
        return flat_index(self.buf, idx)


Bufs = dict[int, Buffer | Placement]


def _locate(bufs: Bufs, t: te.Tensor, idx: Sequence[te.Expr]) -> tuple[Buffer, te.Expr]:
    where = bufs[id(t)]
    if isinstance(where, Placement):
        return where.buf, where.index(idx)
    return where, flat_index(where, idx)


def _te_inline(t: te.Tensor) -> te.Expr | None:
    return t.op.body if t.op is not None and t.op.inline else None


def expand_inline(e: te.Expr, inline: InlineFn) -> te.Expr:
    """`e` with every load of an inlined stage replaced by that stage's body."""

    def sub(ld: te.Load) -> te.Expr:
        body = inline(ld.tensor)
        if body is None:
            return ld
        assert ld.tensor.op is not None
        vmap = {ax.var: i for ax, i in zip(ld.tensor.op.axes, ld.indices, strict=True)}
        return expand_inline(te.substitute(body, vmap), inline)

    return map_loads(e, sub)


class _Converter:
    """Rewrites a TE body into a loop-IR expression: buffer loads, inlined stages."""

    def __init__(self, bufs: Bufs, inline: InlineFn = _te_inline) -> None:
        self.bufs = bufs
        self.inline = inline

    def __call__(self, e: te.Expr) -> te.Expr:
        return map_loads(expand_inline(e, self.inline), self._load)

    def _load(self, ld: te.Load) -> te.Expr:
        if id(ld.tensor) not in self.bufs:
            raise ScheduleError(f"tensor {ld.tensor.name} has no buffer")
        return BufLoad(*_locate(self.bufs, ld.tensor, ld.indices))


def _extent(lp: Loop) -> te.Expr:
    return lp.extent_expr()


def _nest(loops: Sequence[Loop], body: Stmt, heads: Heads | None = None) -> Stmt:
    for lp in reversed(loops):
        first = (heads or {}).get(id(lp), [])
        body = For(lp.var, _extent(lp), lp.kind, Seq([*first, body]) if first else body,
                   interleave=1 if "keep_loop" in lp.pragmas else 0)
    return body


def combine(combiner: str, acc: te.Expr, x: te.Expr) -> te.Expr:
    if combiner == "sum":
        return acc + x
    if combiner == "prod":
        return acc * x
    if combiner == "max":
        return te.maximum(acc, x)
    if combiner == "max_nan":
        return te.binary("max_nan", acc, x)
    return te.minimum(acc, x)


def _buf_loads(e: te.Expr, out: list[BufLoad]) -> list[BufLoad]:
    if isinstance(e, BufLoad):
        out.append(e)
        _buf_loads(e.index, out)
    for c in te.children(e):
        _buf_loads(c, out)
    return out


def _prefetches(s: StageSchedule, value: te.Expr, heads: Heads) -> None:
    """pragma prefetch: a loop's body starts by prefetching the first element of every load
    of its next iteration (the loops inside it at 0)."""
    for pos, lp in enumerate(s.leaves):
        if "prefetch" not in lp.pragmas:
            continue
        vmap: dict[te.Var, te.Expr] = {lp.var: lp.var + 1}
        vmap.update({x.var: te.Const(0, "int64") for x in s.leaves[pos + 1:]})
        seen: set[tuple[int, str]] = set()
        for ld in _buf_loads(value, []):
            index = te.substitute(ld.index, vmap)
            key = (id(ld.buf), repr(index))
            if key not in seen:
                seen.add(key)
                heads.setdefault(id(lp), []).insert(0, Prefetch(ld.buf, index))


def lower_stage(
    s: StageSchedule,
    bufs: Bufs,
    *,
    inline: InlineFn = _te_inline,
    origin: dict[te.Var, te.Expr] | None = None,
    attach: Callable[[StageSchedule, te.Expr], Heads] | None = None,
) -> Stmt:
    """The loop nest of one stage. `origin` shifts spatial axes (a region computed at another
    stage's loop); `attach(s, body)` returns the nests to put first in loops of this one, given
    the stage's body in terms of its loops (inlined, still reading tensors)."""
    s.check()
    t = s.tensor
    assert t.op is not None
    value = dict(s.value)
    for v, o in (origin or {}).items():
        value[v] = o + value[v]
    body = expand_inline(te.substitute(s.body, value), inline)
    heads = attach(s, body) if attach is not None else {}
    conv = _Converter(bufs, inline)
    out, out_index = _locate(bufs, t, [value[ax.var] for ax in t.op.axes])
    if not isinstance(body, te.Reduce):
        x = conv(body)
        _prefetches(s, x, heads)
        return _nest(s.leaves, Store(out, out_index, x), heads)
    x, init = conv(body.body), conv(body.init)
    _prefetches(s, x, heads)
    if s.tensorized is not None:
        return _tensorized(s, out, out_index, x, init, heads)
    if s.mma is not None:
        if heads:
            raise ScheduleError(f"mma_tile: a stage is computed at a loop of {t.name}")
        return _mma(s, out, out_index, x, init)
    if s.tree is not None:
        if heads:
            raise ScheduleError(f"tree_reduce: a stage is computed at a loop of {t.name}")
        return _tree(s, out, out_index, x, init, body.combiner)
    first = next(i for i, lp in enumerate(s.leaves) if lp.origin == "reduce")
    outer, inner = s.leaves[:first], s.leaves[first:]
    inner_spatial = [lp for lp in inner if lp.origin == "spatial"]
    init_nest = _nest(inner_spatial, Store(out, out_index, init))
    update = Store(out, out_index, combine(body.combiner, BufLoad(out, out_index), x))
    return _nest(outer, Seq([init_nest, _nest(inner, update, heads)]), heads)


def _tree(s: StageSchedule, out: Buffer, out_index: te.Expr, value: te.Expr,
          init: te.Expr, combiner: str) -> Stmt:
    """`StageSchedule.tree_reduce`'s nest: per block (an output element), each thread's
    strided partial in its slot of a local array, the array halved between barriers (the
    upper half's slots combined into the lower's by the threads below the half: a loop of
    `min(1, half - thread)` iterations), thread 0's store of the initial value combined with
    slot 0."""
    assert s.tree is not None
    threads = s.tree
    block = s.leaves[0]
    reduce = [lp for lp in s.leaves if lp.origin == "reduce"]
    thread = te.Var(f"{block.name}_t")
    step = te.Var(f"{block.name}_j")
    flat = step * threads + thread
    vmap: dict[te.Var, te.Expr] = {}
    inner = 1
    for i, lp in reversed(list(enumerate(reduce))):
        q = flat // inner if inner > 1 else flat
        vmap[lp.var] = q if i == 0 else q % lp.extent
        inner *= lp.extent
    acc = Buffer(f"{out.name}_tree", out.dtype, (threads,), "local")
    mine = BufLoad(acc, thread)
    count = (te.Const(inner - 1, "int64") - thread) // threads + 1
    stmts: list[Stmt] = [
        Store(acc, thread, te.reduce_identity(combiner, out.dtype)),
        For(step, count, "serial",
            Store(acc, thread, combine(combiner, mine, te.substitute(value, vmap)))),
        Barrier(),
    ]
    half = threads // 2
    while half >= 1:
        only = te.Var(f"{block.name}_h{half}")
        stmts.append(For(only, te.minimum(te.Const(1, "int64"), half - thread), "serial",
                         Store(acc, thread, combine(combiner, mine, BufLoad(acc, thread + half)))))
        stmts.append(Barrier())
        half //= 2
    only = te.Var(f"{block.name}_h0")
    stmts.append(For(only, te.minimum(te.Const(1, "int64"), 1 - thread), "serial",
                     Store(out, out_index, combine(combiner, init, BufLoad(acc, te.Const(0, "int64"))))))
    return For(block.var, _extent(block), "block",
               For(thread, te.Const(threads, "int64"), "thread", Seq(stmts)))


def _unflatten(flat: te.Expr, extents: Sequence[int]) -> list[te.Expr]:
    """The row-major multi-index of `flat` over `extents`."""
    out: list[te.Expr] = []
    inner = 1
    for i, n in reversed(list(enumerate(extents))):
        q = flat // inner if inner > 1 else flat
        out.append(q if i == 0 else q % n)
        inner *= n
    return out[::-1]


def _strided(thread: te.Var, threads: int, count: int, name: str,
             body: Callable[[te.Expr], Stmt]) -> Stmt:
    """A block's threads sweeping `count` elements together: thread t takes elements t,
    t + threads, ... (`body(element)`), the last round guarded where `count` is not a
    multiple of `threads`."""
    j = te.Var(name)
    e = j * threads + thread
    inner = body(e)
    if count % threads:
        g = te.Var(f"{name}_in")
        inner = For(g, te.minimum(te.Const(1, "int64"), te.Const(count, "int64") - e), "serial", inner)
    rounds = -(-count // threads)
    return For(j, te.Const(rounds, "int64"), "unroll" if rounds <= 16 else "serial", inner)


def _mma(s: StageSchedule, out: Buffer, out_index: te.Expr, value: te.Expr,
         init: te.Expr) -> Stmt:
    """`StageSchedule.mma_tile`'s nest: a block per (batch element, i tile, j tile); per
    chunk of the fused reduce axes, a barrier, the block's threads copying A's and B's
    slices (zero past an edge) into local arrays, a barrier, each warp's instructions on
    its fragment; then every warp's fragment stored to a local array, a barrier, and the
    threads writing the output elements inside the tensor (initial value added)."""
    assert s.mma is not None and s.tensor.op is not None
    plan = s.mma
    match, instr = plan.match, plan.match.instr
    t, op = s.tensor, s.tensor.op
    assert isinstance(op.body, te.Reduce)
    n_out = len(op.axes)
    sp = [lp.var for lp in s.leaves[:n_out]]
    rd = [lp.var for lp in s.leaves[n_out:]]
    if not (isinstance(value, te.Binary) and value.op == "mul"):
        raise ScheduleError(f"mma_tile: {t.name}'s body is no longer a product")
    fa, fb = (value.a, value.b) if match.a == 0 else (value.b, value.a)
    wm, wn = plan.warps
    bm, bn, kc = instr.m * wm, instr.n * wn, instr.k * plan.ksteps
    big_m, big_n, big_k = match.extents
    threads = instr.lanes * wm * wn
    m_tiles, n_tiles = -(-big_m // bm), -(-big_n // bn)
    batch = math.prod(op.axes[i].extent for i in match.batch)

    def i64(v: int) -> te.Const:
        return te.Const(v, "int64")

    block, thread = te.Var(f"{t.name}_blk"), te.Var(f"{t.name}_t")
    fixed: dict[te.Var, te.Expr] = {sp[i]: i64(0) for i, ax in enumerate(op.axes)
                                    if ax.extent == 1}
    fixed.update({rd[i]: i64(0) for i, ax in enumerate(op.body.axes) if ax.extent == 1})
    fixed.update(zip([sp[i] for i in match.batch],
                     _unflatten(block // (m_tiles * n_tiles),
                                [op.axes[i].extent for i in match.batch]), strict=True))
    m0 = (block // n_tiles) % m_tiles * bm
    n0 = block % n_tiles * bn

    def at(axes: Sequence[int], vars_: list[te.Var], extents: list[int],
           flat: te.Expr) -> dict[te.Var, te.Expr]:
        return dict(zip([vars_[i] for i in axes], _unflatten(flat, extents), strict=True))

    def m_at(flat: te.Expr) -> dict[te.Var, te.Expr]:
        return at(match.m, sp, [op.axes[i].extent for i in match.m], flat)

    def n_at(flat: te.Expr) -> dict[te.Var, te.Expr]:
        return at(match.n, sp, [op.axes[i].extent for i in match.n], flat)

    def k_at(flat: te.Expr) -> dict[te.Var, te.Expr]:
        return at(match.k, rd, [op.body.axes[i].extent for i in match.k], flat)  # type: ignore[union-attr]

    a_l = Buffer(f"{t.name}_mma_a", instr.operand, (bm, kc), "local")
    b_l = Buffer(f"{t.name}_mma_b", instr.operand, (kc, bn), "local")
    c_l = Buffer(f"{t.name}_mma_c", instr.accumulator, (bm, bn), "local")
    acc = Buffer(f"{t.name}_mma_acc", instr.accumulator, (instr.m, instr.n), "fragment")
    ko = te.Var(f"{t.name}_ko")

    def copy(buf: Buffer, factor: te.Expr, cols: int, row_of: str, name: str) -> Stmt:
        """Element e of `buf` (rows x `cols`): the factor at the chunk's k and the block's
        i or j (`row_of`: which of the two the rows are), zero past an edge."""
        def element(e: te.Expr) -> Stmt:
            r, c = e // cols, e % cols
            if row_of == "m":
                mv, kv = m0 + r, ko * kc + c
                vmap, inside = {**fixed, **m_at(mv), **k_at(kv)}, [te.lt(mv, big_m)]
            else:
                kv, nv = ko * kc + r, n0 + c
                vmap, inside = {**fixed, **n_at(nv), **k_at(kv)}, [te.lt(nv, big_n)]
            inside.append(te.lt(kv, big_k))
            x = te.substitute(factor, vmap)
            return Store(buf, e, te.select(te.all_of(inside), x, te.const(0.0, x.dtype)))
        return _strided(thread, threads, buf.size, name, element)

    warp, lane = thread // instr.lanes, thread % instr.lanes
    wi, wj = warp // wn, warp % wn
    kk = te.Var(f"{t.name}_kk")
    step = Call(instr.routine("mma"), [
        BufPtr(acc, i64(0)), BufPtr(a_l, wi * (instr.m * kc) + kk * instr.k), i64(kc),
        BufPtr(b_l, kk * (instr.k * bn) + wj * instr.n), i64(bn), lane])
    chunk = For(ko, i64(-(-big_k // kc)), "serial", Seq([
        Barrier(), copy(a_l, fa, kc, "m", f"{t.name}_ca"), copy(b_l, fb, bn, "n", f"{t.name}_cb"),
        Barrier(), For(kk, i64(plan.ksteps), "unroll", step)]))

    def result(e: te.Expr) -> Stmt:
        mv, nv = m0 + e // bn, n0 + e % bn
        vmap = {**fixed, **m_at(mv), **n_at(nv)}
        total: te.Expr = BufLoad(c_l, e)
        start = te.substitute(init, vmap)
        if not (isinstance(start, te.Const) and start.value == 0):
            total = te.cast("float32", start) + total
        g = te.Var(f"{t.name}_in")
        inside = te.minimum(te.minimum(i64(1), i64(big_m) - mv), i64(big_n) - nv)
        return For(g, inside, "serial", Store(out, te.substitute(out_index, vmap), total))

    body = Seq([
        Call(instr.routine("fill"), [BufPtr(acc, i64(0)), lane]),
        chunk,
        Call(instr.routine("store"), [BufPtr(c_l, wi * (instr.m * bn) + wj * instr.n), i64(bn),
                                      BufPtr(acc, i64(0)), lane]),
        Barrier(),
        _strided(thread, threads, c_l.size, f"{t.name}_co", result),
    ])
    return For(block, i64(batch * m_tiles * n_tiles), "block",
               For(thread, i64(threads), "thread", body))


def _tensorized(s: StageSchedule, out: Buffer, out_index: te.Expr, value: te.Expr,
                init: te.Expr, heads: Heads) -> Stmt:
    """The stage with its innermost loops replaced by a micro-kernel call."""
    assert s.tensorized is not None
    loops, blk = s.tensorized
    if any(id(lp) in heads for lp in loops):
        raise ScheduleError("tensorize: a stage is computed at (or prefetches in) a "
                            "tensorized loop")
    rest = [lp for lp in s.leaves if all(lp is not x for x in loops)]
    reduce_rest = [lp for lp in rest if lp.origin == "reduce"]

    def call(accumulate: te.Expr) -> Call:
        return gemm_call(loops, blk, out, out_index, value, accumulate)

    if isinstance(init, te.Const) and init.value == 0:
        # the first step of the reduction overwrites the block, the others add to it
        later = te.any_of([te.ne(lp.var, te.Const(0, "int64")) for lp in reduce_rest])
        return _nest(rest, call(te.cast("int64", later)), heads)
    first = next((i for i, lp in enumerate(rest) if lp.origin == "reduce"), len(rest))
    outer, inner = rest[:first], rest[first:]
    spatial = [lp for lp in inner if lp.origin == "spatial"]
    spatial += [lp for lp in s.leaves if lp.origin == "spatial" and any(lp is x for x in loops)]
    init_nest = _nest(spatial, Store(out, out_index, init))
    return _nest(outer, Seq([init_nest, _nest(inner, call(te.Const(1, "int64")), heads)]), heads)


def _thread_parts(reads: list[Sequence[te.Expr]], thread: te.Var,
                  threads: int) -> tuple[list[list[te.Expr]], dict[te.Var, int]]:
    """`reads` with every `thread // c` and `thread % c` (a thread loop fused from a 2-D
    block of threads) replaced by a variable of its own, and the extents those sweep (with
    `thread`'s own), for bound inference over all the threads of a block."""
    parts: dict[tuple[str, int], te.Var] = {}
    extents: dict[te.Var, int] = {thread: threads}

    def sub(e: te.Expr) -> te.Expr:
        if (isinstance(e, te.Binary) and e.op in ("floordiv", "mod") and e.a is thread
                and isinstance(e.b, te.Const) and int(e.b.value) > 0):
            n = int(e.b.value)
            v = parts.get((e.op, n))
            if v is None:
                v = parts[(e.op, n)] = te.Var(f"{thread.name}_{e.op}{n}")
                extents[v] = -(-threads // n) if e.op == "floordiv" else min(n, threads)
            return v
        return te.map_children(e, sub)

    return [[sub(i) for i in r] for r in reads], extents


def _loads_of(e: te.Expr, t: te.Tensor) -> list[te.Load]:
    out = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, te.Load) and x.tensor is t:
            out.append(x)
        stack.extend(te.children(x))
    return out


class _KernelLowering:
    """Lowers a whole `Schedule`: root stages in producer order, each with the stages computed
    at its loops nested inside (after bound inference on its body)."""

    def __init__(self, name: str, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 sched: Schedule) -> None:
        self.name = name
        self.sched = sched
        self.bufs: Bufs = {}
        self.buffers: list[Buffer] = []
        self.ranges: dict[te.Var, int] = {}  # static extent of every loop lowered so far
        for t in inputs:
            self._add(t.name, t.dtype, t.shape, "input", t)
        for t in outputs:
            if id(t) in self.bufs:
                raise ScheduleError(f"output {t.name} is also an input; copy it explicitly")
            self._add(t.name, t.dtype, t.shape, "output", t)
        self.stages = sched.stages()
        self.at: dict[int, list[tuple[te.Tensor, AttachAt]]] = {}
        self.locals = 0  # local (block-shared) buffers made so far
        for t in self.stages:
            where = sched.attachment(t)
            if where == ROOT and id(t) not in self.bufs:
                self._add(t.name, t.dtype, t.shape, "scratch", t)
            elif isinstance(where, AttachAt):
                self._check_attach(t, where)
                self.at.setdefault(id(where.consumer), []).append((t, where))
        for t in self.stages:
            for dep in te.tensors_read(sched.body_of(t)):
                if dep.op is None and id(dep) not in self.bufs:
                    raise ScheduleError(f"placeholder {dep.name} is not an input of kernel {name}")

    def _add(self, name: str, dtype: str, shape: Sequence[int], role: str,
             t: te.Tensor | None = None) -> Buffer:
        b = Buffer(f"{role[0]}{len(self.buffers)}", dtype, tuple(shape), role)
        self.buffers.append(b)
        if t is not None:
            self.bufs[id(t)] = b
        return b

    def _check_attach(self, t: te.Tensor, where: AttachAt) -> None:
        c = where.consumer
        if all(c is not x for x in self.stages) or self.sched.attachment(c) == INLINE:
            raise ScheduleError(f"compute_at: {t.name}'s consumer {c.name} is not lowered as "
                                "a stage of its own")
        readers = self.sched.consumers(t)
        if len(readers) != 1 or readers[0] is not c:
            raise ScheduleError(f"compute_at: {t.name} is read by {[r.name for r in readers]}, "
                                f"not only by {c.name}")

    def _inline(self, t: te.Tensor) -> te.Expr | None:
        if t.op is None or self.sched.attachment(t) != INLINE:
            return None
        return self.sched.body_of(t)

    def kernel(self) -> Kernel:
        nests = []
        for t in self.stages:
            if isinstance(t.op, NestOp):
                nests.append(self._hand_nest(t, t.op))
            elif self.sched.attachment(t) == ROOT:
                s = self.sched[t]
                par = s.leaves[0] if s.leaves and s.leaves[0].kind == "parallel" else None
                nests.append(self._stage(s, None, par))
        return Kernel(self.name, self.buffers, nests)

    def _hand_nest(self, t: te.Tensor, op: NestOp) -> Stmt:
        """A stage whose nest is written by hand (lowering/nest.py): its reads' buffers."""
        def buffer_of(r: te.Tensor) -> Buffer:
            b = self.bufs.get(id(r))
            if not isinstance(b, Buffer):
                raise ScheduleError(f"{t.name} reads {r.name}, which has no buffer of its own")
            return b

        def scratch(name: str, dtype: str, shape: tuple[int, ...]) -> Buffer:
            return self._add(name, dtype, shape, "scratch")

        return op.write(buffer_of(t), buffer_of, scratch)

    def _stage(self, s: StageSchedule, origin: dict[te.Var, te.Expr] | None,
               par: Loop | None) -> Stmt:
        for lp in s.leaves:
            self.ranges[lp.var] = lp.extent
        return lower_stage(s, self.bufs, inline=self._inline, origin=origin,
                           attach=lambda st, body: self._attached(st, body, par))

    def _attached(self, s: StageSchedule, body: te.Expr, par: Loop | None) -> Heads:
        heads: Heads = {}
        staged: dict[int, list[Stmt]] = {}
        for p, where in self.at.get(id(s.tensor), []):
            lp = s.loop(where.loop)
            pos = s.leaves.index(lp)
            if where.shared:
                staged.setdefault(id(lp), []).append(self._staged_copy(s, body, p, pos))
                continue
            inner = {x.var: x.extent for x in s.leaves[pos + 1:]}
            reads = [ld.indices for ld in _loads_of(body, p)]
            self._check_init(s, body, p, pos)
            region = infer_region(reads, p.shape, inner, self.ranges)
            self._place(p, region, par)
            assert p.op is not None
            axes = [ax.var for ax in p.op.axes]
            ps = self.sched[p].replayed(
                dict(zip(axes, region.extent, strict=True)),
                {v: b for v, b in zip(axes, region.bound, strict=True) if b is not None})
            if any(x.kind == "parallel" for x in ps.leaves):
                raise ScheduleError(f"{p.name} is computed at a loop; it cannot have a parallel "
                                    "loop of its own")
            origin = dict(zip(axes, region.start, strict=True))
            heads.setdefault(id(lp), []).append(self._stage(ps, origin, par))
        for key, copies in staged.items():
            heads[key] = [Barrier(), *copies, Barrier(), *heads.get(key, [])]
        return heads

    def _check_init(self, s: StageSchedule, body: te.Expr, p: te.Tensor, pos: int) -> None:
        if isinstance(body, te.Reduce) and _loads_of(body.init, p):
            first = next(i for i, x in enumerate(s.leaves) if x.origin == "reduce")
            if pos >= first:
                raise ScheduleError(f"compute_at: the initial value of {s.tensor.name} reads "
                                    f"{p.name}; compute it outside the reduce loops")

    def _staged_copy(self, s: StageSchedule, body: te.Expr, p: te.Tensor, pos: int) -> Stmt:
        """`Schedule.stage`: a local buffer holding the box of `p` that the block's threads
        read under loop `pos` of `s` (the thread loop sweeps too), and the nest that copies
        it: thread `t` of `threads` copies elements t, t + threads, ... of the box, so that
        neighbouring threads read neighbouring elements; elements past the tensor's edge
        are set to zero and never read."""
        self._check_init(s, body, p, pos)
        thread = s.leaves[1]
        threads = thread.extent
        inner = {x.var: x.extent for x in s.leaves[pos + 1:]}
        reads, parts = _thread_parts([ld.indices for ld in _loads_of(body, p)], thread.var,
                                     threads)
        region = infer_region(reads, p.shape, {**inner, **parts}, self.ranges)
        buf = Buffer(f"l{self.locals}", p.dtype, tuple(region.extent), "local")
        self.locals += 1
        self.bufs[id(p)] = Placement(buf, region.start)
        assert p.op is not None
        c = te.Var(f"{p.name}_c")
        flat = c * threads + thread.var
        idx = [start + (flat // stride if d == 0 else (flat // stride) % extent)
               for d, (start, stride, extent) in
               enumerate(zip(region.start, buf.strides, region.extent, strict=True))]
        value = te.substitute(self.sched.body_of(p),
                              {ax.var: i for ax, i in zip(p.op.axes, idx, strict=True)})
        value = _Converter(self.bufs, self._inline)(value)
        inside = [te.lt(i, size) for i, size, bound in
                  zip(idx, p.shape, region.bound, strict=True) if bound is not None]
        if inside:
            value = te.select(te.all_of(inside), value, te.as_expr(0, p.dtype))
        count = (te.Const(buf.size - 1, "int64") - thread.var) // threads + 1
        return For(c, count, "serial", Store(buf, flat, value))

    def _place(self, p: te.Tensor, region: Region, par: Loop | None) -> None:
        """A tile buffer (one per parallel iteration) when smaller than the tensor, else a
        full-size one; either way only the region is computed."""
        slots = par.extent if par is not None else 1
        if math.prod(region.extent) * slots < p.size:
            shape = ((slots,) if par is not None else ()) + tuple(region.extent)
            buf = self._add(p.name, p.dtype, shape, "scratch")
            self.bufs[id(p)] = Placement(buf, region.start, par.var if par is not None else None)
        else:
            self._add(p.name, p.dtype, p.shape, "scratch", p)


def lower_schedule(name: str, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                   sched: Schedule) -> Kernel:
    """One kernel computing `outputs` from `inputs` as `sched` says; stages that are neither
    inputs, outputs nor inlined get scratch buffers (tile-sized when computed at a loop)."""
    return _KernelLowering(name, inputs, outputs, sched).kernel()


def lower_kernel(
    name: str,
    inputs: Sequence[te.Tensor],
    outputs: Sequence[te.Tensor],
    schedule: ScheduleFn,
) -> Kernel:
    """One kernel computing `outputs` from `inputs`, each stage scheduled by `schedule` as its
    own root nest; te-inline computes are substituted, other intermediates become scratch."""
    return lower_schedule(name, inputs, outputs, Schedule(outputs, schedule))
