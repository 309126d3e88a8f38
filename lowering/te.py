"""Tensor expressions: the algorithm of an operator, with no word about loops or targets.

`Out[idx] = reduce(op(In1[f1(idx, r)], ...), r)`: a tensor is a placeholder (an input) or a
`compute` over its index variables; reductions name their reduction axes explicitly. Schedules
(lowering/schedule.py) decide the loops; the code generator decides the instructions.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Sequence

# Element types (bool last: `DTYPES[:-1]` are the numeric ones; names are numpy's, with
# ml_dtypes imported). float16 and bfloat16 are storage types: a value of either is held as a
# float32 (exactly: loads and casts give representable values), arithmetic on it is float32's,
# and a store or a cast to the type rounds to nearest even. Operator definitions see them as
# float32 (ops.run_op).
HALF_DTYPES = ("float16", "bfloat16")
# The 8- and 4-bit floats (ONNX's FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ,
# FLOAT8E8M0, FLOAT4E2M1), one byte per element in memory and a float32 in registers like the
# halves, but definitions see them as they are (few operators take them: Cast, quantization,
# data movement); a load decodes exactly, a cast to one rounds as ONNX's Cast does with its
# defaults (targets/cpu/narrow_ir.py; other saturate/round_mode settings: lowering/convert.py).
NARROW_FLOAT_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                       "float8_e8m0fnu", "float4_e2m1fn")
FLOAT_DTYPES = ("float32", "float64", *HALF_DTYPES, *NARROW_FLOAT_DTYPES)
# int4/uint4/int2/uint2 take one byte per element (the value in its low bits, as ml_dtypes
# keeps them) and are an i8 in registers, sign- or zero-extended; a store keeps the low bits.
NARROW_INT_DTYPES = ("int4", "int2", "uint4", "uint2")
SIGNED_INT_DTYPES = ("int64", "int32", "int16", "int8", "int4", "int2")
UNSIGNED_DTYPES = ("uint64", "uint32", "uint16", "uint8", "uint4", "uint2")
INT_DTYPES = SIGNED_INT_DTYPES + UNSIGNED_DTYPES
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
SIGNED_DTYPES = FLOAT_DTYPES + SIGNED_INT_DTYPES  # the types with negative values
DTYPES = (*NUMERIC_DTYPES, "bool")
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
            "int16": 2, "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
            **dict.fromkeys(NARROW_FLOAT_DTYPES + NARROW_INT_DTYPES, 1)}
# Value bits of the integer types (their range); the narrow ones are narrower than their byte.
INT_BITS = {**{t: 8 * ITEMSIZE[t] for t in INT_DTYPES}, "int4": 4, "uint4": 4, "int2": 2,
            "uint2": 2}


def float_value(value: float, dtype: str) -> float:
    """`value` rounded to a float type (to nearest even; past the largest finite value ±inf,
    or what ml_dtypes gives for the narrow floats)."""
    if dtype == "float64" or math.isnan(value):
        return value
    if dtype in NARROW_FLOAT_DTYPES:
        import ml_dtypes  # noqa: F401 (numpy's names for the narrow floats)
        import numpy as np

        with np.errstate(all="ignore"):
            return float(np.array(value, np.float32).astype(dtype).astype(np.float32))
    try:
        if dtype == "float16":
            return struct.unpack("<e", struct.pack("<e", value))[0]
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # past the type's largest finite value (a Python float is float64)
        return math.copysign(math.inf, value)
    if dtype == "bfloat16":  # the top 16 bits of the float32, rounded to nearest even
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer type."""
    bits = INT_BITS[dtype]
    if dtype in UNSIGNED_DTYPES:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1

_counter = itertools.count()


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_counter)}"


class TEError(Exception):
    """A tensor expression was built wrongly (a bug in an operator definition)."""


class Expr:
    """A scalar expression. Python operators build new expressions; == stays identity."""

    __slots__ = ("dtype",)
    dtype: str

    # arithmetic -------------------------------------------------------------------------
    def __add__(self, o: ExprLike) -> Expr:
        return binary("add", self, o)

    def __radd__(self, o: ExprLike) -> Expr:
        return binary("add", o, self)

    def __sub__(self, o: ExprLike) -> Expr:
        return binary("sub", self, o)

    def __rsub__(self, o: ExprLike) -> Expr:
        return binary("sub", o, self)

    def __mul__(self, o: ExprLike) -> Expr:
        return binary("mul", self, o)

    def __rmul__(self, o: ExprLike) -> Expr:
        return binary("mul", o, self)

    def __truediv__(self, o: ExprLike) -> Expr:
        return binary("div", self, o)

    def __rtruediv__(self, o: ExprLike) -> Expr:
        return binary("div", o, self)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return binary("floordiv", self, o)

    def __mod__(self, o: ExprLike) -> Expr:
        return binary("mod", self, o)

    def __neg__(self) -> Expr:
        return unary("neg", self)


