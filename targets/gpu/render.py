"""Loop IR → GPU kernel source, one renderer for two dialects (OpenCL C and CUDA C).

Every stage of a kernel becomes one entry point (`NAME_sJ`), launched over a 1-D grid: its
nest's "block" loop is the block index, its "thread" loop the thread index within the block,
guarded where the last block is partial. The bodies are written once, in a C subset both
languages read; what differs between them (address-space qualifiers, the entry-point keyword,
thread indices, type names, bit casts) is a macro or typedef of the dialect's prelude
(targets/gpu/prelude.py), so the two renderings of a kernel differ in their prelude and nowhere else.

Arguments, per buffer in the kernel's ABI order: a byte pointer and a byte offset, so that the
host passes any buffer (a region of the arena, the weights, an input) the same way in either
API (an OpenCL `cl_mem` cannot be offset on the host). float16 and bfloat16 are held as 16-bit
words in memory and float32 in registers, bools as bytes, as on the CPU (lowering/te.py).

Semantics follow the CPU code generator (targets/cpu/codegen.py): floor division and modulo
of signed integers round toward negative infinity, "max" ignores a NaN operand, "max_nan"
propagates it, a float → integer cast truncates through int32 (int64 for int64 and uint32),
a select whose branches load evaluates only the taken branch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lowering import te
from lowering.affine import interval, normalize
from lowering.intrinsics import GPU_INT_DOTS, MMA_PREFIX, parse_mma_routine
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
    simplify_indices,
    walk,
)
from targets.gpu import narrow
from targets.gpu.prelude import prelude

# C type of a value in registers, per dtype: the 8- and 4-bit floats are floats there (as the
# halves), the 4- and 2-bit integers a byte, sign- or zero-extended from their bits (as on the
# CPU, te.NARROW_INT_DTYPES)
_REG = {"float32": "f32", "float64": "f64", "float16": "f32", "bfloat16": "f32",
        "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint64": "u64",
        "uint32": "u32", "uint16": "u16", "uint8": "u8", "bool": "bool",
        **dict.fromkeys(te.NARROW_FLOAT_DTYPES, "f32"), "int4": "i8", "int2": "i8",
        "uint4": "u8", "uint2": "u8"}
# C type of an element in memory
_MEM = {**_REG, "float16": "u16", "bfloat16": "u16", "bool": "u8",
        **dict.fromkeys(te.NARROW_FLOAT_DTYPES + te.NARROW_INT_DTYPES, "u8")}
_UNSIGNED = te.UNSIGNED_DTYPES
_SIGNED_INT = te.SIGNED_INT_DTYPES
_INT = _SIGNED_INT + _UNSIGNED
_REAL = te.FLOAT_DTYPES

_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_BITS = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
# float functions of one argument, by their C name (overloaded for f32 in both dialects)
_MATH1 = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
          "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
          "atan": "atan", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sinh": "sinh",
          "cosh": "cosh", "floor": "floor", "ceil": "ceil", "round": "rint", "abs": "fabs"}


class RenderError(Exception):
    """The kernel uses something the GPU renderer does not take (yet); the message says what."""


@dataclass(frozen=True)
class Launch:
    """One entry point of a rendered kernel and its grid: `blocks` blocks of `threads`."""

    function: str
    blocks: int
    threads: int


@dataclass
class RenderedKernel:
    name: str
    body: str  # the entry points (no prelude)
    launches: list[Launch]
    buffers: list[Buffer]
    uses_f64: bool = False
    helpers: tuple[str, ...] = ()  # functions of targets/gpu/narrow.py the body calls
    mma: tuple[str, ...] = ()  # matrix instructions the body calls (their prelude part)
    dots: tuple[str, ...] = ()  # integer dot products the body calls (prelude.dot_source)


@dataclass
class _Scope:
    cached: dict[int, str] = field(default_factory=dict)


class _StageWriter:
    """Writes one stage nest as C statements."""

    def __init__(self, buffers: list[Buffer], local: list[Buffer],
                 fragments: list[Buffer] = (), dims: int = 0) -> None:  # type: ignore[assignment]
        self.dims = dims  # the model's run-time dimensions: arguments d0, d1, ...
        self.bufs = {id(b): f"b{i}" for i, b in enumerate(buffers)}
        self.bufs.update({id(b): f"l{i}" for i, b in enumerate(local)})
        self.bufs.update({id(b): f"f{i}" for i, b in enumerate(fragments)})
        self.mma: set[str] = set()  # matrix instructions called
        self.dots: set[str] = set()  # integer dot products called
        self.lines: list[str] = []
        self.depth = 1
        self.names: dict[int, str] = {}
        self.scopes: list[_Scope] = [_Scope()]
        self.count = 0
        self.uses_f64 = False
        self.helpers: set[str] = set()
        self.ranges: dict[te.Var, tuple[int, int]] = {}  # loop variables' values, where known

    # output ---------------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def open(self, head: str) -> None:
        self.line(head + " {")
        self.depth += 1
        self.scopes.append(_Scope())

    def close(self) -> None:
        self.scopes.pop()
        self.depth -= 1
        self.line("}")

    def tmp(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def var(self, v: te.Var) -> str:
        if id(v) not in self.names:
            self.names[id(v)] = f"v{len(self.names)}"
        return self.names[id(v)]

    # statements -----------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            self.seq(s.stmts)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Store):
            self.store(s.buf, s.index, self.expr(s.value))
        elif isinstance(s, Prefetch):
            pass  # a cache hint of CPU schedules; GPUs have no use for it
        elif isinstance(s, Barrier):
            self.line("AOTC_BARRIER;")
        elif isinstance(s, Call):
            self.call(s)
        else:
            raise RenderError(f"unexpected statement {s!r}")

    def call(self, s: Call) -> None:
        """A matrix instruction's routine (`intrinsics.MmaInstruction`, defined per dialect
        in the prelude): a fragment argument by address, a local array's element by
        pointer, integers as values. Any other call is a CPU micro-kernel's."""
        found = parse_mma_routine(s.func)
        if found is None:
            raise RenderError(f"a call of {s.func} (a CPU micro-kernel)")
        self.mma.add(found[0].name)
        args = []
        for a in s.args:
            if isinstance(a, BufPtr):
                name = self.bufs[id(a.buf)]
                args.append(f"&{name}" if a.buf.role == "fragment"
                            else f"{name} + {self.expr(a.offset)}")
            else:
                args.append(self.expr(a))
        self.line(f"{s.func}({', '.join(args)});")

    def seq(self, stmts: list[Stmt]) -> None:
        i = 0
        while i < len(stmts):
            if i + 1 < len(stmts) and self.accumulate(stmts[i], stmts[i + 1]):
                i += 2
                continue
            self.stmt(stmts[i])
            i += 1

    def loop(self, s: For) -> None:
        if s.kind in ("block", "thread", "parallel"):
            raise RenderError(f"a {s.kind} loop inside a GPU stage nest")
        v = self.var(s.var)
        start, end = self.expr(s.start), self.expr(s.extent)
        self.note_range(s)
        if s.kind in ("unroll", "vectorize"):  # a vector tile outside a reduction: scalars
            self.line("#pragma unroll")
        self.open(f"for (i64 {v} = {start}; {v} < {end}; ++{v})")
        self.stmt(s.body)
        self.close()

    def note_range(self, s: For, count: int | None = None) -> None:
        """The values `s.var` takes, where its bounds say (index arithmetic on non-negative
        values then divides without the floor correction)."""
        lo = interval(s.start, self.ranges)
        hi = interval(s.extent, self.ranges) if count is None else (count, count)
        if lo is not None and hi is not None:
            self.ranges[s.var] = (lo[0], hi[1] - 1)

    def accumulate(self, init: Stmt, update: Stmt) -> bool:
        """A reduction as lowered (its outputs set to the initial value, then a nest of reduce
        loops combining into them) kept in registers: a scalar for one output, an array for
        a register tile (the init nest's loops, found again innermost in the update nest),
        written to memory once after the reduction instead of read and written each step."""
        tile: list[For] = []
        first: Stmt = init
        while isinstance(first, For):
            tile.append(first)
            first = first.body
        if not isinstance(first, Store) or not isinstance(update, For):
            return False
        inner: Stmt = update
        loops: list[For] = []
        # statements a reduce loop's body starts with (staged copies and their barriers)
        heads: dict[int, list[Stmt]] = {}
        while True:
            if isinstance(inner, For):
                loops.append(inner)
                inner = inner.body
            elif (isinstance(inner, Seq) and loops and len(loops) - 1 not in heads
                  and len(inner.stmts) > 1 and isinstance(inner.stmts[-1], For)):
                heads[len(loops) - 1] = inner.stmts[:-1]
                inner = inner.stmts[-1]
            else:
                break
        n_reduce = len(loops) - len(tile)
        if n_reduce < 1 or [lp.var for lp in loops[n_reduce:]] != [lp.var for lp in tile]:
            return False
        if any(pos >= n_reduce or _stores_to(h, first.buf) for pos, hs in heads.items()
               for h in hs):
            return False
        if not isinstance(inner, Store) or inner.buf is not first.buf:
            return False
        if repr(inner.index) != repr(first.index) or any(
                te.mentions(first.index, lp.var) for lp in loops[:n_reduce]):
            return False
        own = [ld for ld in _loads(inner.value) if ld.buf is first.buf]
        if len(own) != 1 or repr(own[0].index) != repr(first.index):
            return False  # reads its output elsewhere too: keep the memory form
        if any(lp.kind not in ("serial", "unroll", "vectorize") for lp in loops):
            raise RenderError("a bound loop inside a GPU stage nest")
        try:
            sizes = [_max_extent(lp.extent) for lp in tile]
        except RenderError:
            return False
        if any(not (isinstance(lp.start, te.Const) and lp.start.value == 0) for lp in tile):
            return False
        red = _Reduction(first, inner, own[0], tile, sizes, loops[:n_reduce], heads)
        last = tile[-1] if tile else None
        if last is None or last.kind != "vectorize" or not self.vectorizable(red):
            self.accumulate_scalar(red)
        elif isinstance(last.extent, te.Const) and last.extent.value == sizes[-1]:
            self.accumulate_vector(red)
        else:  # a partial tile at the edge takes the scalar form
            self.open(f"if ({self.expr(last.extent)} == {sizes[-1]})")
            self.accumulate_vector(red)
            self.close()
            self.open("else")
            self.accumulate_scalar(red)
            self.close()
        return True

    def reduce_loops(self, red: _Reduction) -> None:
        """Open the reduction's loops, each starting with its heads (staged copies)."""
        for pos, lp in enumerate(red.loops):
            self.note_range(lp)
            v = self.var(lp.var)
            start, end = self.expr(lp.start), self.expr(lp.extent)
            if lp.kind == "unroll":
                self.line("#pragma unroll")
            self.open(f"for (i64 {v} = {start}; {v} < {end}; ++{v})")
            for h in red.heads.get(pos, []):
                self.stmt(h)

    def accumulate_scalar(self, red: _Reduction) -> None:
        first, tile, sizes = red.first, red.tile, red.sizes
        acc = self.tmp()
        reg = _REG[first.buf.dtype]
        if not tile:
            self.line(f"{reg} {acc} = {self.expr(first.value)};")
            element = acc
        else:
            self.line(f"{reg} {acc}[{math.prod(sizes)}];")
            strides = [math.prod(sizes[i + 1:]) for i in range(len(sizes))]
            element = f"{acc}[" + " + ".join(f"{self.var(lp.var)} * {st}" for lp, st in
                                              zip(tile, strides, strict=True)) + "]"
        depth = self.depth
        if tile:  # every element of the array, past a partial tile's edge too (never stored),
            # unless the initial value loads (a bias): then only those inside the tensor
            self.tile_loops(tile, sizes, guard=bool(_loads(first.value)))
            self.line(f"{element} = {self.expr(first.value)};")
            while self.depth > depth:
                self.close()
        self.reduce_loops(red)
        self.tile_loops(tile, sizes, guard=True)
        value = _replace_load(red.update.value, red.own, _Register(element, first.buf.dtype))
        self.line(f"{element} = {self.expr(value)};")
        while self.depth > depth:
            self.close()
        self.tile_loops(tile, sizes, guard=True)
        self.store(first.buf, first.index, element)
        while self.depth > depth:
            self.close()

    # float4 register tiles ------------------------------------------------------------------
    def vectorizable(self, red: _Reduction) -> bool:
        """Whether a register tile whose innermost loop is marked "vectorize" takes the
        float4 form: float32 throughout, a multiple of 4 columns, the output and every load
        that moves with the columns contiguous in them, only +, -, * on the vectors."""
        j = red.tile[-1].var
        return (red.first.buf.dtype == "float32" and red.sizes[-1] % _LANES == 0
                and _contiguous(red.first.index, j)
                and _vector_ok(red.first.value, j, None)
                and _vector_ok(red.update.value, j, red.own))

    def accumulate_vector(self, red: _Reduction) -> None:
        """The register tile as float4 accumulators: per group of 4 columns, one vector
        load (vload4) of each operand that moves with the columns, the others broadcast, one
        vector store after the reduction."""
        first, tile, sizes = red.first, red.tile, red.sizes
        acc = self.tmp()
        groups = [*sizes[:-1], sizes[-1] // _LANES]
        self.line(f"f32x4 {acc}[{math.prod(groups)}];")
        strides = [math.prod(groups[i + 1:]) for i in range(len(groups))]
        terms = [f"{self.var(lp.var)} * {st}" for lp, st in zip(tile[:-1], strides[:-1],
                                                                 strict=True)]
        element = f"{acc}[" + " + ".join([*terms, f"{self.var(tile[-1].var)} / {_LANES}"]) + "]"
        reg = _Register(element, "float32")
        depth = self.depth
        self.vector_tile_loops(red, guard=bool(_loads(first.value)))
        text, vector = self.vexpr(first.value, tile[-1].var, None, reg)
        self.line(f"{element} = {text if vector else f'AOTC_F32X4({text})'};")
        while self.depth > depth:
            self.close()
        self.reduce_loops(red)
        self.vector_tile_loops(red, guard=True)
        self.line(f"{element} = {self.vexpr(red.update.value, tile[-1].var, red.own, reg)[0]};")
        while self.depth > depth:
            self.close()
        self.vector_tile_loops(red, guard=True)
        self.line(f"aotc_vstore4({element}, {self.bufs[id(first.buf)]} + "
                  f"{self.expr(first.index)});")
        while self.depth > depth:
            self.close()

    def vector_tile_loops(self, red: _Reduction, guard: bool) -> None:
        """The tile's loops, the innermost stepping by 4 (its variable the group's first
        column)."""
        self.tile_loops(red.tile[:-1], red.sizes[:-1], guard)
        lp, n = red.tile[-1], red.sizes[-1]
        v = self.var(lp.var)
        self.ranges[lp.var] = (0, n - 1)
        self.line("#pragma unroll")
        self.open(f"for (i64 {v} = 0; {v} < {n}; {v} += {_LANES})")

    def vexpr(self, e: te.Expr, j: te.Var, own: BufLoad | None,
              reg: _Register) -> tuple[str, bool]:
        """`e` (accepted by `_vector_ok`) as C text, and whether it is a float4: the
        accumulator in place of `own`, a vload4 for a load that moves with `j`."""
        if own is not None and e is own:
            return reg.name, True
        if not _moves(e, j, own):
            return self.expr(e), False
        if isinstance(e, BufLoad):
            r = self.tmp()
            self.line(f"const f32x4 {r} = aotc_vload4({self.bufs[id(e.buf)]} + "
                      f"{self.expr(e.index)});")
            return r, True
        assert isinstance(e, te.Binary)
        a, va = self.vexpr(e.a, j, own, reg)
        b, vb = self.vexpr(e.b, j, own, reg)
        a, b = (a if va else f"AOTC_F32X4({a})"), (b if vb else f"AOTC_F32X4({b})")
        r = self.tmp()
        self.line(f"const f32x4 {r} = {a} {_ARITH[e.op]} {b};")
        return r, True

    def tile_loops(self, tile: list[For], sizes: list[int], guard: bool) -> None:
        """Open a register tile's loops at their full (constant) sizes, so that they unroll
        and the array stays in registers; `guard`: skip the elements past a partial tile's
        edge."""
        for lp, n in zip(tile, sizes, strict=True):
            v = self.var(lp.var)
            self.ranges[lp.var] = (0, n - 1)
            self.line("#pragma unroll")
            self.open(f"for (i64 {v} = 0; {v} < {n}; ++{v})")
            if guard and not (isinstance(lp.extent, te.Const) and lp.extent.value == n):
                self.open(f"if ({v} < {self.expr(lp.extent)})")

    def store(self, buf: Buffer, index: te.Expr, value: str) -> None:
        dst = f"{self.bufs[id(buf)]}[{self.expr(index)}]"
        if buf.dtype == "float16":
            value = f"aotc_f32_to_f16({value})"
        elif buf.dtype == "bfloat16":
            value = f"aotc_f32_to_bf16({value})"
        elif buf.dtype == "bool":
            value = f"(u8)({value})"
        elif buf.dtype in te.NARROW_FLOAT_DTYPES:
            value = f"{self.helper('store', buf.dtype)}({value})"
        elif buf.dtype in te.NARROW_INT_DTYPES:  # the value bits alone, as ml_dtypes keeps them
            value = f"(u8)((u8)({value}) & {(1 << te.INT_BITS[buf.dtype]) - 1}u)"
        self.line(f"{dst} = {value};")

    def helper(self, op: str, dtype: str) -> str:
        """The name of narrow.py's `op` function for an 8- or 4-bit float, noted as used."""
        name = narrow.helper_name(op, dtype)
        self.helpers.add(name)
        return name

    # expressions ----------------------------------------------------------------------------
    def expr(self, e: te.Expr) -> str:
        """A C expression of `e`: a name or a literal. Composite values are computed into
        temporaries of the current scope (each once per scope)."""
        if isinstance(e, _Register):
            return e.name
        if isinstance(e, te.Var):
            if isinstance(e, te.DimVar):  # a run-time dimension: the entry point's argument
                if e.index >= self.dims:
                    raise RenderError(f"run-time dimension {e.index} of a model with "
                                      f"{self.dims}")
                return f"d{e.index}"
            return self.var(e)
        if isinstance(e, te.Const):
            return _literal(e)
        for sc in reversed(self.scopes):
            if id(e) in sc.cached:
                return sc.cached[id(e)]
        if e.dtype == "float64":
            self.uses_f64 = True
        if e.dtype not in _REG:
            raise RenderError(f"the {e.dtype} element type")
        if isinstance(e, te.Select) and not (_speculatable(e.t) and _speculatable(e.f)):
            return self.branch(e)
        text = self.compose(e)
        r = self.tmp()
        self.line(f"const {_REG[e.dtype]} {r} = {text};")
        self.scopes[-1].cached[id(e)] = r
        return r

    def branch(self, e: te.Select) -> str:
        """A select whose branches load: only the taken one runs (the other may index out of
        bounds: padding, masks)."""
        r = self.tmp()
        cond = self.expr(e.cond)
        self.line(f"{_REG[e.dtype]} {r};")
        self.open(f"if ({cond})")
        self.line(f"{r} = {self.expr(e.t)};")
        self.close()
        self.open("else")
        self.line(f"{r} = {self.expr(e.f)};")
        self.close()
        self.scopes[-1].cached[id(e)] = r
        return r

    def compose(self, e: te.Expr) -> str:
        if isinstance(e, BufLoad):
            ref = f"{self.bufs[id(e.buf)]}[{self.expr(e.index)}]"
            if e.buf.dtype == "float16":
                return f"aotc_f16_to_f32({ref})"
            if e.buf.dtype == "bfloat16":
                return f"aotc_bf16_to_f32({ref})"
            if e.buf.dtype == "bool":
                return f"({ref} != 0)"
            if e.buf.dtype in te.NARROW_FLOAT_DTYPES:
                return f"{self.helper('decode', e.buf.dtype)}({ref})"
            if e.buf.dtype in te.NARROW_INT_DTYPES:
                return _wrapped(ref, e.buf.dtype)
            return ref
        if isinstance(e, te.Binary):
            return self.binary(e)
        if isinstance(e, te.Unary):
            return self.unary(e)
        if isinstance(e, te.Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, te.Cast):
            return self.cast(e)
        raise RenderError(f"not a loop-IR expression: {e!r}")

    def binary(self, e: te.Binary) -> str:
        dt = e.a.dtype
        a, b = self.expr(e.a), self.expr(e.b)
        t = _REG[e.dtype]
        real = dt in _REAL
        if e.op in _COMPARE:
            return f"({a} {_COMPARE[e.op]} {b})"
        if e.op in te.Binary.DOT:  # an integer dot product (prelude.dot_source)
            self.dots.add(e.op)
            return f"{GPU_INT_DOTS[e.op].routine}({a}, {b})"
        if dt == "bool" and e.op in ("and", "or", "xor"):
            return {"and": f"({a} && {b})", "or": f"({a} || {b})", "xor": f"({a} != {b})"}[e.op]
        if e.op in _ARITH:
            return f"({t})({a} {_ARITH[e.op]} {b})"
        if e.op in _BITS and not real:
            return f"({t})({a} {_BITS[e.op]} {b})"
        if e.op in ("min", "max"):
            if real:
                return f"f{e.op}({a}, {b})"
            return f"({a} {'<' if e.op == 'min' else '>'} {b} ? {a} : {b})"
        if e.op == "max_nan":
            if real:
                return f"(({a} > {b} || isnan({a})) ? {a} : {b})"
            return f"({a} > {b} ? {a} : {b})"
        if e.op == "pow" and real:
            return f"pow({a}, {b})"
        if e.op == "fmod" and real:
            return f"fmod({a}, {b})"
        if e.op in ("floordiv", "mod") and not real:
            dividend, divisor = interval(e.a, self.ranges), interval(e.b, self.ranges)
            if dt in _UNSIGNED or (dividend is not None and dividend[0] >= 0
                                   and divisor is not None and divisor[0] > 0):
                return f"({t})({a} {'/' if e.op == 'floordiv' else '%'} {b})"
            return f"aotc_{e.op}_{t}({a}, {b})"
        raise RenderError(f"{e.op} of {dt}")

    def unary(self, e: te.Unary) -> str:
        dt = e.dtype
        a = self.expr(e.a)
        t = _REG[dt]
        if e.op == "not":
            return f"(!{a})"
        if e.op == "neg":
            return f"({t})(-{a})"
        if dt not in _REAL:
            if e.op == "abs":
                return a if dt in _UNSIGNED else f"({a} < 0 ? ({t})(-{a}) : {a})"
            if e.op in ("floor", "ceil", "round"):
                return a
            raise RenderError(f"{e.op} of {dt}")
        one = _literal(te.Const(1.0, "float64" if dt == "float64" else "float32"))
        zero = _literal(te.Const(0.0, "float64" if dt == "float64" else "float32"))
        if e.op == "sigmoid":
            return f"({one} / ({one} + exp(-{a})))"
        if e.op == "softplus":
            return f"(fmax({a}, {zero}) + log1p(exp(-fabs({a}))))"
        if e.op in _MATH1:
            return f"{_MATH1[e.op]}({a})"
        raise RenderError(f"{e.op} of {dt}")

    def cast(self, e: te.Cast) -> str:
        src, dst = e.a.dtype, e.dtype
        a = self.expr(e.a)
        if src == dst:
            return a
        if src not in _REG or dst not in _REG:
            raise RenderError(f"a cast from {src} to {dst}")
        if dst == "bool":
            return f"({a} != 0)"
        if dst in _REAL:
            if dst == "float16":
                return f"aotc_f16_to_f32(aotc_f32_to_f16((f32){a}))"
            if dst == "bfloat16":
                return f"aotc_bf16_to_f32(aotc_f32_to_bf16((f32){a}))"
            if dst in te.NARROW_FLOAT_DTYPES:
                return (f"{self.helper('decode', dst)}({self.helper('cast', dst)}"
                        f"((f32){a}))")
            return f"({_REG[dst]}){a}"
        if dst in te.NARROW_INT_DTYPES:
            # from a float, onnxruntime rounds half away from zero (C's round) and keeps the
            # low bits; from an integer, the low bits
            if src in _REAL:
                a = f"({'i64' if src == 'float64' else 'i32'})round({a})"
            return _wrapped(a, dst)
        if src in _REAL:
            if dst == "uint64":
                return f"(u64){a}"
            wide = "i64" if dst in ("int64", "uint32") else "i32"
            return f"({_REG[dst]})({wide}){a}"
        return f"({_REG[dst]}){a}"


def _wrapped(value: str, dtype: str) -> str:
    """An integer value reduced to a 4- or 2-bit integer `dtype`: its low bits, sign-extended
    (int4, int2) or zero-extended (uint4, uint2) into the register's byte."""
    bits = te.INT_BITS[dtype]
    if dtype in _UNSIGNED:
        return f"(u8)((u8)({value}) & {(1 << bits) - 1}u)"
    return f"(i8)((i8)(u8)((u8)({value}) << {8 - bits}) >> {8 - bits})"


class _Register(te.Expr):
    """An accumulator held in a C variable (`accumulate`)."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str) -> None:
        self.name, self.dtype = name, dtype


def _replace_load(e: te.Expr, old: BufLoad, new: te.Expr,
                  memo: dict[int, te.Expr] | None = None) -> te.Expr:
    """`e` with the load `old` replaced by `new`; shared subexpressions stay shared."""
    memo = {} if memo is None else memo
    if e is old:
        return new
    if isinstance(e, BufLoad):
        return e
    if id(e) not in memo:
        memo[id(e)] = te.map_children(e, lambda c: _replace_load(c, old, new, memo))
    return memo[id(e)]


_LANES = 4  # floats in a float4


@dataclass
class _Reduction:
    """A register-tiled reduction as `_StageWriter.accumulate` found it."""

    first: Store  # the initial value's store
    update: Store  # the combining store, innermost
    own: BufLoad  # its load of the element it updates
    tile: list[For]
    sizes: list[int]  # the tile loops' full sizes
    loops: list[For]  # the reduce loops, outermost first
    heads: dict[int, list[Stmt]]  # statements the reduce loop at a position starts with


def _moves(e: te.Expr, j: te.Var, own: BufLoad | None) -> bool:
    """Whether `e` changes with column `j` of a vector tile (or is the accumulator)."""
    if own is not None and e is own:
        return True
    if isinstance(e, BufLoad):
        return te.mentions(e.index, j)
    return te.mentions(e, j) or any(_moves(c, j, own) for c in te.children(e))


def _contiguous(index: te.Expr, j: te.Var) -> bool:
    form = normalize(index)
    return form is not None and form.depends_only_linearly(j) and form.coefficient(j) == 1


def _vector_ok(e: te.Expr, j: te.Var, own: BufLoad | None) -> bool:
    """Whether `e` has a float4 form over column `j`: what moves with `j` is the
    accumulator, a contiguous float32 load, or +, -, * of such."""
    if not _moves(e, j, own) or (own is not None and e is own):
        return True
    if isinstance(e, BufLoad):
        return e.buf.dtype == "float32" and _contiguous(e.index, j)
    if isinstance(e, te.Binary) and e.op in ("add", "sub", "mul") and e.dtype == "float32":
        return _vector_ok(e.a, j, own) and _vector_ok(e.b, j, own)
    return False


def _stores_to(s: Stmt, buf: Buffer) -> bool:
    return any(isinstance(x, Store) and x.buf is buf for x in walk(s))


def _local_buffers(s: Stmt, role: str = "local") -> list[Buffer]:
    """The local (block-shared) buffers a stage nest stores to or passes to a routine, in
    order of first use; with `role` "fragment", the instruction accumulators."""
    found: dict[int, Buffer] = {}
    for x in walk(s):
        if isinstance(x, Store) and x.buf.role == role:
            found.setdefault(id(x.buf), x.buf)
        elif isinstance(x, Call):
            for a in x.args:
                if isinstance(a, BufPtr) and a.buf.role == role:
                    found.setdefault(id(a.buf), a.buf)
    return list(found.values())


def _call_buffers(s: Stmt) -> set[int]:
    """Ids of the buffers a nest passes to routines (aligned for their vector loads)."""
    return {id(a.buf) for x in walk(s) if isinstance(x, Call) for a in x.args
            if isinstance(a, BufPtr)}


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(x, Barrier) for x in walk(s))


def _loads(e: te.Expr) -> list[BufLoad]:
    out: list[BufLoad] = []

    def visit(x: te.Expr) -> None:
        if isinstance(x, BufLoad):
            out.append(x)
            visit(x.index)
        for c in te.children(x):
            visit(c)

    visit(e)
    return out


def _speculatable(e: te.Expr) -> bool:
    """Whether `e` may be evaluated when its select does not choose it: no load (its index
    could be out of bounds there) and no integer division (which could divide by zero)."""
    if isinstance(e, BufLoad):
        return False
    if isinstance(e, te.Binary) and e.op in ("div", "floordiv", "mod") and e.dtype in _INT:
        return False
    return all(_speculatable(c) for c in te.children(e))


def _literal(c: te.Const) -> str:
    t = _REG.get(c.dtype)
    if t is None:
        raise RenderError(f"the {c.dtype} element type")
    if c.dtype == "bool":
        return "true" if c.value else "false"
    if c.dtype in _REAL:
        v = float(c.value)
        if c.dtype == "float64":
            if math.isfinite(v):
                return f"{v.hex()}"
            bits = {math.inf: 0x7FF0000000000000, -math.inf: 0xFFF0000000000000}.get(
                v, 0x7FF8000000000000)
            return f"AOTC_F64_FROM_BITS(0x{bits:x}UL)"
        if math.isfinite(v):
            return f"{v.hex()}f"
        bits = {math.inf: 0x7F800000, -math.inf: 0xFF800000}.get(v, 0x7FC00000)
        return f"AOTC_F32_FROM_BITS(0x{bits:x}u)"
    v = int(c.value)
    if -(1 << 31) <= v < (1 << 31):
        return f"(({t}){v})"
    return f"(({t})0x{v & ((1 << 64) - 1):x}UL)"


def render_kernel(k: Kernel, dims: int = 0) -> RenderedKernel:
    """The kernel's entry points, one per stage nest, in the common subset. `dims`: the
    model's run-time dimensions; every entry point of such a model takes their values as
    trailing `i64 d0, d1, ...` arguments (whether it reads them or not, so the host passes
    the same arguments to every launch), and a static model's kernels are unchanged."""
    out: list[str] = []
    launches: list[Launch] = []
    uses_f64 = False
    helpers: set[str] = set()
    mma: set[str] = set()
    dots: set[str] = set()
    params = ", ".join([*(f"AOTC_GLOBAL u8* p{i}, i64 o{i}" for i in range(len(k.buffers))),
                        *(f"i64 d{i}" for i in range(dims))])
    for j, stage in enumerate(k.stages):
        stage = simplify_indices(stage)
        local = _local_buffers(stage)
        fragments = _local_buffers(stage, "fragment")
        passed = _call_buffers(stage)
        w = _StageWriter(k.buffers, local, fragments, dims)
        for i, b in enumerate(k.buffers):
            if b.dtype not in _MEM:
                raise RenderError(f"the {b.dtype} element type (buffer {b.name})")
            w.line(f"AOTC_GLOBAL {_MEM[b.dtype]}* b{i} = (AOTC_GLOBAL {_MEM[b.dtype]}*)"
                   f"(p{i} + o{i});  /* {b.role} {b.name} */")
        for i, b in enumerate(local):
            if b.dtype not in _MEM:
                raise RenderError(f"the {b.dtype} element type (buffer {b.name})")
            # a matrix instruction's operands: 32-byte aligned, as WMMA's loads need
            align = " __attribute__((aligned(32)))" if id(b) in passed else ""
            w.line(f"AOTC_LOCAL {_MEM[b.dtype]} l{i}[{b.size}]{align};  /* staged {b.name} */")
        for i, b in enumerate(fragments):
            calls = [parse_mma_routine(x.func) for x in walk(stage) if isinstance(x, Call)
                     and any(isinstance(a, BufPtr) and a.buf is b for a in x.args)]
            names = {c[0].name for c in calls if c is not None}
            if len(names) != 1:
                raise RenderError(f"fragment {b.name} is not one matrix instruction's")
            w.line(f"{MMA_PREFIX}{names.pop()}_acc f{i};  /* accumulator {b.name} */")
        blocks, threads = _grid(stage)
        if blocks == 0:  # an empty tensor: nothing to launch (CUDA and OpenCL 1.2 refuse
            continue  # an empty grid)
        if blocks is None:
            # no spatial loop to spread: the whole nest on one thread
            w.open("if (AOTC_BLOCK_ID == 0 && AOTC_THREAD_ID == 0)")
            w.stmt(stage)
            w.close()
            blocks, threads = 1, 1
        else:
            assert isinstance(stage, For) and isinstance(stage.body, For)
            inner = stage.body
            w.note_range(stage)
            w.note_range(inner, threads)
            bv, tv = w.var(stage.var), w.var(inner.var)
            w.line(f"const i64 {bv} = AOTC_BLOCK_ID;")
            w.line(f"const i64 {tv} = AOTC_THREAD_ID;")
            if not (isinstance(inner.extent, te.Const) and inner.extent.value == threads):
                if _has_barrier(inner.body):
                    raise RenderError("a barrier under a partial thread loop (every thread "
                                      "of a block must reach it)")
                w.open(f"if ({tv} < {w.expr(inner.extent)})")
                w.stmt(inner.body)
                w.close()
            else:
                w.stmt(inner.body)
        fn = f"{k.name}_s{j}"
        out.append(f"AOTC_KERNEL {fn}({params}) {{\n" + "\n".join(w.lines) + "\n}\n")
        launches.append(Launch(fn, blocks, threads))
        uses_f64 = uses_f64 or w.uses_f64 or any(b.dtype == "float64" for b in k.buffers)
        helpers |= w.helpers
        mma |= w.mma
        dots |= w.dots
    return RenderedKernel(k.name, "\n".join(out), launches, list(k.buffers), uses_f64,
                          tuple(sorted(helpers)), tuple(sorted(mma)), tuple(sorted(dots)))


def _grid(stage: Stmt) -> tuple[int | None, int]:
    """(blocks, threads) of a nest that starts with a block loop and a thread loop, else
    (None, 1). The block loop's extent is the grid; the thread loop's, at most, the block."""
    if not (isinstance(stage, For) and stage.kind == "block"):
        if _has_bound_loop(stage):
            raise RenderError("a block or thread loop that is not the start of its nest")
        return None, 1
    inner = stage.body
    if not (isinstance(inner, For) and inner.kind == "thread"):
        raise RenderError("a block loop not directly followed by a thread loop")
    for lp in (stage, inner):
        if not (isinstance(lp.start, te.Const) and lp.start.value == 0):
            raise RenderError("a bound loop that does not start at 0")
    if not isinstance(stage.extent, te.Const):
        raise RenderError("a grid whose size is not a constant")
    threads = _max_extent(inner.extent)
    if _has_bound_loop(inner.body):
        raise RenderError("a block or thread loop inside another")
    return int(stage.extent.value), threads


def _max_extent(e: te.Expr) -> int:
    """The largest value of a thread loop's extent: a constant, or min(constant, ...) for
    the partial last block."""
    if isinstance(e, te.Const):
        return int(e.value)
    if isinstance(e, te.Binary) and e.op == "min":
        for side in (e.a, e.b):
            if isinstance(side, te.Const):
                return int(side.value)
    raise RenderError(f"a thread loop of extent {e!r}")


def _has_bound_loop(s: Stmt) -> bool:
    if isinstance(s, For):
        return s.kind in ("block", "thread") or _has_bound_loop(s.body)
    if isinstance(s, Seq):
        return any(_has_bound_loop(x) for x in s.stmts)
    return False


def render_module(kernels: list[RenderedKernel], dialect: str) -> str:
    """One source file: the dialect's prelude, the narrow-float functions the kernels call
    (common text), then every kernel's entry points."""
    uses_f64 = any(k.uses_f64 for k in kernels)
    helpers = sorted({h for k in kernels for h in k.helpers})
    mma = tuple(sorted({i for k in kernels for i in k.mma}))
    dots = tuple(sorted({i for k in kernels for i in k.dots}))
    return (prelude(dialect, uses_f64, mma, dots) + "".join(narrow.helper_source(h) for h in helpers)
            + "\n" + "\n".join(k.body for k in kernels))
