"""An analytic cost model of loop-IR kernels: vectorised arithmetic vs bytes moved between cache
levels, loop overhead, reduction latency chains and the balance of the parallel loop.

Rough on purpose: it ranks schedules of one computation, it does not predict nanoseconds. It
reads only the loop IR, so it applies to any kernel a schedule space builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lowering import te
from lowering.loop_ir import BufLoad, Call, For, Kernel, Seq, Stmt, Store
from lowering.machine import Machine

# The core's clock, issue rates, caches, bandwidths, latency and core count come from the
# target's machine model (lowering/machine.py); these describe the code LLVM makes.
INTERLEAVE = 4  # vector bodies LLVM unrolls this many times when they are small
SMALL_BODY = 12  # instructions
PARALLEL_OVERHEAD_S = 2e-6  # waking the pool and joining it, per parallel loop

ITEMSIZE = te.ITEMSIZE
# Arithmetic cost in instructions (polynomial approximations for the transcendental functions).
_OP_COST = {"div": 4.0, "floordiv": 4.0, "mod": 4.0, "pow": 30.0, "sqrt": 4.0, "exp": 12.0,
            "log": 14.0, "tanh": 16.0, "erf": 16.0, "sigmoid": 14.0, "softplus": 26.0,
            "sin": 16.0, "cos": 16.0, "tan": 20.0, "asin": 30.0, "acos": 30.0, "atan": 26.0,
            "asinh": 34.0, "acosh": 34.0, "atanh": 32.0, "fmod": 40.0,
            "sinh": 28.0, "cosh": 26.0}


@dataclass
class _Loop:
    var: te.Var
    extent: float  # mean trip count
    kind: str
    trips: list[int]  # the distinct trip counts a partial (tail) loop runs, weighted evenly


@dataclass
class _Access:
    itemsize: int
    size: int  # elements in the buffer
    depends: list[bool]  # per enclosing loop: does the index change with it
    stride: list[int]  # per enclosing loop: elements the index moves per iteration


def kernel_seconds(kernel: Kernel, machine: Machine) -> float:
    """Estimated one-core run time of `kernel`."""
    return sum(stage_seconds(kernel, machine))


def stage_seconds(kernel: Kernel, machine: Machine) -> list[float]:
    return [_Estimator(machine).stmt(st, []) / machine.hz for st in kernel.stages]


def worth_parallel(one_core: float, cores: int) -> bool:
    """Whether work that takes `one_core` seconds on one core gains from being shared among
    `cores` threads: the time the other cores take off it exceeds PARALLEL_OVERHEAD_S."""
    return cores > 1 and one_core * (1 - 1 / cores) > PARALLEL_OVERHEAD_S


def threaded_seconds(kernel: Kernel, one_core: list[float], threads: int) -> float:
    """Run time on `threads` cores from the one-core time of each stage: the outermost parallel
    loop's iterations are shared in equal chunks, plus the cost of starting the loop (none on
    one thread, where the runtime calls the loop's body directly)."""
    total = 0.0
    for st, secs in zip(kernel.stages, one_core, strict=True):
        if isinstance(st, For) and st.kind == "parallel" and isinstance(st.extent, te.Const):
            n = int(st.extent.value)
            start = PARALLEL_OVERHEAD_S if threads > 1 and n > 1 else 0.0
            total += secs * math.ceil(n / threads) / n + start
        else:
            total += secs
    return total


def eval_index(e: te.Expr, env: dict[int, int]) -> int:
    """Value of an integer index expression with the loop variables in `env` (others 0);
    data-dependent parts (an index loaded from a buffer) count as 0."""
    if isinstance(e, te.Var):
        return env.get(id(e), 0)
    if isinstance(e, te.Const):
        return int(e.value)
    if isinstance(e, te.Binary):
        a, b = eval_index(e.a, env), eval_index(e.b, env)
        if e.op == "add":
            return a + b
        if e.op == "sub":
            return a - b
        if e.op == "mul":
            return a * b
        if e.op in ("floordiv", "div"):
            return a // b if b else 0
        if e.op == "mod":
            return a % b if b else 0
        if e.op == "min":
            return min(a, b)
        if e.op == "max":
            return max(a, b)
        return 0
    if isinstance(e, te.Select):
        return eval_index(e.t if eval_index(e.cond, env) else e.f, env)
    if isinstance(e, te.Cast):
        return eval_index(e.a, env)
    return 0