ExprLike = Expr | int | float | bool


class Var(Expr):
    """An index variable (int64)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name
        self.dtype = "int64"

    def __repr__(self) -> str:
        return self.name


class DimVar(Var):
    """A dimension left symbolic (`--input-shape x=1,1..512`): its run-time value, entry
    `index` of the kernel's `dims` argument, between `lo` and `hi` (the bound every buffer is
    laid out and planned for). One object per dimension (`dim_var`), named `dim<index>`."""

    __slots__ = ("index", "lo", "hi")

    def __init__(self, index: int, lo: int, hi: int) -> None:
        super().__init__(f"dim{index}")
        self.index, self.lo, self.hi = index, lo, hi


_DIM_VARS: dict[tuple[int, int, int], DimVar] = {}


def dim_var(index: int, lo: int, hi: int) -> DimVar:
    """The one DimVar of dimension `index` with that range."""
    return _DIM_VARS.setdefault((index, lo, hi), DimVar(index, lo, hi))


class DynExtent(int):
    """A tensor dimension that is symbolic: its value is the bound (`dim.hi`), so every size
    computed from it is the size planned for; `dim` says which run-time dimension it is. Loops
    over it run to the run-time value (schedule.StageSchedule gives them `dim` as bound)."""

    dim: DimVar

    def __new__(cls, dim: DimVar) -> DynExtent:
        obj = super().__new__(cls, dim.hi)
        obj.dim = dim
        return obj

    def __repr__(self) -> str:
        return f"{self.dim.name}<={int(self)}"


def keep_extent(n: int) -> int:
    """`n` as an int, a DynExtent kept as it is."""
    return n if isinstance(n, DynExtent) else int(n)


def run_extent(n: int) -> Expr:
    """What a loop over an axis of extent `n` runs to: the run-time dimension's variable for a
    DynExtent, else the constant."""
    return n.dim if isinstance(n, DynExtent) else Const(int(n), "int64")


def run_product(extents: Sequence[int]) -> Expr:
    """The product of `extents` at run time: a constant when none is a DynExtent, else the
    static part times each run-time dimension's variable (a static part of 1 left out)."""
    static = math.prod(int(n) for n in extents if not isinstance(n, DynExtent))
    out: Expr = Const(static, "int64")
    for n in extents:
        if isinstance(n, DynExtent):
            out = n.dim if isinstance(out, Const) and out.value == 1 else out * n.dim
    return out


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value: float | int | bool, dtype: str) -> None:
        if dtype not in DTYPES:
            raise TEError(f"unknown dtype {dtype}")
        if dtype == "bool":
            value = bool(value)
        elif dtype in INT_DTYPES:
            value = int(value)
        elif dtype in HALF_DTYPES or dtype in NARROW_FLOAT_DTYPES:
            value = float_value(float(value), dtype)
        else:
            value = float(value)
        self.value = value
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"{self.value!r}:{self.dtype}"


class Binary(Expr):
    __slots__ = ("op", "a", "b")
    # "max" is IEEE 754 maximumNumber: a NaN operand is ignored, -0 is below +0. "max_nan" is
    # for maxima that only shift (softmax, log-sum-exp): a NaN operand gives NaN, and a zero
    # result may have either sign; neither changes what those ops compute from it, and it is
    # the max a CPU computes fastest (one instruction and one NaN test, reduced by halves).
    ARITH = ("add", "sub", "mul", "div", "floordiv", "mod", "min", "max", "max_nan", "pow",
             "fmod")  # fmod: C's fmod of floats (the dividend's sign), exact
    COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
    LOGIC = ("and", "or", "xor")  # bools, and integers bit by bit
    # integer shifts by a count in [0, width) (LLVM's poison beyond: guard the count); "shr"
    # shifts in the sign bit for signed types, zeros for unsigned ones
    SHIFT = ("shl", "shr")
    # a GPU's 4-way integer dot product (lowering/intrinsics.py `GpuIntDot`, named by its
    # description): two uint32 words of 4 int8 ("dot4_s8") or uint8 ("dot4_u8") values,
    # the int32 sum of the 4 products; only GPU schedules write it (tensorize.match_int_dot)
    DOT = ("dot4_s8", "dot4_u8")

    def __init__(self, op: str, a: Expr, b: Expr) -> None:
        if a.dtype != b.dtype:
            raise TEError(f"{op}: operand dtypes differ ({a.dtype} vs {b.dtype})")
        self.op, self.a, self.b = op, a, b
        if op in self.COMPARE:
            self.dtype = "bool"
        elif op in self.ARITH or op in self.LOGIC or op in self.SHIFT:
            self.dtype = a.dtype
        elif op in self.DOT:
            if a.dtype != "uint32":
                raise TEError(f"{op}: operands are uint32 words, not {a.dtype}")
            self.dtype = "int32"
        else:
            raise TEError(f"unknown binary op {op}")

    def __repr__(self) -> str:
        return f"{self.op}({self.a!r}, {self.b!r})"


