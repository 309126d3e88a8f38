"""Tensorize: match a lowered `C[m, n] += A[m, k] * B[k, n]` block against the GEMM micro-kernel.

The match is on the accesses, not on names (AMOS-style): the update must be the product of two
loads; every flat index must be affine in the three tensorized loop variables with constant
coefficients. Roles follow from which variables each access uses: C uses m and n (n with
stride 1), B uses k and n (n with stride 1), A uses m and k. The strides and the base pointers
(the index with the tensorized variables at 0) become the micro-kernel's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

from lowering import te
from lowering.affine import normalize
from lowering.intrinsics import GemmBlock
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