class _Estimator:
    """Cycles of one loop nest on one core."""

    def __init__(self, machine: Machine) -> None:
        self.m = machine
        self.vector_bits = machine.vector_bits

    def stmt(self, s: Stmt, loops: list[_Loop]) -> float:
        if isinstance(s, For):
            trips = _trip_counts(s.extent, loops)
            extent = sum(trips) / len(trips)
            inner = self.stmt(s.body, [*loops, _Loop(s.var, extent, s.kind, trips)])
            # loop control of non-innermost loops: a couple of cycles per iteration
            outer_iters = math.prod(lp.extent for lp in loops) * extent
            return inner + (2.0 * outer_iters if not isinstance(s.body, Store) else 0.0)
        if isinstance(s, Seq):
            return sum(self.stmt(x, loops) for x in s.stmts)
        if isinstance(s, Store):
            return self.store(s, loops)
        if isinstance(s, Call):
            return 0.0  # a micro-kernel: its template's own cost model accounts for it
        raise TypeError(f"not a statement: {s!r}")

    def store(self, s: Store, loops: list[_Loop]) -> float:
        iters = math.prod(lp.extent for lp in loops)
        loads: list[BufLoad] = []
        _collect_loads(s.value, loads)
        accesses = {(id(s.buf), _key(s.index)): (s.buf, s.index)}
        for ld in loads:
            accesses.setdefault((id(ld.buf), _key(ld.index)), (ld.buf, ld.index))
        acc = [self.access(b.dtype, b.size, idx, loops) for b, idx in accesses.values()]
        compute = self.compute(s, loads, acc, loops, iters)
        m = self.m
        beyond_l2 = m.l3_bandwidth if sum(a.size * a.itemsize for a in acc) <= m.l3 \
            else m.memory_bandwidth
        memory = (self.traffic(acc, loops, m.l1) / (m.l2_bandwidth / m.hz)
                  + self.traffic(acc, loops, m.l2) / (beyond_l2 / m.hz))
        return max(compute, memory)

    def access(self, dtype: str, size: int, index: te.Expr, loops: list[_Loop]) -> _Access:
        base = eval_index(index, {})
        depends, stride = [], []
        for lp in loops:
            step = eval_index(index, {id(lp.var): 1}) - base
            n = max(1, round(lp.extent))
            last = eval_index(index, {id(lp.var): n - 1}) - base if n > 1 else 0
            depends.append(step != 0 or last != 0)
            stride.append(abs(step) if step else abs(last) // max(1, n - 1))
        return _Access(ITEMSIZE[dtype], size, depends, stride)

    def compute(self, s: Store, loads: list[BufLoad], acc: list[_Access], loops: list[_Loop],
                iters: int) -> float:
        ops = arithmetic_cost(s.value)
        if not loops:
            return ops + len(acc)
        inner = loops[-1]
        if inner.kind == "vectorize":
            # LLVM sizes the vector by the widest type the loop moves: a float32 -> uint8
            # quantization runs 16 lanes to a 512-bit vector, not 64
            lanes = max(1, self.vector_bits // (8 * max(a.itemsize for a in acc)))
            mem_ops = sum(0.0 if not a.depends[-1] else 1.0 if a.stride[-1] == 1 else lanes
                          for a in acc)
            # LLVM's vector body takes `lanes * interleave` elements a step; what is left runs
            # as scalar iterations (a 56-long loop at 16 lanes x 4 runs entirely scalar), each
            # at a scalar element's price: one move per access, not a lane's worth. Priced as
            # vector iterations, a 4-long loop of strided moves cost 16 moves an element and
            # lost to vectorising a long loop through gathers and scatters measured 10-20x
            # slower (Winograd's output transpose at 14x14)
            step = lanes * (INTERLEAVE if ops + mem_ops <= SMALL_BODY else 1)
            trips = len(inner.trips)
            # (a loop whose estimated trips are all 0 runs nothing)
            per_outer = iters / inner.extent if inner.extent else 0.0
            vectors = sum(n // step * step / lanes for n in inner.trips) / trips * per_outer
            scalars = sum(n % step for n in inner.trips) / trips * per_outer
            return (vectors * (ops / self.m.fma_per_cycle + mem_ops / self.m.loads_per_cycle
                               + 0.5)
                    + scalars * (self.scalar_element(ops, acc) + 1.0))
        per_iter = self.scalar_element(ops, acc) + (0.25 if inner.kind == "unroll" else 1.0)
        store_moves = acc[0].depends[-1]
        if not store_moves and any(ld.buf is s.buf for ld in loads):
            per_iter = max(per_iter, self.m.fma_latency)  # accumulating in one register: a chain
        return iters * per_iter

    def scalar_element(self, ops: float, acc: list[_Access]) -> float:
        """Cycles of one scalar iteration's work, loop control aside: its arithmetic and one
        move per access that the innermost loop moves (invariant ones are hoisted out)."""
        moves = sum(1.0 for a in acc if a.depends[-1])
        return ops / self.m.fma_per_cycle + moves / self.m.loads_per_cycle

    def traffic(self, acc: list[_Access], loops: list[_Loop], capacity: int) -> float:
        """Bytes refilled into a cache of `capacity` bytes: an access's data is reused across
        the iterations of a loop it does not depend on only while one iteration's working set
        (all accesses) fits."""
        m = len(loops)
        # footprint[a][i]: bytes access a touches in loops i..m-1
        foot = [[0.0] * (m + 1) for _ in acc]
        for ai, a in enumerate(acc):
            elems = 1
            for i in range(m, -1, -1):
                if i < m and a.depends[i]:
                    elems = min(a.size, elems * loops[i].extent)
                foot[ai][i] = elems * _line_bytes(a, i, m, self.m.line)
        total = 0.0
        for ai, a in enumerate(acc):
            refills = 1.0
            for i in range(m):
                if not a.depends[i] and sum(f[i + 1] for f in foot) > capacity:
                    refills *= loops[i].extent
            total += foot[ai][0] * refills
        return total


def _trip_counts(extent: te.Expr, loops: list[_Loop]) -> list[int]:
    """A loop's trip counts: one number, or for a partial block (min(f, bound - outer*f)) the
    count at each iteration of the enclosing loop it depends on."""
    first = max(1, eval_index(extent, {}))
    for lp in loops:
        n = round(lp.extent)
        if 1 < n <= 4096 and eval_index(extent, {id(lp.var): n - 1}) != first:
            return [max(0, eval_index(extent, {id(lp.var): v})) for v in range(n)]
    return [first]


def _line_bytes(a: _Access, level: int, m: int, line: int) -> float:
    """Bytes moved per element touched in loops level..m-1: whole lines when the innermost loop
    the access depends on jumps further than an element."""
    for i in range(m - 1, level - 1, -1):
        if a.depends[i]:
            return float(min(line, max(a.itemsize, a.stride[i] * a.itemsize)))
    return float(a.itemsize)


def arithmetic_cost(e: te.Expr) -> float:
    """Instructions `e` costs per element (a transcendental function is a polynomial's
    worth); loads and index arithmetic are free."""
    if isinstance(e, (te.Var, te.Const, BufLoad)):
        return 0.0
    own = 0.0
    if isinstance(e, te.Binary):
        own = _OP_COST.get(e.op, 1.0)
    elif isinstance(e, te.Unary):
        own = _OP_COST.get(e.op, 1.0)
    elif isinstance(e, (te.Select, te.Cast)):
        own = 1.0
    return own + sum(arithmetic_cost(c) for c in te.children(e))


def _collect_loads(e: te.Expr, out: list[BufLoad]) -> None:
    if isinstance(e, BufLoad):
        out.append(e)
        _collect_loads(e.index, out)
        return
    if isinstance(e, (te.Var, te.Const)):
        return
    for c in te.children(e):
        _collect_loads(c, out)


def _key(index: te.Expr) -> str:
    return repr(index)