class Unary(Expr):
    __slots__ = ("op", "a")
    OPS = (
        "neg", "abs", "exp", "log", "sqrt", "tanh", "erf", "sigmoid", "softplus",
        "floor", "ceil", "round", "not", "sin", "cos", "tan",
        "asin", "acos", "atan", "asinh", "acosh", "atanh", "sinh", "cosh",
    )

    def __init__(self, op: str, a: Expr) -> None:
        if op not in self.OPS:
            raise TEError(f"unknown unary op {op}")
        self.op, self.a, self.dtype = op, a, a.dtype

    def __repr__(self) -> str:
        return f"{self.op}({self.a!r})"


class Select(Expr):
    __slots__ = ("cond", "t", "f")

    def __init__(self, cond: Expr, t: Expr, f: Expr) -> None:
        if cond.dtype != "bool":
            raise TEError("select condition must be bool")
        if t.dtype != f.dtype:
            raise TEError(f"select branches differ ({t.dtype} vs {f.dtype})")
        self.cond, self.t, self.f, self.dtype = cond, t, f, t.dtype

    def __repr__(self) -> str:
        return f"select({self.cond!r}, {self.t!r}, {self.f!r})"


class Cast(Expr):
    __slots__ = ("a",)

    def __init__(self, dtype: str, a: Expr) -> None:
        if dtype not in DTYPES:
            raise TEError(f"unknown dtype {dtype}")
        self.a, self.dtype = a, dtype

    def __repr__(self) -> str:
        return f"cast<{self.dtype}>({self.a!r})"


class Load(Expr):
    __slots__ = ("tensor", "indices")

    def __init__(self, tensor: Tensor, indices: Sequence[Expr]) -> None:
        if len(indices) != len(tensor.shape):
            raise TEError(
                f"{tensor.name}: {len(indices)} indices for a rank-{len(tensor.shape)} tensor"
            )
        self.tensor = tensor
        self.indices = tuple(indices)
        self.dtype = tensor.dtype

    def __repr__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"


class IterVar:
    """A loop of a compute: spatial (indexes the output) or reduce."""

    __slots__ = ("var", "extent", "kind")

    def __init__(self, name: str, extent: int, kind: str) -> None:
        self.var = Var(name)
        self.extent = keep_extent(extent)
        self.kind = kind

    def __repr__(self) -> str:
        return f"{self.var.name}<{self.extent},{self.kind}>"


class Reduce(Expr):
    """`combiner` over `axes` of `body`; only allowed as the whole body of a compute."""

    __slots__ = ("combiner", "body", "axes", "init")
    COMBINERS = ("sum", "max", "min", "prod", "max_nan")

    def __init__(self, combiner: str, body: Expr, axes: Sequence[IterVar], init: Expr) -> None:
        if combiner not in self.COMBINERS:
            raise TEError(f"unknown reduction {combiner}")
        self.combiner, self.body, self.axes, self.init = combiner, body, tuple(axes), init
        self.dtype = body.dtype

    def __repr__(self) -> str:
        return f"{self.combiner}({self.body!r}, axes={list(self.axes)})"


class Tensor:
    """A tensor: placeholder (op is None) or the result of a compute."""

    def __init__(self, shape: Sequence[int], dtype: str, name: str, op: ComputeOp | None = None):
        if dtype not in DTYPES:
            raise TEError(f"unknown dtype {dtype}")
        self.shape = tuple(keep_extent(d) for d in shape)
        self.dtype = dtype
        self.name = name
        self.op = op

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __getitem__(self, idx: ExprLike | tuple[ExprLike, ...]) -> Load:
        if not isinstance(idx, tuple):
            idx = (idx,)
        return Load(self, [as_expr(i, "int64") for i in idx])

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


class ComputeOp:
    """`tensor[axes] = body`; `inline` asks the lowering to substitute it at every use."""

    def __init__(self, axes: list[IterVar], body: Expr, inline: bool, tag: str) -> None:
        self.axes = axes
        self.body = body
        self.inline = inline
        self.tag = tag

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()


