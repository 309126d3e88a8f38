"""Row-wise template: computations whose stages all work row by row (softmax, layernorm, ...).

A computation matches when every materialised stage has the shape `O + I` (a full row) or
`O + (1, ...)` / `O` (a per-row statistic), every reduction reduces over the whole row `I`, and
every stage reads other stages only in its own row. That is found from the tensor expressions
(shapes, reduce axes, index patterns), never from operator names: Softmax, LogSoftmax,
LayerNormalization, trailing-axis Reduce*, ArgMax and fused regions of such stages all match.

The kernel is ONE (parallel) loop over chunks of rows; for each row the stages run in order,
each a pass over the row while it is in L1:
- reductions accumulate in place into the statistic, their column loop vectorised with a fixed
  number of vector accumulators (`llvm.loop.interleave.count`), which LLVM keeps in registers;
- statistics are per-chunk scalars, full-row intermediates a per-chunk row;
- a reduction body that a later output stage computes again (`exp(x - max)` in Softmax) is
  stored into that output's row during the reduction and read back there ("reuse"), so the
  expensive part runs once per element and the output is rescaled in place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lowering import loop_ir, te
from lowering.default_schedule import PARALLEL_MIN_WORK
from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Seq, Stmt, Store
from lowering.lower import combine, stages_of
from lowering.machine import Target
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace

I64 = "int64"
ITEMSIZE = te.ITEMSIZE
# Rows shorter than this are not worth a template (the default schedule does as well).
MIN_ROW = 8


def _c(v: int) -> te.Const:
    return te.Const(v, I64)


loads_in = te.loads_in


def expr_key(e: te.Expr) -> tuple:
    """Structural identity of an expression (variables and tensors by identity)."""
    if isinstance(e, te.Var):
        return ("v", id(e))
    if isinstance(e, te.Const):
        return ("c", e.dtype, e.value)
    if isinstance(e, te.Load):
        return ("l", id(e.tensor), *(expr_key(i) for i in e.indices))
    if isinstance(e, te.Binary):
        return ("b", e.op, expr_key(e.a), expr_key(e.b))
    if isinstance(e, te.Unary):
        return ("u", e.op, expr_key(e.a))
    if isinstance(e, te.Select):
        return ("s", expr_key(e.cond), expr_key(e.t), expr_key(e.f))
    if isinstance(e, te.Cast):
        return ("t", e.dtype, expr_key(e.a))
    raise TypeError(f"unexpected {type(e).__name__}")


def _replace(e: te.Expr, key: tuple, by: te.Expr) -> tuple[te.Expr, int]:
    """`e` with every subtree structurally equal to `key` replaced by `by`; and how many."""
    if expr_key(e) == key:
        return by, 1
    if isinstance(e, te.Binary):
        (a, na), (b, nb) = _replace(e.a, key, by), _replace(e.b, key, by)
        return te.binary(e.op, a, b), na + nb
    if isinstance(e, te.Unary):
        a, na = _replace(e.a, key, by)
        return te.Unary(e.op, a), na
    if isinstance(e, te.Select):
        parts = [_replace(x, key, by) for x in (e.cond, e.t, e.f)]
        return te.select(*(p[0] for p in parts)), sum(p[1] for p in parts)
    if isinstance(e, te.Cast):
        a, na = _replace(e.a, key, by)
        return te.cast(e.dtype, a), na
    return e, 0


def _costly(e: te.Expr) -> bool:
    """Whether recomputing `e` costs more than storing and reloading it (a math call)."""
    return isinstance(e, te.Unary) and e.op not in ("neg", "abs", "not") or any(
        _costly(c) for c in te.children(e))


# analysis --------------------------------------------------------------------------------

@dataclass
class RowStage:
    tensor: te.Tensor
    full: bool  # a full row (else a per-row statistic)
    body: te.Expr  # in the plan's row/column variables (a reduction: the reduced element)
    reduce: te.Reduce | None = None  # the reduction, its init in row variables
    reuse_into: te.Tensor | None = None  # output whose row holds this reduction's body


@dataclass
class RowPlan:
    outer: tuple[int, ...]  # O: the row index space
    inner: tuple[int, ...]  # I: one row
    rows_vars: list[te.Var]
    col_vars: list[te.Var]
    stages: list[RowStage] = field(default_factory=list)
    # full stage -> the key of the subexpression it reads back from its own row
    reuse_key: dict[int, tuple] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return math.prod(self.outer)

    @property
    def row_len(self) -> int:
        return math.prod(self.inner)

    @property
    def dynamic(self) -> bool:
        """Whether a row axis or a column axis runs to a run-time dimension."""
        return any(isinstance(d, te.DynExtent) for d in (*self.outer, *self.inner))

    @property
    def static_rows(self) -> int:
        """The product of the row axes that do not run to a run-time dimension: every
        run-time row count is a multiple of it."""
        return math.prod(d for d in self.outer if not isinstance(d, te.DynExtent))


def analyze(outputs: Sequence[te.Tensor]) -> RowPlan | None:
    stages = [t for t in stages_of(outputs)
              if not t.op.inline or any(t is o for o in outputs)]  # type: ignore[union-attr]
    reductions = [t for t in stages if t.op.reduce_axes]  # type: ignore[union-attr]
    if not reductions or len({id(o) for o in outputs}) != len(outputs):
        return None
    inner = tuple(ax.extent for ax in reductions[0].op.reduce_axes)  # type: ignore[union-attr]
    if math.prod(inner) < MIN_ROW:
        return None
    first = reductions[0].shape
    n = len(inner)
    candidates = [first]
    if len(first) >= n and all(d == 1 for d in first[len(first) - n:]):
        candidates.append(first[: len(first) - n])
    for outer in candidates:
        plan = _plan(stages, outer, inner)
        if plan is not None:
            return plan
    return None


def _plan(stages: list[te.Tensor], outer: tuple[int, ...], inner: tuple[int, ...]
          ) -> RowPlan | None:
    k = len(outer)
    plan = RowPlan(outer, inner, [te.Var(f"row{d}") for d in range(k)],
                   [te.Var(f"col{j}") for j in range(len(inner))])
    known: set[int] = set()
    for t in stages:
        op = t.op
        assert op is not None
        if t.shape[:k] != outer:
            return None
        rest = t.shape[k:]
        full = rest == inner
        if not full and any(d != 1 for d in rest):
            return None
        vmap: dict[te.Var, te.Expr] = {ax.var: plan.rows_vars[d] for d, ax in enumerate(op.axes[:k])}
        for j, ax in enumerate(op.axes[k:]):
            vmap[ax.var] = plan.col_vars[j] if full else _c(0)
        body = te.expand_inline(op.body)
        red = None
        if isinstance(body, te.Reduce):
            if full or tuple(ax.extent for ax in body.axes) != inner:
                return None
            for j, ax in enumerate(body.axes):
                vmap[ax.var] = plan.col_vars[j]
            red = te.Reduce(body.combiner, body.body, body.axes, te.substitute(body.init, vmap))
            body = body.body
        body = te.substitute(body, vmap)
        checked = [body] + ([red.init] if red is not None else [])
        if not all(_reads_ok(plan, e, known) for e in checked):
            return None
        plan.stages.append(RowStage(t, full, body, red))
        known.add(id(t))
    _find_reuse(plan, stages)
    return plan


def _reads_ok(plan: RowPlan, e: te.Expr, known: set[int]) -> bool:
    """Stages are read only in their own row (computed earlier), and every load runs along its
    tensor's last axis with the row's last column (contiguous) or not at all (broadcast)."""
    k = len(plan.outer)
    last = plan.col_vars[-1]
    for ld in loads_in(e):
        t = ld.tensor
        if t.op is not None:
            if id(t) not in known or t.shape[:k] != plan.outer:
                return False
            if any(i is not v for i, v in zip(ld.indices[:k], plan.rows_vars, strict=True)):
                return False
        if ld.indices and any(te.mentions(i, last) for i in ld.indices[:-1]):
            return False
        if ld.indices and te.mentions(ld.indices[-1], last) and ld.indices[-1] is not last:
            return False
    return True


def _find_reuse(plan: RowPlan, stages: list[te.Tensor]) -> None:
    """Pair a reduction whose element a later full output stage computes again with it."""
    taken: set[int] = set()
    for i, s in enumerate(plan.stages):
        if s.reduce is None or not _costly(s.body):
            continue
        key = expr_key(s.body)
        for later in plan.stages[i + 1:]:
            t = later.tensor
            if (later.full and later.reduce is None and id(t) not in taken
                    and t.dtype == s.body.dtype and t.op.inline is False  # type: ignore[union-attr]
                    and _replace(later.body, key, s.body)[1] > 0):
                s.reuse_into = t
                plan.reuse_key[id(t)] = key
                taken.add(id(t))
                break


# the schedule space ------------------------------------------------------------------------

def lanes_of(target: Target, dtype: str) -> int:
    bits = target.vector_bits
    return max(1, bits // (8 * ITEMSIZE[dtype]))


class RowTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    # its loops over rows and columns stop at run-time sizes (the rows' multi-index taken at
    # the run-time extents, addresses at the bound's); a row of one column axis only may run
    # to one
    runs_to_dims = True

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> RowSpace | None:
        plan = analyze(outputs)
        if plan is None:
            return None
        if len(plan.inner) > 1 and any(isinstance(d, te.DynExtent) for d in plan.inner):
            return None
        return RowSpace(inputs, outputs, consts, target, plan)


class RowSpace(ScheduleSpace):
    kind = "rows"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target, plan: RowPlan) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.plan = plan
        self.knobs = [
            Knob("accumulators", (4, 2, 1, 8)),  # vectors of partial results per reduction
            Knob("rows_per_chunk", (1, 4, 16)),  # rows one parallel iteration runs
            # rows whose passes share one column loop: their reductions' final combines
            # then overlap instead of running in turn. 4 by default; 2 where a reduction's
            # element calls a math function (softmax's exp): its constants and temporaries
            # then leave no registers for 4 rows' accumulators (softmax 4 rows: 1.02-1.15x
            # the time of 2; layer norm over 768, no math: 4 rows 0.73x the time of 1)
            Knob("rows_together", (2, 4, 1) if _math_in_reduction(plan) else (4, 2, 1)),
        ]
        if any(s.reuse_into is not None for s in plan.stages):
            self.knobs.append(Knob("reuse", (True, False)))
        if any(s.full and _row_divisions(s.body, plan.col_vars) for s in plan.stages):
            # x / s(row) as x * (1/s): one division per row instead of per element (<= 1 ulp)
            self.knobs.append(Knob("reciprocal", (True, False)))

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        return BuiltKernel(_RowBuilder(self, config, name).kernel())

    def cost(self, config: Config) -> float:
        """Cycles per row: each pass streams the row from L1 at one vector per cycle, a math
        call costs ~10 vector ops, a reduction with one accumulator waits on its latency, and
        its final combine (accumulators one after another, then the lanes, `_lane_steps`) is
        a chain of latencies that rows taken together overlap."""
        lanes, m = lanes_of(self.target, "float32"), self.target.machine
        acc = int(config["accumulators"])  # type: ignore[call-overload]
        reuse = bool(config.get("reuse", False))
        together = _RowBuilder.together_of(self.plan, config)
        cycles = 0.0
        for s in self.plan.stages:
            n = self.plan.row_len if (s.full or s.reduce is not None) else 1
            calls = _count_calls(s.body)
            if not reuse and s.reduce is None and id(s.tensor) in self.plan.reuse_key:
                calls += 1
            per_vec = 1 + 10 * calls + (4 / acc if s.reduce is not None else 0)
            cycles += n / lanes * per_vec
            if s.reduce is not None:
                cycles += m.fma_latency * (acc + _lane_steps(s.reduce, lanes)) / together
        chunk = int(config["rows_per_chunk"])  # type: ignore[call-overload]
        cycles += 20 / chunk  # per-chunk loop overhead
        return self.plan.rows * cycles / m.hz


def _math_in_reduction(plan: RowPlan) -> bool:
    return any(s.reduce is not None and _count_calls(s.body) for s in plan.stages)


def _lane_steps(red: te.Reduce, lanes: int) -> int:
    """Steps of a reduction's final combine over the vector lanes: by halves where LLVM makes
    a tree of it (integer combines, float sums and `max_nan` in a vectorised reduction, see
    the code generator's `_reassociated`), one lane after another for the NaN-ignoring float
    min/max."""
    if red.dtype in te.FLOAT_DTYPES and red.combiner in ("max", "min"):
        return lanes
    return max(1, math.ceil(math.log2(lanes)))


def _row_divisions(e: te.Expr, cols: Sequence[te.Var]) -> int:
    """Float divisions in `e` by a value that is the same along the row."""
    own = int(isinstance(e, te.Binary) and e.op == "div" and e.dtype in te.FLOAT_DTYPES
              and not any(te.mentions(e.b, c) for c in cols))
    return own + sum(_row_divisions(c, cols) for c in te.children(e))


def _by_reciprocal(e: te.Expr, cols: Sequence[te.Var]) -> te.Expr:
    if (isinstance(e, te.Binary) and e.op == "div" and e.dtype in te.FLOAT_DTYPES
            and not any(te.mentions(e.b, c) for c in cols)):
        return _by_reciprocal(e.a, cols) * (te.Const(1, e.dtype) / e.b)
    if isinstance(e, te.Binary):
        return te.binary(e.op, _by_reciprocal(e.a, cols), _by_reciprocal(e.b, cols))
    if isinstance(e, te.Unary):
        return te.Unary(e.op, _by_reciprocal(e.a, cols))
    if isinstance(e, te.Select):
        return te.select(*(_by_reciprocal(x, cols) for x in (e.cond, e.t, e.f)))
    if isinstance(e, te.Cast):
        return te.cast(e.dtype, _by_reciprocal(e.a, cols))
    return e


def _count_calls(e: te.Expr) -> int:
    own = 1 if isinstance(e, te.Unary) and e.op not in ("neg", "abs", "not") else 0
    return own + sum(_count_calls(c) for c in te.children(e))


class _RowBuilder:
    def __init__(self, space: RowSpace, config: Config, name: str) -> None:
        self.plan = space.plan
        self.target = space.target
        self.name = name
        self.interleave = int(config["accumulators"])  # type: ignore[call-overload]
        self.together = self.together_of(self.plan, config)
        chunk = min(int(config["rows_per_chunk"]), self.plan.rows)  # type: ignore[call-overload]
        self.chunk = -(-chunk // self.together) * self.together
        self.reuse = bool(config.get("reuse", True))
        self.reciprocal = bool(config.get("reciprocal", True))
        self.nchunks = -(-self.plan.rows // self.chunk)
        # the extents the loops run to: the bound's, or a run-time dimension's
        self.outer_run = [te.run_extent(d) for d in self.plan.outer]
        self.inner_run = [te.run_extent(d) for d in self.plan.inner]
        self.rows_run = te.run_product(self.plan.outer)
        self.buffers: list[Buffer] = []
        self.buf: dict[int, Buffer] = {}
        self.scratch: set[int] = set()
        for t in space.inputs:
            self._add(t, "input", t.shape)
        for t in space.outputs:
            self._add(t, "output", t.shape)
        k = len(self.plan.outer)
        for s in self.plan.stages:  # one slot per row taken together, per chunk
            if id(s.tensor) not in self.buf:
                self._add(s.tensor, "scratch",
                          (self.nchunks * self.together, *s.tensor.shape[k:]))
                self.scratch.add(id(s.tensor))

    @staticmethod
    def together_of(plan: RowPlan, config: Config) -> int:
        """Rows per column loop: the knob's value where it divides the rows, else 1."""
        r = int(config.get("rows_together", 1))  # type: ignore[call-overload]
        return r if plan.static_rows % r == 0 else 1

    def _add(self, t: te.Tensor, role: str, shape: tuple[int, ...]) -> None:
        b = Buffer(f"{role[0]}{len(self.buffers)}", t.dtype, shape, role)
        self.buf[id(t)] = b
        self.buffers.append(b)

    # kernel -------------------------------------------------------------------------------
    def kernel(self) -> Kernel:
        ch = te.Var("chunk")
        R = self.together
        slots = [ch * R + j if R > 1 else ch for j in range(R)]
        if self.chunk == R:  # one group per chunk: its rows are the slots' numbers
            body = self._rows(slots, slots)
        else:
            # groups of R rows; the rows are a multiple of R (together_of), so is the last
            # chunk's share of them
            g = te.Var("g")
            groups = self.chunk // R
            extent = te.minimum(_c(groups), (self.rows_run - ch * self.chunk) // R)
            if self.plan.rows % self.chunk == 0 and not self.plan.dynamic:
                extent = _c(groups)
            first = ch * self.chunk + g * R
            body = For(g, extent, "serial",
                       self._rows([first + j if j else first for j in range(R)], slots))
        work = self.plan.rows * self.plan.row_len
        kind = "parallel" if self.nchunks >= 2 and work >= PARALLEL_MIN_WORK else "serial"
        chunks = _c(self.nchunks) if not self.plan.dynamic else \
            (self.rows_run + _c(self.chunk - 1)) // _c(self.chunk)
        return Kernel(self.name, self.buffers, [For(ch, chunks, kind, body)])

    def _at_row(self, row: te.Expr, slot: te.Expr) -> None:
        """Make `row` (its statistics and intermediates at `slot`) the one lowered next."""
        self.row, self.slot = row, slot
        # the row's multi-index, for loads that do not follow the row layout
        self.row_index: dict[te.Var, te.Expr] = {}
        rest = row
        for d in range(len(self.plan.outer) - 1, -1, -1):
            ext = self.outer_run[d]
            v = self.plan.rows_vars[d]
            one = isinstance(ext, te.Const) and ext.value == 1
            self.row_index[v] = _c(0) if one else (rest if d == 0 else rest % ext)
            rest = rest // ext
        if self.plan.dynamic:
            # `row` counts the rows at the run-time extents; buffers are laid out for the
            # bound, where that row starts at its multi-index's row-major offset
            self.row = _c(0)
            for d, v in enumerate(self.plan.rows_vars):
                self.row = self.row * _c(self.plan.outer[d]) + self.row_index[v]

    def _rows(self, rows: list[te.Expr], slots: list[te.Expr]) -> Stmt:
        """Each stage for all `rows`: one column loop whose body holds every row's element."""
        out: list[Stmt] = []
        for s in self.plan.stages:
            cols = [te.Var(f"c{j}") for j in range(len(self.plan.inner))]
            inits: list[Stmt] = []
            bodies: list[Stmt] = []
            for row, slot in zip(rows, slots, strict=True):
                self._at_row(row, slot)
                init, body = self._stage(s, cols)
                inits += [init] if init is not None else []
                bodies.append(body)
            body = bodies[0] if len(bodies) == 1 else Seq(bodies)
            if not s.full and s.reduce is None:  # a statistic from statistics: no loop
                out += [body]
                continue
            out += inits + [self._col_loops(cols, body, self.interleave if s.reduce else 0)]
        return Seq(out)

    def _stage(self, s: RowStage, cols: list[te.Var]) -> tuple[Stmt | None, Stmt]:
        """The current row's part of stage `s`: the statement that starts a reduction (or
        None) and the one run per column (a per-row statistic: the one statement)."""
        if s.reduce is not None:
            return self._reduction(s, cols)
        body = s.body
        key = self.plan.reuse_key.get(id(s.tensor))
        if key is not None and self.reuse:
            own = te.Load(s.tensor, [*self.plan.rows_vars, *self.plan.col_vars])
            body = _replace(body, key, own)[0]
        if self.reciprocal and s.full:
            body = _by_reciprocal(body, self.plan.col_vars)
        if not s.full:
            return None, Store(self.buf[id(s.tensor)], self._index(s.tensor, []),
                               self.lower(body))
        return None, Store(self.buf[id(s.tensor)], self._index(s.tensor, cols),
                           self._cols(self.lower(body), cols))

    def _col_loops(self, cols: list[te.Var], body: Stmt, interleave: int = 0) -> Stmt:
        flat = self._one_column_loop(cols, body)
        if flat is not None:
            c, body = flat
            return For(c, _c(math.prod(self.plan.inner)), "vectorize", body,
                       interleave=interleave)
        for j in range(len(cols) - 1, -1, -1):
            if j == len(cols) - 1:
                body = For(cols[j], self.inner_run[j], "vectorize", body,
                           interleave=interleave)
            else:
                body = For(cols[j], self.inner_run[j], "serial", body)
        return body

    def _one_column_loop(self, cols: list[te.Var], body: Stmt) -> tuple[te.Var, Stmt] | None:
        """The row's column dims as one loop, when every index stays affine in it (each
        buffer holds the row contiguously, or at a fixed stride): a 7x7 or 14x14 row then
        vectorises across its image rows instead of running 7 or 14 columns one by one."""
        if len(cols) < 2:  # (a row of several column axes never runs to a run-time dimension)
            return None
        c = te.Var("c")
        vmap: dict[te.Var, te.Expr] = {}
        stride = 1
        for j in range(len(cols) - 1, -1, -1):
            n = self.plan.inner[j]
            v = c if stride == 1 else c // _c(stride)
            vmap[cols[j]] = v if j == 0 else v % _c(n)
            stride *= n
        flat = loop_ir.simplify_indices(loop_ir.bind(body, vmap))
        return None if loop_ir.divides(flat, c) else (c, flat)

    def _cols(self, e: te.Expr, cols: Sequence[te.Expr]) -> te.Expr:
        return te.substitute(e, dict(zip(self.plan.col_vars, cols, strict=True)))

    def _reduction(self, s: RowStage, cols: list[te.Var]) -> tuple[Stmt, Stmt]:
        """The statistic accumulates in place over the row; the innermost column loop is
        vectorised with `accumulators` vectors in flight (LLVM keeps them in registers and
        combines them at the end; a forced vectorisation may reorder the float reduction).
        Returns the statistic's initial store and the update per column."""
        assert s.reduce is not None
        comb = s.reduce.combiner
        stat = self.buf[id(s.tensor)]
        at = self._index(s.tensor, [])
        v = self._cols(self.lower(s.body), cols)
        out = s.reuse_into if self.reuse else None
        update: Stmt
        if out is None:
            update = Store(stat, at, combine(comb, BufLoad(stat, at), v))
        else:
            ob, oi = self.buf[id(out)], self._index(out, cols)
            update = Seq([Store(ob, oi, v),
                          Store(stat, at, combine(comb, BufLoad(stat, at), BufLoad(ob, oi)))])
        return Store(stat, at, self.lower(s.reduce.init)), update

    # expressions --------------------------------------------------------------------------
    def _index(self, t: te.Tensor, cols: Sequence[te.Expr]) -> te.Expr:
        """Flat index of row element `cols` (or the statistic) of stage/output `t`."""
        k = len(self.plan.outer)
        rest = t.shape[k:]
        idx = list(cols) if cols else [_c(0)] * len(rest)
        return self._flat(t, idx)

    def _flat(self, t: te.Tensor, rest_idx: Sequence[te.Expr]) -> te.Expr:
        k = len(self.plan.outer)
        rest = t.shape[k:]
        origin = self.slot if id(t) in self.scratch else self.row
        flat: te.Expr = origin * math.prod(rest)
        stride = 1
        for i, n in zip(reversed(list(rest_idx)), reversed(rest), strict=True):
            flat = flat + i * stride
            stride *= n
        return flat

    def lower(self, e: te.Expr) -> te.Expr:
        """A row-variable expression as loop IR: loads become buffer loads, row variables the
        row's multi-index; column variables stay for the caller to bind."""
        if isinstance(e, te.Load):
            t = e.tensor
            buf = self.buf[id(t)]
            k = len(self.plan.outer)
            idx = [self.lower(i) for i in e.indices]
            in_row = (t.shape[:k] == self.plan.outer and all(
                i is v for i, v in zip(e.indices[:k], self.plan.rows_vars, strict=False)))
            if id(t) in self.scratch or in_row:
                return BufLoad(buf, self._flat(t, idx[k:]))
            flat: te.Expr = _c(0)
            for i, stride in zip(idx, buf.strides, strict=True):
                flat = flat + i * stride
            return BufLoad(buf, flat)
        if isinstance(e, te.Var):
            return self.row_index.get(e, e)
        if isinstance(e, te.Const):
            return e
        if isinstance(e, (te.Binary, te.Unary, te.Select, te.Cast)):
            return te.map_children(e, self.lower)
        raise TypeError(f"unexpected {type(e).__name__}")
