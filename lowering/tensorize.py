"""Tensorize: match a lowered `C[m, n] += A[m, k] * B[k, n]` block against the GEMM micro-kernel.

The match is on the accesses, not on names (AMOS-style): the update must be the product of two
loads; every flat index must be affine in the three tensorized loop variables with constant
coefficients. Roles follow from which variables each access uses: C uses m and n (n with
stride 1), B uses k and n (n with stride 1), A uses m and k. The strides and the base pointers
(the index with the tensorized variables at 0) become the micro-kernel's arguments.

`match_int_dot` matches an integer product reduction (int8/uint8 values less zero points,
summed into int32) against a GPU's 4-way dot product (`intrinsics.GpuIntDot`) and gives the
equivalent reduction over packed words (`IntDotMatch.body`).

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
from lowering.intrinsics import GemmBlock, GpuIntDot, MmaInstruction
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
                  hi: float | None = None, residual: BufPtr | None = None,
                  bias_on_columns: bool = False) -> list[BufPtr | te.Expr]:
    """The micro-kernels' epilogue arguments (EPILOGUE_PARAMS): the bias pointer and its
    flag (2: the GEMM kernel's bias per column, see intrinsics), the clamps, the residual
    pointer and its flag; absent parts are off (their pointers then name `out`, never
    read)."""
    none = BufPtr(out, te.Const(0, I64))

    def flag(on: bool) -> te.Const:
        return te.Const(int(on), I64)

    bias_flag = te.Const(0 if bias is None else 2 if bias_on_columns else 1, I64)
    return [bias or none, bias_flag,
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


def _sum_reduction(tensor: te.Tensor, instr: str) -> te.Reduce | Refused:
    """The stage's reduction if it is a sum (what an instruction `instr` accumulates)."""
    op = tensor.op
    if op is None or not isinstance(op.body, te.Reduce):
        return Refused(f"{tensor.name} is not a reduction")
    if op.body.combiner != "sum":
        return Refused(f"{tensor.name} is a {op.body.combiner} reduction, {instr} sums")
    return op.body


def _uses(e: te.Expr, v: te.Var) -> bool:
    return te.mentions(e, v)


def match_mma(tensor: te.Tensor, instr: MmaInstruction, allow_opt_in: bool = False
              ) -> MmaMatch | Refused:
    """Whether `tensor`'s computation is the instruction's, `C += A * B` summed into a
    float32 accumulator over fused axes: a sum reduction whose body is the product of two
    factors of the instruction's operand type, one of which (A) uses some output axes that
    the other (B) ignores (fused: i) and the reduce axes (fused: kk), B output axes that A
    ignores (j); axes both use are a batch. An `opt_in` instruction (tf32, which rounds
    float32 operands) only where `allow_opt_in` (the user asked). Returns the mapping, or
    why not."""
    red = _sum_reduction(tensor, instr.name)
    if isinstance(red, Refused):
        return red
    op = tensor.op
    assert op is not None
    if instr.opt_in and not allow_opt_in:
        return Refused(f"{instr.name} rounds its operands to {instr.rounds_to}, which changes "
                       "the results: only on request (aotc optimize --allow-tf32)")
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


# 4-way integer dot products (GPUs) ----------------------------------------------------------
_BYTES = ("int8", "uint8")
_SHIFT = {("uint8", "int8"): -128, ("int8", "uint8"): 128}  # what moves a value into the type


@dataclass(frozen=True)
class ByteFactor:
    """A factor of an integer product as the dot instruction takes it: `int32(byte) - zero`,
    `byte` an 8-bit value (a convolution's padding already the zero point's byte, so the
    factor is 0 there), `zero` an int32 value of the output axes (None: 0)."""

    byte: te.Expr
    zero: te.Expr | None


def _zero_byte(z: te.Expr, dtype: str) -> te.Expr | None:
    """The 8-bit value of a zero point `z` (int32) in `dtype`, if it is one."""
    if isinstance(z, te.Cast) and z.a.dtype == dtype:
        return z.a
    if isinstance(z, te.Const) and te.int_range(dtype)[0] <= int(z.value) <= te.int_range(dtype)[1]:
        return te.Const(int(z.value), dtype)
    return None


def _byte_factor(e: te.Expr, reduce_vars: list[te.Var]) -> ByteFactor | None:
    """`e` as `int32(byte) - zero`: a widened 8-bit value, less a zero point that ignores the
    reduction, possibly zero where a select says (a convolution's padding). A load of an
    int32 element-wise stage (a convolution's padding stage) is read through: the matched
    body computes the element from the stage's own inputs, so the stage is no longer read.
    None if not."""
    if (isinstance(e, te.Load) and e.dtype == "int32" and e.tensor.op is not None
            and not isinstance(e.tensor.op.body, te.Reduce)):
        op = e.tensor.op
        inner = te.expand_inline(te.substitute(op.body, {
            ax.var: i for ax, i in zip(op.axes, e.indices, strict=True)}))
        return _byte_factor(inner, reduce_vars)
    if isinstance(e, te.Cast) and e.dtype == "int32" and e.a.dtype in _BYTES:
        return ByteFactor(e.a, None)
    if isinstance(e, te.Binary) and e.op == "sub":
        inner = _byte_factor(e.a, reduce_vars)
        if inner is None or inner.zero is not None or any(_uses(e.b, v) for v in reduce_vars):
            return None
        if _zero_byte(e.b, inner.byte.dtype) is None:
            return None
        return ByteFactor(inner.byte, e.b)
    if isinstance(e, te.Select) and isinstance(e.f, te.Const) and e.f.value == 0:
        inner = _byte_factor(e.t, reduce_vars)
        if inner is None:
            return None
        pad = (te.Const(0, inner.byte.dtype) if inner.zero is None
               else _zero_byte(inner.zero, inner.byte.dtype))
        assert pad is not None
        return ByteFactor(te.select(e.cond, inner.byte, pad), inner.zero)
    return None


@dataclass(frozen=True)
class IntDotMatch:
    """An integer product reduction mapped onto a dot instruction: its two factors, the
    reduce axis (position) split into words of `instr.group` values, and how many correction
    dot products the zero points cost per word (0 to 2)."""

    tensor: te.Tensor
    instr: GpuIntDot
    factors: tuple[ByteFactor, ByteFactor]
    axis: int

    def _operand(self, f: ByteFactor) -> tuple[te.Expr, te.Expr | None]:
        """The factor's byte in the instruction's type and its zero point there (int32 or
        None): `int32(byte) - zero` is unchanged."""
        shift = _SHIFT.get((f.byte.dtype, self.instr.element), 0)
        if not shift:
            return f.byte, f.zero
        byte = te.cast(self.instr.element, te.cast("int32", f.byte) + shift)
        zero = te.Const(shift, "int32") if f.zero is None else f.zero + shift
        return byte, zero

    @property
    def corrections(self) -> int:
        return sum(self._operand(f)[1] is not None for f in self.factors)

    def body(self) -> te.Reduce:
        """The same sum over words: with a' = A + za, b' = B + zb in the instruction's type,
        sum_k A*B = sum_w dot(a', b') - zb*dot(a', 1) - za*dot(1, b') + K*za*zb. Values past
        the split axis's end are 0 in both words, so only the initial value counts K."""
        op = self.tensor.op
        assert op is not None and isinstance(op.body, te.Reduce)
        red = op.body
        split = red.axes[self.axis]
        g = self.instr.group
        words = te.reduce_axis(-(-split.extent // g), f"{split.var.name}_w")
        axes = [ax for i, ax in enumerate(red.axes) if i != self.axis] + [words]
        (a, za), (b, zb) = (self._operand(f) for f in self.factors)

        def word(byte: te.Expr) -> te.Expr:
            out: te.Expr | None = None
            for j in range(g):
                k = words.var * g + j
                x = te.substitute(byte, {split.var: k})
                if split.extent % g:
                    x = te.select(te.lt(k, split.extent), x, te.Const(0, byte.dtype))
                u = te.cast("uint32", te.cast("uint8", x))
                u = u if j == 0 else te.binary("shl", u, te.Const(8 * j, "uint32"))
                out = u if out is None else te.binary("or", out, u)
            assert out is not None
            return out

        wa, wb = word(a), word(b)
        ones = te.Const(0x01010101, "uint32")
        value = te.binary(self.instr.name, wa, wb)
        if zb is not None:
            value = value - zb * te.binary(self.instr.name, wa, ones)
        if za is not None:
            value = value - za * te.binary(self.instr.name, ones, wb)
        init = red.init
        if za is not None and zb is not None:
            count = math.prod(ax.extent for ax in red.axes)
            init = init + te.Const(count, "int32") * za * zb
        return te.Reduce("sum", value, axes, init)


def match_int_dot(tensor: te.Tensor, instr: GpuIntDot) -> IntDotMatch | Refused:
    """Whether `tensor` is an int32 sum of products of two 8-bit values less zero points
    (what MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv compose to), which the
    4-way dot product `instr` computes 4 at a time: returns the mapping (the reduce axis to
    split: the innermost whose extent is a multiple of 4, else the longest), or why not."""
    red = _sum_reduction(tensor, instr.name)
    if isinstance(red, Refused):
        return red
    op = tensor.op
    assert op is not None
    if tensor.dtype != instr.accumulator:
        return Refused(f"{tensor.name} is {tensor.dtype}; {instr.name} accumulates "
                       f"{instr.accumulator}")
    if any(isinstance(ax.extent, te.DynExtent) for ax in red.axes):
        return Refused(f"{tensor.name} reduces over a run-time dimension")
    body = te.expand_inline(red.body)
    if not (isinstance(body, te.Binary) and body.op == "mul"):
        return Refused(f"{tensor.name}'s reduction body is not a product of two values")
    reduce_vars = [ax.var for ax in red.axes]
    factors = []
    for f in (body.a, body.b):
        got = _byte_factor(f, reduce_vars)
        if got is None:
            return Refused(f"an operand of {tensor.name} is not an int8/uint8 value less a "
                           f"zero point ({f.dtype}); {instr.name} takes 8-bit values")
        factors.append(got)
    if math.prod(ax.extent for ax in red.axes) < instr.group:
        return Refused(f"{tensor.name} reduces over fewer than {instr.group} values")
    multiple = [i for i, ax in enumerate(red.axes) if ax.extent % instr.group == 0]
    axis = multiple[-1] if multiple else max(range(len(red.axes)),
                                              key=lambda i: (red.axes[i].extent, i))
    return IntDotMatch(tensor, instr, (factors[0], factors[1]), axis)