# construction helpers --------------------------------------------------------------------

def as_expr(v: ExprLike, dtype: str) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool) and dtype != "bool":
        v = int(v)
    return Const(v, dtype)


def const(value: float | int | bool, dtype: str = "float32") -> Const:
    return Const(value, dtype)


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TEError("binary op needs at least one expression")
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)  # type: ignore[union-attr]
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    return _simplify(Binary(op, a, b))


def _simplify(e: Binary) -> Expr:
    """Fold constant integer index arithmetic so that loop bounds and indices stay small."""
    a, b = e.a, e.b
    if e.dtype in INT_DTYPES and e.op in ("add", "sub", "mul", "floordiv", "mod", "min", "max"):
        if isinstance(a, Const) and isinstance(b, Const):
            x, y = int(a.value), int(b.value)
            ops: dict[str, Callable[[int, int], int]] = {
                "add": lambda p, q: p + q, "sub": lambda p, q: p - q, "mul": lambda p, q: p * q,
                "floordiv": lambda p, q: p // q, "mod": lambda p, q: p % q,
                "min": min, "max": max,
            }
            return Const(ops[e.op](x, y), e.dtype)
        if e.op == "add" and isinstance(b, Const) and b.value == 0:
            return a
        if e.op == "add" and isinstance(a, Const) and a.value == 0:
            return b
        if e.op == "sub" and isinstance(b, Const) and b.value == 0:
            return a
        if e.op == "mul" and isinstance(b, Const) and b.value == 1:
            return a
        if e.op == "mul" and isinstance(a, Const) and a.value == 1:
            return b
        if e.op == "mul" and (
            (isinstance(a, Const) and a.value == 0) or (isinstance(b, Const) and b.value == 0)
        ):
            return Const(0, e.dtype)
        if e.op in ("floordiv",) and isinstance(b, Const) and b.value == 1:
            return a
        if e.op == "mod" and isinstance(b, Const) and b.value == 1:
            return Const(0, e.dtype)
    return e


def unary(op: str, a: Expr) -> Expr:
    return Unary(op, a)


def select(cond: Expr, t: ExprLike, f: ExprLike) -> Expr:
    if isinstance(cond, Const):
        chosen = t if cond.value else f
        if isinstance(chosen, Expr):
            return chosen
    if not isinstance(t, Expr):
        t = as_expr(t, f.dtype)  # type: ignore[union-attr]
    if not isinstance(f, Expr):
        f = as_expr(f, t.dtype)
    return Select(cond, t, f)


def cast(dtype: str, a: Expr) -> Expr:
    return a if a.dtype == dtype else Cast(dtype, a)


def _cmp(op: str) -> Callable[[ExprLike, ExprLike], Expr]:
    def f(a: ExprLike, b: ExprLike) -> Expr:
        return binary(op, a, b)

    f.__name__ = op
    return f


lt, le, gt, ge, eq, ne = (_cmp(o) for o in Binary.COMPARE)
logical_and, logical_or, logical_xor = (_cmp(o) for o in Binary.LOGIC)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def power(a: ExprLike, b: ExprLike) -> Expr:
    return binary("pow", a, b)


def all_of(conds: Sequence[Expr]) -> Expr:
    out: Expr = Const(True, "bool")
    for c in conds:
        out = c if isinstance(out, Const) else logical_and(out, c)
    return out


def any_of(conds: Sequence[Expr]) -> Expr:
    out: Expr = Const(False, "bool")
    for c in conds:
        out = c if isinstance(out, Const) else logical_or(out, c)
    return out


def placeholder(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    return Tensor(shape, dtype, name)


def reduce_axis(extent: int, name: str = "r") -> IterVar:
    return IterVar(_fresh(name), extent, "reduce")


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Expr],
    name: str = "T",
    *,
    inline: bool = False,
    tag: str = "",
    dtype: str | None = None,
) -> Tensor:
    """A tensor whose element at `idx` is `fcompute(*idx)`."""
    axes = [IterVar(_fresh(f"i{d}_"), n, "spatial") for d, n in enumerate(shape)]
    body = fcompute(*[a.var for a in axes])
    if not isinstance(body, Expr):
        body = as_expr(body, dtype or "float32")
    if dtype is not None and body.dtype != dtype:
        body = cast(dtype, body) if not isinstance(body, Reduce) else body
    if isinstance(body, Reduce) and inline:
        raise TEError("a reduction cannot be inlined")
    t = Tensor(shape, body.dtype, _fresh(name + "_"), ComputeOp(axes, body, inline, tag))
    return t


