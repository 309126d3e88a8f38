"""Tensorize: match a lowered `C[m, n] += A[m, k] * B[k, n]` block against the GEMM micro-kernel.

The match is on the accesses, not on names (AMOS-style): the update must be the product of two
loads; every flat index must be affine in the three tensorized loop variables with constant
coefficients. Roles follow from which variables each access uses: C uses m and n (n with
stride 1), B uses k and n (n with stride 1), A uses m and k. The strides and the base pointers
(the index with the tensorized variables at 0) become the micro-kernel's arguments.

`match_mma` matches a whole reduction stage against a GPU matrix instruction's description
(`intrinsics.MmaInstruction`): which of its axes play the instruction's i, j and kk, from
which axes each operand of the product uses, and whether the element types are the
instruction's. Its lowering (`lower._mma`) stages zero-padded fragments, so extents need not
be multiples of the instruction's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import permutations

from lowering import te
from lowering.affine import normalize
from lowering.intrinsics import GemmBlock, MmaInstruction
from lowering.loop_ir import Buffer, BufLoad, BufPtr, Call
from lowering.schedule import Loop, ScheduleError

I64 = "int64"


def _opaque(e: te.Expr, loops: Sequence[Loop]) -> te.Expr:
    """`e` with every part that uses no tensorized variable replaced by a fresh variable (a
    clipped tile origin `max(.., 0)` is fixed in the block, whatever its form)."""
    if isinstance(e, te.Const):
        return e
    if not any(_mentions(e, lp.var) for lp in loops):
        return te.Var("fixed")
    if isinstance(e, te.Binary):
        return te.Binary(e.op, _opaque(e.a, loops), _opaque(e.b, loops))
    return e


def _strides(index: te.Expr, loops: Sequence[Loop], what: str) -> dict[te.Var, int]:
    form = normalize(_opaque(index, loops))
    names = ", ".join(lp.name for lp in loops)
    if form is None or not all(form.depends_only_linearly(lp.var) for lp in loops):
        raise ScheduleError(f"tensorize: the index of {what} is not affine in ({names})")
    return {lp.var: form.coefficient(lp.var) for lp in loops}


def _base(buf: Buffer, index: te.Expr, loops: Sequence[Loop]) -> BufPtr:
    return BufPtr(buf, te.substitute(index, {lp.var: te.Const(0, I64) for lp in loops}))


def gemm_call(loops: Sequence[Loop], blk: GemmBlock, out: Buffer, out_index: te.Expr,
              value: te.Expr, accumulate: te.Expr) -> Call:
    """The micro-kernel call computing `out[out_index] += value` over `loops`."""
    if not (isinstance(value, te.Binary) and value.op == "mul"
            and isinstance(value.a, BufLoad) and isinstance(value.b, BufLoad)):
        raise ScheduleError("tensorize: the reduction body is not a product of two loads")
    for b in (out, value.a.buf, value.b.buf):
        if b.dtype != "float32":
            raise ScheduleError(f"tensorize: {b.name} is {b.dtype}; {blk.routine} is float32")
    (k,) = [lp for lp in loops if lp.origin == "reduce"]
    spatial = [lp for lp in loops if lp.origin == "spatial"]
    for lp in loops:
        deps = lp.extent_expr()
        if any(_mentions(deps, x.var) for x in loops):
            raise ScheduleError(f"tensorize: the extent of {lp.name} depends on a tensorized loop")
    c = _strides(out_index, loops, f"output {out.name}")
    reasons = []
    for (m, n), (a, b) in ((mn, ab) for mn in permutations(spatial)
                           for ab in ((value.a, value.b), (value.b, value.a))):
        sa = _strides(a.index, loops, f"operand {a.buf.name}")
        sb = _strides(b.index, loops, f"operand {b.buf.name}")
        why = []
        if c[n.var] != 1 or c[k.var] != 0:
            why.append(f"output not contiguous in {n.name} or uses {k.name}")
        if sb[n.var] != 1 or sb[m.var] != 0:
            why.append(f"{b.buf.name} not contiguous in {n.name} or uses {m.name}")
        if sa[n.var] != 0:
            why.append(f"{a.buf.name} uses {n.name}")
        if m.extent > blk.mr or n.extent > blk.nr:
            why.append(f"{m.name}<{m.extent}> x {n.name}<{n.extent}> exceeds the "
                       f"{blk.mr} x {blk.nr} block")
        if why:
            reasons.append(f"m={m.name}, n={n.name}, A={a.buf.name}: " + "; ".join(why))
            continue
        i64 = [te.Const(v, I64) for v in (sa[m.var], sa[k.var], sb[k.var], c[m.var])]
        return Call(blk.routine, [
            _base(a.buf, a.index, loops), i64[0], i64[1],
            _base(b.buf, b.index, loops), i64[2],
            _base(out, out_index, loops), i64[3],
            k.extent_expr(), m.extent_expr(), n.extent_expr(), accumulate,
            te.Const(0, I64), *epilogue_args(out),
        ])
    raise ScheduleError("tensorize: no GEMM role assignment fits: " + " | ".join(reasons))


def epilogue_args(out: Buffer, bias: BufPtr | None = None, lo: float | None = None,
                  hi: float | None = None, residual: BufPtr | None = None
                  ) -> list[BufPtr | te.Expr]:
    """The micro-kernels' epilogue arguments (EPILOGUE_PARAMS): the bias pointer and its
    flag, the clamps, the residual pointer and its flag; absent parts are off (their
    pointers then name `out`, never read)."""
    none = BufPtr(out, te.Const(0, I64))

    def flag(on: bool) -> te.Const:
        return te.Const(int(on), I64)

    return [bias or none, flag(bias is not None),
            flag(lo is not None), te.Const(lo or 0.0, "float32"),
            flag(hi is not None), te.Const(hi or 0.0, "float32"),
            residual or none, flag(residual is not None)]


def _mentions(e: te.Expr, v: te.Var) -> bool:
    if e is v:
        return True
    if isinstance(e, BufLoad):
        return _mentions(e.index, v)
    return any(_mentions(c, v) for c in te.children(e))


# Matrix instructions (GPU tensor cores) ------------------------------------------------------
# the least fraction of the padded fragments' multiply-adds a stage must use (below it the
# zero padding costs more than the instruction saves)
MMA_MIN_FILL = 0.25


@dataclass(frozen=True)
class MmaMatch:
    """A reduction stage mapped onto an instruction's loops: the output axes (positions in
    `op.axes`, outermost first) fused into its i (`m`) and j (`n`), the axes both operands
    follow (`batch`: one instruction problem each), the reduce axes (positions in the
    reduction's axes) fused into kk (`k`); `a` is the factor of the product (0 or 1) that
    is the instruction's A (indexed by i and kk). Axes of extent 1 are in none of them."""

    instr: MmaInstruction
    m: tuple[int, ...]
    n: tuple[int, ...]
    batch: tuple[int, ...]
    k: tuple[int, ...]
    a: int
    extents: tuple[int, int, int]  # M, N, K

    @property
    def fill(self) -> float:
        """The fraction of the padded fragments' multiply-adds that are the stage's."""
        i = self.instr
        return math.prod(self.extents) / math.prod(
            -(-e // f) * f for e, f in zip(self.extents, (i.m, i.n, i.k), strict=True))


@dataclass(frozen=True)
class Refused:
    """Why a stage does not match an instruction (falsy, like None)."""

    reason: str

    def __bool__(self) -> bool:
        return False


def _operand_type(e: te.Expr) -> str:
    """The element type a product's factor holds exactly: its own, or the source's of a
    widening cast to float32 (a half converted for float32 arithmetic)."""
    if isinstance(e, te.Cast) and e.dtype == "float32" and e.a.dtype in te.HALF_DTYPES:
        return e.a.dtype
    return e.dtype


def _uses(e: te.Expr, v: te.Var) -> bool:
    return te.mentions(e, v)


def match_mma(tensor: te.Tensor, instr: MmaInstruction, allow_opt_in: bool = False
              ) -> MmaMatch | Refused:
    """Whether `tensor`'s computation is the instruction's, `C += A * B` summed into a
    float32 accumulator over fused axes: a sum reduction whose body is the product of two
    factors of the instruction's operand type, one of which (A) uses some output axes that
    the other (B) ignores (fused: i) and the reduce axes (fused: kk), B output axes that A
    ignores (j); axes both use are a batch. Returns the mapping, or why not."""
    op = tensor.op
    if op is None or not isinstance(op.body, te.Reduce):
        return Refused(f"{tensor.name} is not a reduction")
    red = op.body
    if red.combiner != "sum":
        return Refused(f"{tensor.name} is a {red.combiner} reduction, {instr.name} sums")
    if instr.opt_in and not allow_opt_in:
        return Refused(f"{instr.name} rounds its operands (only on request)")
    if tensor.dtype not in ("float32", *te.HALF_DTYPES):
        return Refused(f"{tensor.name} is {tensor.dtype}; {instr.name} accumulates "
                       f"{instr.accumulator}")
    body = te.expand_inline(red.body)
    if not (isinstance(body, te.Binary) and body.op == "mul"):
        return Refused(f"{tensor.name}'s reduction body is not a product of two values")
    factors = (body.a, body.b)
    for f in factors:
        got = _operand_type(f)
        if got != instr.operand:
            return Refused(f"an operand of {tensor.name} is {got}; {instr.name} takes "
                           f"{instr.operand}")
    k = tuple(i for i, ax in enumerate(red.axes) if ax.extent > 1)
    if not k:
        return Refused(f"{tensor.name} reduces over fewer than 2 values")
    long_axes = [i for i, ax in enumerate(op.axes) if ax.extent > 1]
    reasons = []
    found: list[MmaMatch] = []
    for a in (0, 1):
        fa, fb = factors[a], factors[1 - a]
        m = tuple(i for i in long_axes if _uses(fa, op.axes[i].var)
                  and not _uses(fb, op.axes[i].var))
        n = tuple(i for i in long_axes if _uses(fb, op.axes[i].var)
                  and not _uses(fa, op.axes[i].var))
        batch = tuple(i for i in long_axes if i not in m and i not in n)
        if not m or not n:
            reasons.append(f"with factor {a} as A: no output axis that only "
                           f"{'A' if not m else 'B'} uses")
            continue
        if not all(any(_uses(f, red.axes[i].var) for i in k) for f in factors):
            reasons.append("a factor does not follow the reduction")
            continue
        extents = (math.prod(op.axes[i].extent for i in m),
                   math.prod(op.axes[i].extent for i in n),
                   math.prod(red.axes[i].extent for i in k))
        got = MmaMatch(instr, m, n, batch, k, a, extents)
        if got.fill < MMA_MIN_FILL:
            M, N, K = extents
            return Refused(f"a {M} x {N} x {K} product fills {got.fill:.0%} of the "
                           f"{instr.m}x{instr.n}x{instr.k} fragments it needs (at least "
                           f"{MMA_MIN_FILL:.0%})")
        found.append(got)
    if found:  # j over the output's innermost axis first (the epilogue's stores coalesce)
        return min(found, key=lambda f: f.n[-1] != long_axes[-1])
    return Refused(f"{tensor.name} is not a product of two operands that each ignore an "
                   "output axis the other uses: " + "; ".join(reasons))
