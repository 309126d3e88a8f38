"""Recurrences (`lowering/recurrence.py`: LSTM, GRU, RNN) as one kernel of two parts.

1. The per-step inputs `proj` for every step at once, the input projection X·Wᵀ (+ biases):
   a GEMM, built by whatever space `space_for` gives that computation alone (the GEMM
   template, with constant weights packed at compile time); its knobs are this space's knobs.
2. The recurrence, a nest this template writes: an outer loop over (direction, batch chunk),
   parallel when the work is worth it, then per chunk: the states set from the initial states,
   a serial loop over the time steps running the step's phases for the batch rows of the chunk,
   and the final states copied out. A `MatVec` phase is a small GEMM, (batch rows of the chunk)
   x H times H x (rows), on the GEMM micro-kernel (`lowering/intrinsics.py`): the recurrent
   weights are packed into its panels (`Panels`: at compile time when they are constant, else
   by a first stage of the kernel), the accumulators stay in registers over the whole k loop,
   and the batch rows' tiles are the inner loop, so a panel is read from memory once per step
   and chunk. A `Pointwise` phase is one vectorised loop over the hidden units per batch row.
   Nothing is allocated per step: states and temporaries live in scratch buffers `[D, B, n]`.

Chunks split only the batch: each output element is computed by the same operations in the
same order whatever the chunking, so results do not depend on the core count compiled for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from lowering import te
from lowering.intrinsics import GemmBlock
from lowering.loop_ir import Buffer, BufLoad, BufPtr, Call, For, Kernel, Seq, Stmt, Store
from lowering.lower import stages_of
from lowering.machine import Target
from lowering.recurrence import MatVec, Pointwise, Recurrence, RecurrenceOutput, recurrence_of
from lowering.schedule import map_loads
from lowering.search.space import BuiltKernel, Config, ScheduleSpace
from lowering.tensorize import epilogue_args

# the recurrence's outer loop is parallel from this many multiply-adds (all steps) on
PARALLEL_MIN_WORK = 1 << 20
MAX_NV = 6  # widest register block (vectors of a row) a MatVec's micro-kernel may take

I64 = "int64"


def _c(v: int) -> te.Const:
    return te.Const(v, I64)


class RecurrentTemplate:
    """Entry in `lowering.search.select.TEMPLATES`: matches the outputs of one recurrence."""

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> RecurrentSpace | None:
        rec = recurrence_of(list(outputs))
        if rec is None:
            return None
        return RecurrentSpace(inputs, outputs, consts, target, rec)


class RecurrentSpace(ScheduleSpace):
    kind = "recurrent"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target, rec: Recurrence) -> None:
        super().__init__(inputs, outputs, consts, target)
        from lowering.search.select import space_for  # (select imports this module)

        self.rec = rec
        read = {id(t) for s in stages_of([rec.proj]) for t in te.tensors_read(s.op.body)}  # type: ignore[union-attr]
        self.proj_inputs = [i for i, t in enumerate(self.inputs) if id(t) in read]
        self.proj_space = space_for([self.inputs[i] for i in self.proj_inputs], [rec.proj],
                                    [self.consts[i] for i in self.proj_inputs], target)
        self.knobs = list(self.proj_space.knobs)
        self.chunks, self.per_chunk, self.outer = self._chunks()
        self.panels = Panels(rec, target, self.per_chunk)

    def _chunks(self) -> tuple[int, int, str]:
        """(chunks of the batch, rows per chunk, the outer loop's kind)."""
        rec = self.rec
        cores = self.target.machine.cores
        rows = sum(p.out.shape[0] for p in rec.phases if isinstance(p, MatVec))
        work = rec.steps * rec.batch * rec.directions * rec.hidden * max(rows, 1)
        if cores <= 1 or work < PARALLEL_MIN_WORK:
            return 1, rec.batch, "serial"
        n = min(rec.batch, max(1, cores // rec.directions))
        per = math.ceil(rec.batch / n)
        n = math.ceil(rec.batch / per)
        return n, per, "parallel" if n * rec.directions > 1 else "serial"

    def canonical(self, config: Config) -> Config:
        return self.proj_space.canonical(config)

    def cost(self, config: Config) -> float:
        from lowering.search.cost_model import kernel_seconds

        built = self.build(config)
        return kernel_seconds(built.kernel, self.target.machine)

    def flops(self) -> float:
        r = self.rec
        rows = sum(p.out.shape[0] for p in r.phases if isinstance(p, MatVec))
        step = r.hidden * rows + 20 * r.hidden
        return self.proj_space.flops() + float(r.steps * r.batch * r.directions * step)

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        sub = self.proj_space.build(config, name)
        return _Builder(self, sub).build(name)


class _Builder:
    def __init__(self, space: RecurrentSpace, sub: BuiltKernel) -> None:
        self.s = space
        self.rec = space.rec
        self.sub = sub
        self.lanes = space.target.vector_lanes_f32

    def _vec(self, n: int) -> str:
        """The kind of a loop over n elements: vectorised unless shorter than a vector."""
        return "vectorize" if n >= self.lanes else "serial"

    def build(self, name: str) -> BuiltKernel:
        s, rec, sub = self.s, self.rec, self.sub
        k1 = sub.kernel
        n_sub_in = len(s.proj_inputs)
        transforms: dict[int, Callable[[np.ndarray], np.ndarray]] = {}
        self.buf: dict[int, Buffer] = {}  # id(tensor or vector placeholder) -> buffer
        inputs: list[Buffer] = []
        for i, t in enumerate(s.inputs):
            if i in s.proj_inputs:
                j = s.proj_inputs.index(i)
                b = k1.buffers[j]
                if j in sub.const_transforms:
                    if any(t is x for x in rec.inputs()):  # the step would read it re-laid out
                        raise ValueError(f"input {i} is packed for the projection and read by "
                                         "the recurrence")
                    transforms[i] = sub.const_transforms[j]
            elif t is rec.weights and s.consts[i] is not None:
                b = Buffer("w", t.dtype, (t.shape[0], s.panels.size), "input")
                transforms[i] = s.panels.pack
            else:
                b = Buffer("x", t.dtype, t.shape, "input")
            inputs.append(b)
            self.buf[id(t)] = b
        outputs = [Buffer("y", t.dtype, t.shape, "output") for t in s.outputs]
        proj = k1.buffers[n_sub_in]
        proj.role = "scratch"
        scratch = [proj, *k1.buffers[n_sub_in + 1:]]
        self.buf[id(rec.proj)] = proj
        self.buf[id(rec.x_row)] = proj
        stages: list[Stmt] = []
        w_index = next(i for i, t in enumerate(s.inputs) if t is rec.weights)
        if w_index in transforms:
            self.rt = inputs[w_index]
        else:  # weights computed at run time: packed by the kernel
            self.rt = Buffer("rt", "float32", (rec.directions, s.panels.size), "scratch")
            scratch.append(self.rt)
            stages.append(s.panels.pack_stage(inputs[w_index], self.rt))
        nd, nb = rec.directions, rec.batch
        for v in [*(st.vec for st in rec.states), *rec.temps]:
            b = Buffer("v", "float32", (nd, nb, v.shape[0]), "scratch")
            scratch.append(b)
            self.buf[id(v)] = b
        for row, src in rec.params:
            self.buf[id(row)] = self.buf[id(src)]
        stages += k1.stages
        stages.append(self._recurrence(outputs))
        buffers = [*inputs, *outputs, *scratch]
        for i, b in enumerate(buffers):
            b.name = f"{b.role[0]}{i}"
        return BuiltKernel(Kernel(name, buffers, stages), transforms)

    # the recurrence nest ------------------------------------------------------------------
    def _recurrence(self, outputs: list[Buffer]) -> Stmt:
        rec = self.rec
        n_chunks, per, kind = self.s.chunks, self.s.per_chunk, self.s.outer
        p = te.Var("p")
        self.d: te.Expr = p // n_chunks if n_chunks > 1 else p
        chunk = p % n_chunks if n_chunks > 1 else _c(0)
        self.lo = chunk * per
        self.hi = te.minimum(self.lo + per, _c(rec.batch)) if rec.batch % per else self.lo + per
        self.s_var = te.Var("s")
        self.b = te.Var("b")
        body: list[Stmt] = [self._init_states()]
        step: list[Stmt] = []
        for ph in rec.phases:
            step.append(self._matvec(ph) if isinstance(ph, MatVec) else self._pointwise(ph))
        finals: list[Stmt] = []
        for t, buf in zip(self.s.outputs, outputs, strict=True):
            op = t.op
            assert isinstance(op, RecurrenceOutput)
            if op.which == "sequence":
                step.append(self._write_sequence(buf))
            else:
                finals.append(self._write_final(buf, int(op.which)))
        body.append(For(self.s_var, _c(rec.steps), "serial", Seq(step)))
        body += finals
        return For(p, _c(rec.directions * n_chunks), kind, Seq(body))

    def _batch_loop(self, body: Stmt) -> Stmt:
        return For(self.b, self.hi, "serial", body, start=self.lo)

    def _length(self) -> te.Expr:
        """The batch row's sequence length, clamped into [0, T]."""
        rec = self.rec
        assert rec.lens is not None
        raw = te.cast(I64, BufLoad(self.buf[id(rec.lens)], self.b))
        return te.minimum(te.maximum(raw, _c(0)), _c(rec.steps))

    def _valid(self) -> te.Expr | None:
        return None if self.rec.lens is None else te.lt(self.s_var, self._length())

    def _time(self) -> te.Expr:
        """The time position of step s for the batch row (also where its output goes)."""
        rec, s = self.rec, self.s_var
        if rec.lens is None:
            back: te.Expr = _c(rec.steps - 1) - s
        else:
            back = te.select(te.lt(s, self._length()), self._length() - 1 - s, s)
        if all(rec.reverse):
            return back
        if not any(rec.reverse):
            return s
        rev = [i for i, r in enumerate(rec.reverse) if r]
        assert len(rev) == 1
        return te.select(te.eq(self.d, _c(rev[0])), back, s)

    def _row(self, v: te.Tensor) -> te.Expr:
        """Flat index of element 0 of vector placeholder `v` for the current (d, b, step)."""
        rec = self.rec
        n = v.shape[0]
        if v is rec.x_row:
            t, b, d = self._time(), self.b, self.d
            nd, nb, nt = rec.directions, rec.batch, rec.steps
            if rec.batch_major:
                return ((b * nt + t) * nd + d) * n
            return ((t * nb + b) * nd + d) * n
        if any(v is row for row, _ in rec.params):
            return self.d * n
        return (self.d * rec.batch + self.b) * n

    def _vec_load(self, v: te.Tensor, index: te.Expr) -> te.Expr:
        return BufLoad(self.buf[id(v)], self._row(v) + index)

    def _convert(self, e: te.Expr, j: te.Var, jv: te.Var) -> te.Expr:
        e = te.substitute(e, {j: jv, self.rec.direction: self.d})
        return map_loads(e, lambda ld: self._vec_load(ld.tensor, ld.indices[0]))

    def _pointwise(self, ph: Pointwise) -> Stmt:
        rec = self.rec
        j = te.Var("j")
        valid = self._valid()
        states = {id(st.vec) for st in rec.states}
        stores: list[Stmt] = []
        for v, value in _store_order(ph):
            x = self._convert(value, ph.index, j)
            if valid is not None and id(v) in states:
                x = te.select(valid, x, self._vec_load(v, j))
            stores.append(Store(self.buf[id(v)], self._row(v) + j, x))
        inner = For(j, _c(ph.length), self._vec(ph.length), Seq(stores) if len(stores) > 1 else stores[0])
        return self._batch_loop(inner)

    def _matvec(self, ph: MatVec) -> Stmt:
        """Micro-kernel calls: tiles of (batch rows of the chunk) x (rows of the product), the
        batch rows inner, so that a panel of the weights is read from cache for all of them."""
        rec, panels = self.rec, self.s.panels
        blk = panels.blocks[id(ph)]
        n, h = ph.out.shape[0], rec.hidden
        out, src = self.buf[id(ph.out)], self.buf[id(ph.src)]
        jt, bt = te.Var("jt"), te.Var("bt")
        b0 = self.lo + bt * blk.mr
        m_valid = te.minimum(self.hi - b0, _c(blk.mr))
        n_valid = te.minimum(_c(n) - jt * blk.nr, _c(blk.nr)) if n % blk.nr else _c(blk.nr)
        src_row = (self.d * rec.batch + b0) * h
        out_row = (self.d * rec.batch + b0) * n + jt * blk.nr
        panel = self.d * panels.size + panels.offset[id(ph)] + jt * (h * blk.nr)
        call = Call(blk.routine, [
            BufPtr(src, src_row), _c(h), _c(1), BufPtr(self.rt, panel), _c(blk.nr),
            BufPtr(out, out_row), _c(n), _c(h), m_valid, n_valid, _c(0), _c(0),
            *epilogue_args(out)])
        tiles = For(bt, _c(math.ceil(self.s.per_chunk / blk.mr)), "serial", call)
        return For(jt, _c(math.ceil(n / blk.nr)), "serial", tiles)

    def _state_index(self, j: te.Expr) -> te.Expr:
        """Flat index into a [D, B, H] / [B, D, H] (batch_major) tensor."""
        rec = self.rec
        nd, nb, h = rec.directions, rec.batch, rec.hidden
        if rec.batch_major:
            return (self.b * nd + self.d) * h + j
        return (self.d * nb + self.b) * h + j

    def _init_states(self) -> Stmt:
        rec = self.rec
        j = te.Var("j")
        stores: list[Stmt] = []
        for st in rec.states:
            x: te.Expr = te.Const(0.0, "float32") if st.initial is None else BufLoad(
                self.buf[id(st.initial)], self._state_index(j))
            stores.append(Store(self.buf[id(st.vec)], self._row(st.vec) + j, x))
        return self._batch_loop(For(j, _c(rec.hidden), self._vec(rec.hidden), Seq(stores)))

    def _write_sequence(self, buf: Buffer) -> Stmt:
        rec = self.rec
        j = te.Var("j")
        nd, nb, nt, h = rec.directions, rec.batch, rec.steps, rec.hidden
        t, b, d = self._time(), self.b, self.d
        index = ((b * nt + t) * nd + d) * h + j if rec.batch_major else \
            ((t * nd + d) * nb + b) * h + j
        x = self._vec_load(rec.states[0].vec, j)
        valid = self._valid()
        if valid is not None:
            x = te.select(valid, x, te.Const(0.0, "float32"))
        return self._batch_loop(For(j, _c(h), self._vec(h), Store(buf, index, x)))

    def _write_final(self, buf: Buffer, which: int) -> Stmt:
        rec = self.rec
        j = te.Var("j")
        x = self._vec_load(rec.states[which].vec, j)
        if rec.lens is not None:
            x = te.select(te.gt(self._length(), _c(0)), x, te.Const(0.0, "float32"))
        return self._batch_loop(For(j, _c(rec.hidden), self._vec(rec.hidden),
                                    Store(buf, self._state_index(j), x)))


def _store_order(ph: Pointwise) -> list[tuple[te.Tensor, te.Expr]]:
    """The phase's stores in an order that keeps their simultaneous meaning: a vector is
    written only after every value that reads it (a phase reads a vector only at its own
    index, so element by element this suffices)."""
    pending = list(ph.stores)
    order: list[tuple[te.Tensor, te.Expr]] = []
    while pending:
        for k, (v, _) in enumerate(pending):
            if not any(v is t for other in pending if other[0] is not v
                       for t in te.tensors_read(other[1])):
                order.append(pending.pop(k))
                break
        else:
            raise ValueError("a pointwise phase's stores read each other's vectors in a cycle")
    return order


class Panels:
    """The recurrent weights as the MatVec phases' micro-kernels read them: per direction, per
    phase, per tile of NR rows, `[H][NR]` (row k of the tile's rows, zero past the phase's
    rows). Each phase's register block (`blocks`) is chosen for the batch rows of a chunk."""

    def __init__(self, rec: Recurrence, target: Target, batch_rows: int) -> None:
        self.rec = rec
        self.blocks: dict[int, GemmBlock] = {}
        self.offset: dict[int, int] = {}
        self.phases = [p for p in rec.phases if isinstance(p, MatVec)]
        size = 0
        for ph in self.phases:
            blk = _block(batch_rows, ph.out.shape[0], target)
            self.blocks[id(ph)] = blk
            self.offset[id(ph)] = size
            size += math.ceil(ph.out.shape[0] / blk.nr) * rec.hidden * blk.nr
        self.size = max(size, 1)

    def pack(self, w: np.ndarray) -> np.ndarray:
        """The packed panels `[D, size]` of weights `[D, rows, H]` (a constant)."""
        w = np.asarray(w, dtype=np.float32)
        nd, _, h = w.shape
        out = np.zeros((nd, self.size), np.float32)
        for ph in self.phases:
            blk, n = self.blocks[id(ph)], ph.out.shape[0]
            tiles = math.ceil(n / blk.nr)
            rows = np.zeros((nd, tiles * blk.nr, h), np.float32)
            rows[:, :n] = w[:, ph.first_row:ph.first_row + n]
            # [d, tile, jj, k] -> [d, tile, k, jj]
            panel = rows.reshape(nd, tiles, blk.nr, h).transpose(0, 1, 3, 2)
            off = self.offset[id(ph)]
            out[:, off:off + panel[0].size] = panel.reshape(nd, -1)
        return out

    def pack_stage(self, src: Buffer, dst: Buffer) -> Stmt:
        """The same packing as a loop nest, for weights computed at run time."""
        nd, rows, h = src.shape
        d, t, k, jj = te.Var("d"), te.Var("t"), te.Var("k"), te.Var("jj")
        nests: list[Stmt] = []
        for ph in self.phases:
            blk, n = self.blocks[id(ph)], ph.out.shape[0]
            row = t * blk.nr + jj
            value = te.select(te.lt(row, _c(n)), BufLoad(
                src, (d * rows + ph.first_row + te.minimum(row, _c(n - 1))) * h + k),
                te.Const(0.0, "float32"))
            at = d * self.size + self.offset[id(ph)] + (t * h + k) * blk.nr + jj
            nest = For(k, _c(h), "serial", For(jj, _c(blk.nr), "serial", Store(dst, at, value)))
            nests.append(For(t, _c(math.ceil(n / blk.nr)), "serial", nest))
        return For(d, _c(nd), "serial", Seq(nests))


def _block(m: int, n: int, target: Target) -> GemmBlock:
    """The register block for an (m batch rows) x (n rows) product: the fewest cycles by a
    rough count (per k step of a tile: its FMAs, its B vectors, its A broadcasts)."""
    lanes, regs = target.vector_lanes_f32, target.vector_registers
    best: tuple[float, GemmBlock] | None = None
    for nv in range(1, MAX_NV + 1):
        top = min(16, (regs - nv - 1) // nv)
        if top < 1:
            continue
        tiles_m = math.ceil(m / top)
        mr = math.ceil(m / tiles_m)  # the same tiles, rows spread evenly
        cycles = tiles_m * math.ceil(n / (nv * lanes)) * (mr * nv + nv + mr)
        if best is None or cycles < best[0]:
            best = (cycles, GemmBlock(mr, nv, lanes))
    assert best is not None
    return best[1]
