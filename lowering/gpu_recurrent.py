"""Recurrences (`lowering/recurrence.py`: LSTM, GRU, RNN) on a GPU target: one thread per
(direction, batch row).

The kernel is the CPU template's (`lowering/templates/recurrent.py`), built by its builder
with three differences: the input projection is the GPU default space's (`GpuDefaultSpace`,
its knobs this space's), the recurrence's outer loop over (direction, batch row) is bound to
blocks and threads (each thread runs its row's time steps serially, as the CPU runs a chunk of
one row), and a `MatVec` phase is a plain loop nest over the recurrent weights as the model
lays them out, `[D, rows, hidden]` (no micro-kernel panels; the renderer keeps each row's sum
in a register). Each output element is computed by the same operations in the same order as
on the CPU with one row per chunk. Slow on a real GPU when few rows run (a step is serial
within a thread), but correct, which is what a model with a recurrence in it needs first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.loop_ir import Buffer, BufLoad, For, Seq, Stmt, Store, bind
from lowering.lower import stages_of
from lowering.machine import GpuMachine, Target
from lowering.recurrence import MatVec, Recurrence
from lowering.search.gpu_space import GpuDefaultSpace
from lowering.search.space import BuiltKernel, Config, ScheduleSpace
from lowering.templates.recurrent import RecurrentSpace, _Builder

I64 = "int64"


def _c(v: int) -> te.Const:
    return te.Const(v, I64)


def _grid(n: int, threads: int, blk: te.Var, thr: te.Var, body: Stmt) -> Stmt:
    """`body` for blk * threads + thr in [0, n): a block loop and a thread loop (guarded in
    a partial last block), as the GPU renderer launches them."""
    extent = _c(threads) if n % threads == 0 else te.minimum(_c(threads), _c(n) - blk * threads)
    return For(blk, _c(math.ceil(n / threads)), "block", For(thr, extent, "thread", body))


class _Unpacked:
    """Stands in for the CPU template's `Panels`: the recurrent weights as they are, one row
    of `[rows * hidden]` per direction (the same bytes as `[D, rows, hidden]`)."""

    def __init__(self, rec: Recurrence, machine: GpuMachine) -> None:
        self.rows = rec.weights.shape[1]
        self.size = self.rows * rec.hidden
        self.machine = machine

    def pack(self, w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=np.float32)
        return np.ascontiguousarray(w).reshape(w.shape[0], -1)

    def pack_stage(self, src: Buffer, dst: Buffer) -> Stmt:
        """Weights computed at run time: copied as they are, one thread per element."""
        n = src.size
        threads = min(self.machine.block_threads, n)
        blk, thr = te.Var("blk"), te.Var("thr")
        i = blk * threads + thr
        return _grid(n, threads, blk, thr, Store(dst, i, BufLoad(src, i)))


class GpuRecurrentSpace(RecurrentSpace):
    """The CPU template's space (its flops, canonical configurations) with GPU parts."""

    kind = "gpu-recurrent"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target, rec: Recurrence) -> None:
        ScheduleSpace.__init__(self, inputs, outputs, consts, target)
        assert isinstance(target.machine, GpuMachine)
        self.machine: GpuMachine = target.machine
        self.rec = rec
        read = {id(t) for s in stages_of([rec.proj]) for t in te.tensors_read(s.op.body)}  # type: ignore[union-attr]
        self.proj_inputs = [i for i, t in enumerate(self.inputs) if id(t) in read]
        self.proj_space = GpuDefaultSpace([self.inputs[i] for i in self.proj_inputs],
                                          [rec.proj], [self.consts[i] for i in self.proj_inputs],
                                          target)
        self.knobs = list(self.proj_space.knobs)
        # what the CPU builder reads of its space: chunks of one batch row, the outer loop
        # (bound to the grid by _GpuBuilder), the weights' layout
        self.chunks, self.per_chunk, self.outer = rec.batch, 1, "serial"
        self.panels = _Unpacked(rec, self.machine)  # type: ignore[assignment]

    def cost(self, config: Config) -> float:
        """The projection's cost plus the recurrence's multiply-adds at one per cycle of a
        single thread per row (the rows run side by side)."""
        r, m = self.rec, self.machine
        rows = sum(p.out.shape[0] for p in r.phases if isinstance(p, MatVec))
        step = r.hidden * (rows + 20)
        return self.proj_space.cost(config) + r.steps * step * 2 * m.compute_units * \
            m.simd_width / m.peak_flops

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        return self.cost(config) if one_core is None else one_core

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        sub = self.proj_space.build(config, name)
        return _GpuBuilder(self, sub).build(name)


class _GpuBuilder(_Builder):
    def __init__(self, space: GpuRecurrentSpace, sub: BuiltKernel) -> None:
        self.s = space  # type: ignore[assignment]
        self.rec = space.rec
        self.sub = sub
        self.machine = space.machine

    def _vec(self, n: int) -> str:
        return "serial"

    def _recurrence(self, outputs: list[Buffer]) -> Stmt:
        """The CPU's nest with its loop over (direction, batch row) bound to the grid."""
        nest = super()._recurrence(outputs)
        assert isinstance(nest, For) and isinstance(nest.extent, te.Const)
        n = int(nest.extent.value)
        threads = min(self.machine.block_threads, n)
        blk, thr = te.Var("blk"), te.Var("thr")
        return _grid(n, threads, blk, thr, bind(nest.body, {nest.var: blk * threads + thr}))

    def _matvec(self, ph: MatVec) -> Stmt:
        """out[j] = sum_k W[d, first_row + j, k] * src[k] for the thread's row: a sum per j
        (the renderer keeps it in a register)."""
        rec = self.rec
        n, h = ph.out.shape[0], rec.hidden
        out, src = self.buf[id(ph.out)], self.buf[id(ph.src)]
        j, k = te.Var("j"), te.Var("k")
        at = self._row(ph.out) + j
        w = BufLoad(self.rt, self.d * self.s.panels.size + (_c(ph.first_row) + j) * h + k)
        update = Store(out, at, BufLoad(out, at) + w * BufLoad(src, self._row(ph.src) + k))
        init = Store(out, at, te.Const(0.0, "float32"))
        return self._batch_loop(For(j, _c(n), "serial", Seq([init, For(k, _c(h), "serial",
                                                                         update)])))