def reduce(
    combiner: str, body: Expr, axes: Sequence[IterVar], init: ExprLike | None = None
) -> Reduce:
    if init is None:
        init = reduce_identity(combiner, body.dtype)
    return Reduce(combiner, body, axes, as_expr(init, body.dtype))


def reduce_identity(combiner: str, dtype: str) -> Const:
    if combiner == "sum":
        return Const(0, dtype)
    if combiner == "prod":
        return Const(1, dtype)
    if dtype in FLOAT_DTYPES:
        return Const(-math.inf if combiner in ("max", "max_nan") else math.inf, dtype)
    lo, hi = int_range(dtype)
    return Const(lo if combiner in ("max", "max_nan") else hi, dtype)


def reduce_sum(body: Expr, axes: Sequence[IterVar]) -> Reduce:
    return reduce("sum", body, axes)


def reduce_max(body: Expr, axes: Sequence[IterVar]) -> Reduce:
    return reduce("max", body, axes)


# traversal ---------------------------------------------------------------------------------

def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body, e.init)
    return ()


def add_terms(e: Expr) -> list[Expr]:
    """The terms of a chain of additions, left to right (`e` itself when it adds nothing)."""
    if isinstance(e, Binary) and e.op == "add":
        return add_terms(e.a) + add_terms(e.b)
    return [e]


def loads_in(e: Expr) -> list[Load]:
    """Every tensor load in `e`, outermost first."""
    out = [e] if isinstance(e, Load) else []
    for c in children(e):
        out += loads_in(c)
    return out


def tensors_read(e: Expr) -> list[Tensor]:
    """Tensors loaded anywhere in `e`, in first-use order, without duplicates."""
    seen: dict[int, Tensor] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load) and id(x.tensor) not in seen:
            seen[id(x.tensor)] = x.tensor
        stack.extend(reversed(children(x)))
    return list(seen.values())


def substitute(e: Expr, vmap: dict[Var, Expr]) -> Expr:
    """Replace index variables (by identity) in `e`."""
    if isinstance(e, Var):
        return vmap.get(e, e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Binary):
        return binary(e.op, substitute(e.a, vmap), substitute(e.b, vmap))
    if isinstance(e, Unary):
        return Unary(e.op, substitute(e.a, vmap))
    if isinstance(e, Select):
        return Select(substitute(e.cond, vmap), substitute(e.t, vmap), substitute(e.f, vmap))
    if isinstance(e, Cast):
        return Cast(e.dtype, substitute(e.a, vmap))
    if isinstance(e, Load):
        return Load(e.tensor, [substitute(i, vmap) for i in e.indices])
    if isinstance(e, Reduce):
        return Reduce(e.combiner, substitute(e.body, vmap), e.axes, substitute(e.init, vmap))
    return _substitute_other(e, vmap)


def _substitute_other(e: Expr, vmap: dict[Var, Expr]) -> Expr:
    sub = getattr(e, "substitute", None)
    if sub is None:
        raise TEError(f"cannot substitute into {type(e).__name__}")
    return sub(vmap)


def map_children(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """`e` rebuilt with `f` applied to each direct child (leaves are returned as they are)."""
    if isinstance(e, Binary):
        return binary(e.op, f(e.a), f(e.b))
    if isinstance(e, Unary):
        return Unary(e.op, f(e.a))
    if isinstance(e, Select):
        return select(f(e.cond), f(e.t), f(e.f))
    if isinstance(e, Cast):
        return cast(e.dtype, f(e.a))
    if isinstance(e, Load):
        return Load(e.tensor, [f(i) for i in e.indices])
    if isinstance(e, Reduce):
        return Reduce(e.combiner, f(e.body), e.axes, f(e.init))
    return e


def expand_inline(e: Expr) -> Expr:
    """`e` with every load of an inline compute replaced by that compute's body."""
    if isinstance(e, Load) and e.tensor.op is not None and e.tensor.op.inline:
        op = e.tensor.op
        idx = [expand_inline(i) for i in e.indices]
        return expand_inline(substitute(op.body, {ax.var: i for ax, i in
                                                  zip(op.axes, idx, strict=True)}))
    return map_children(e, expand_inline)


def conjuncts(e: Expr) -> list[Expr]:
    """The operands of a chain of `and`s (`e` itself when it is not one)."""
    if isinstance(e, Binary) and e.op == "and":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def mentions(e: Expr, v: Var) -> bool:
    """Whether variable `v` occurs in `e`."""
    return e is v or any(mentions(c, v) for c in children(e))
