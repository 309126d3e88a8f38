"""Loop IR → LLVM IR text → object file, for any CpuTarget.

Every kernel follows the ABI of ARCHITECTURE.md: `i32 NAME(ptr ctx, ptr bufs, ptr dims)`.
A stage whose outermost loop is parallel is outlined to `body(env, lo, hi)` and handed to the
runtime's `aotc_parallel_for`. Accesses carry scoped no-alias metadata (one scope per buffer:
the compiler never passes overlapping buffers where one is written), which is what lets LLVM's
loop vectorizer work without run-time alias checks.
"""

from __future__ import annotations

import llvmlite.binding as llvm

from lowering import te
from lowering.affine import interval, simplify_index
from lowering.default_schedule import SHORT_ROW_VECTORS
from lowering.loop_ir import (
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
    kernel_dims,
)
from lowering.partition import partition_kernel
from targets.cpu import microkernels, narrow_ir
from targets.cpu.target import CpuTarget, target_machine

try:  # vector-friendly math written in IR; libm calls are the fallback
    from targets.cpu import vecmath
except ImportError:  # pragma: no cover - only while vecmath is being written
    vecmath = None  # type: ignore[assignment]

# A value's LLVM type in registers (LLTYPE) and in memory (MEMTYPE): a bool is an i1 held in a
# byte; integers are LLVM's sign-less iN, their signedness chosen per instruction (UNSIGNED);
# float16 and bfloat16 values are floats in registers (te.HALF_DTYPES), converted by loads and
# rounded by stores: a half is LLVM's `half` (fpext/fptrunc: F16C's vcvtph2ps/vcvtps2ph, NEON's
# fcvt), a bfloat16 the top 16 bits of a float32 (integer shifts and a rounding add). The 8-
# and 4-bit floats are floats in registers too, a byte in memory (narrow_ir.py converts); the
# 4- and 2-bit integers an i8 in registers and memory (loads extend their low bits).
LLTYPE = {
    "float32": "float", "float64": "double", "float16": "float", "bfloat16": "float",
    "bool": "i1", **{t: f"i{8 * te.ITEMSIZE[t]}" for t in te.INT_DTYPES},
    **dict.fromkeys(te.NARROW_FLOAT_DTYPES, "float"),
}
MEMTYPE = {**LLTYPE, "bool": "i8", "float16": "half", "bfloat16": "i16",
           **dict.fromkeys(te.NARROW_FLOAT_DTYPES, "i8")}
STORED_AS_FLOAT = (*te.HALF_DTYPES, *te.NARROW_FLOAT_DTYPES)  # floats in registers, not memory
SIZE = te.ITEMSIZE
UNSIGNED = (*te.UNSIGNED_DTYPES, "bool")  # zero-extended, compared and divided unsigned
_FBIN = {"add": "fadd contract", "sub": "fsub contract", "mul": "fmul contract",
         "div": "fdiv contract"}
_IBIN = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor"}
_FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_ICMP = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
_UCMP = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}
# te's float min/max as LLVM intrinsics and fast-math flags (te.Binary). minimumnum/maximumnum
# ignore a NaN operand and order -0 below +0; `max_nan` is maximum (a NaN operand gives NaN)
# with `nsz` (a zero result of either sign). All are exactly associative (up to that sign), so
# a scheduled reduction may combine them in any order. LLVM reduces `maximum` by halves and
# checks `nsz` maxima with one vmaxps and one NaN test; it still reduces `maximumnum` one lane
# after another, with a sign blend per step.
_FMINMAX = {"min": ("minimumnum", ""), "max": ("maximumnum", ""), "max_nan": ("maximum", "nsz ")}
_LIBM = {"exp": "expf", "log": "logf", "tanh": "tanhf", "erf": "erff", "pow": "powf",
         "sin": "sinf", "cos": "cosf"}
_FLOAT_INTRINSIC = {"sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil",
                    "round": "roundeven", "sin": "sin", "cos": "cos", "tan": "tan"}


def _fconst(value: float, dtype: str) -> str:
    import struct

    if LLTYPE[dtype] == "float":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return f"0x{bits:016X}"


class ModuleBuilder:
    """Collects kernels into one LLVM module (one object file per model)."""

    def __init__(self, target: CpuTarget) -> None:
        self.target = target
        self.functions: list[str] = []
        self.metadata: list[str] = []
        self.declares: set[str] = set()
        self.math: set[str] = set()
        self.routines: dict[str, str] = {}  # micro-kernels called by tensorized loops
        # LLVM's x86 cost model prefers 256-bit vectors even where 512-bit ones exist; the
        # schedules plan for the target's full width, so ask for it
        self.fn_attrs = (f' "prefer-vector-width"="{target.vector_bits}"'
                         if target.is_x86 and target.vector_bits > 256 else "")

    def require_routine(self, name: str) -> None:
        if name not in self.routines:
            body, decls = microkernels.routine_ir(name, self.target)
            self.routines[name] = body
            self.declares.update(decls)

    def md(self, body: str, distinct: bool = False, self_ref: bool = False) -> str:
        n = len(self.metadata)
        ref = f"!{n}"
        if self_ref:
            body = body.replace("$SELF", ref)
        self.metadata.append(f"{ref} = {'distinct ' if distinct else ''}!{{{body}}}")
        return ref

    def add_kernel(self, kernel: Kernel) -> None:
        _KernelEmitter(self, partition_kernel(kernel)).emit()

    def text(self) -> str:
        tm = target_machine(self.target)
        parts = [
            f'; aotc kernels for {self.target.name} ({self.target.cpu})',
            f'target datalayout = "{tm.target_data}"',
            f'target triple = "{self.target.triple}"',
            "",
            "declare void @aotc_parallel_for(ptr, ptr, ptr, i64)",
            *sorted(self.declares),
            "",
        ]
        if self.math and vecmath is not None:
            parts.append(vecmath.math_ir(sorted(self.math), self.target.scales_by_instruction))
        parts += self.routines.values()
        parts += self.functions
        parts += self.metadata
        return "\n".join(parts) + "\n"


class _KernelEmitter:
    def __init__(self, mod: ModuleBuilder, kernel: Kernel) -> None:
        self.mod = mod
        self.kernel = kernel
        domain = mod.md(f'$SELF, !"{kernel.name}"', distinct=True, self_ref=True)
        scopes = [
            mod.md(f'$SELF, {domain}, !"{kernel.name}.{b.name}"', distinct=True, self_ref=True)
            for b in kernel.buffers
        ]
        self.scope_md: dict[int, tuple[str, str]] = {}
        for i, b in enumerate(kernel.buffers):
            own = mod.md(scopes[i])
            others = ", ".join(s for j, s in enumerate(scopes) if j != i)
            self.scope_md[id(b)] = (own, mod.md(others) if others else "")
        self.dims = kernel_dims(kernel)  # the run-time dimensions it reads

    def emit(self) -> None:
        k = self.kernel
        f = _FunctionEmitter(self, f"define i32 @{k.name}(ptr %ctx, ptr %bufs, ptr %dims) nounwind{self.mod.fn_attrs}",
                             "%bufs")
        env = "%bufs"
        if self.dims and any(isinstance(st, For) and st.kind == "parallel" for st in k.stages):
            # outlined bodies read the run-time dims too: their env is {bufs, dims}
            env = "%env"
            f.line("%env = alloca [2 x ptr], align 8")
            f.line("store ptr %bufs, ptr %env, align 8")
            f.line("%env.dimsp = getelementptr ptr, ptr %env, i64 1")
            f.line("store ptr %dims, ptr %env.dimsp, align 8")
        for i, stage in enumerate(k.stages):
            if isinstance(stage, For) and stage.kind == "parallel":
                if not isinstance(stage.start, te.Const):
                    raise ValueError("parallel loop needs a constant start")
                if isinstance(stage.extent, te.Const):
                    count = str(int(stage.extent.value) - int(stage.start.value))
                    if int(count) <= 0:
                        continue
                else:  # runs to a run-time dimension
                    count = f.expr(stage.extent - stage.start)
                body_name = f"{k.name}_par{i}"
                self._emit_parallel_body(body_name, stage)
                f.line(f"call void @aotc_parallel_for(ptr %ctx, ptr @{body_name}, ptr {env}, "
                       f"i64 {count})")
            else:
                f.stmt(stage)
        f.line("ret i32 0")
        self.mod.functions.append(f.finish())

    def _emit_parallel_body(self, name: str, loop: For) -> None:
        """The outlined body of a parallel loop over [start, extent): the pool hands out
        ranges of [0, extent - start), shifted here by the start."""
        f = _FunctionEmitter(
            self, f"define internal void @{name}(ptr %env, i64 %lo, i64 %hi) nounwind{self.mod.fn_attrs}",
            "%env", in_env=bool(self.dims)
        )
        assert isinstance(loop.start, te.Const)
        start = int(loop.start.value)
        end = interval(loop.extent, f.ranges)
        assert end is not None, f"parallel loop extent {loop.extent!r} has no bound"
        f.ranges[loop.var] = (start, end[1] - 1)
        lo, hi = "%lo", "%hi"
        if start:
            lo, hi = f.tmp(), f.tmp()
            f.line(f"{lo} = add nsw i64 %lo, {start}")
            f.line(f"{hi} = add nsw i64 %hi, {start}")
        f.loop(loop.var, lo, hi, "serial", loop.body)
        f.line("ret void")
        self.mod.functions.append(f.finish())


class _FunctionEmitter:
    def __init__(self, kemit: _KernelEmitter, header: str, bufs_arg: str,
                 in_env: bool = False) -> None:
        self.k = kemit
        self.mod = kemit.mod
        self.header = header
        self.lines: list[str] = ["entry:"]
        self.n = 0
        self.block = "entry"
        self.vars: dict[te.Var, str] = {}
        self.ranges: dict[te.Var, tuple[int, int]] = {}  # loop variable -> [lo, hi]
        self.reductions = 0  # vectorised reduction loops (interleave > 0) around the code
        self.ptr: dict[int, str] = {}
        dims_arg = "%dims"
        if in_env:  # an outlined body of a kernel that reads run-time dims: env = {bufs, dims}
            self.line("%env.bufs = load ptr, ptr %env, align 8")
            self.line("%env.dimsp = getelementptr ptr, ptr %env, i64 1")
            self.line("%env.dims = load ptr, ptr %env.dimsp, align 8")
            bufs_arg, dims_arg = "%env.bufs", "%env.dims"
        for d in kemit.dims:
            gep = self.tmp()
            self.line(f"{gep} = getelementptr i64, ptr {dims_arg}, i64 {d.index}")
            self.vars[d] = f"%{d.name}"
            self.line(f"%{d.name} = load i64, ptr {gep}, align 8")
            self.ranges[d] = (d.lo, d.hi)
        for i, b in enumerate(kemit.kernel.buffers):
            gep = self.tmp()
            self.line(f"{gep} = getelementptr ptr, ptr {bufs_arg}, i64 {i}")
            p = f"%{b.name}"
            self.line(f"{p} = load ptr, ptr {gep}, align 8")
            self.ptr[id(b)] = p

    # plumbing ---------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def label(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def line(self, s: str) -> None:
        self.lines.append("  " + s)

    def start_block(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def finish(self) -> str:
        return self.header + " {\n" + "\n".join(self.lines) + "\n}\n"

    # statements ---------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, For):
            lo, hi = interval(s.start, self.ranges), interval(s.extent, self.ranges)
            # a bound that the enclosing loops' ranges pin to one value is emitted as that
            # constant: min(32, 3136 - 32*jo) over jo < 98 is 32, and a constant trip count
            # lets LLVM vectorise the loop without a remainder and runtime checks
            start = str(lo[0]) if lo is not None and lo[0] == lo[1] else self.expr(s.start)
            extent = str(hi[0]) if hi is not None and hi[0] == hi[1] else self.expr(s.extent)
            if lo is not None and hi is not None:
                self.ranges[s.var] = (lo[0], hi[1] - 1)
            # a vector loop that asks for an interleave count over a short row (a reduction
            # over 49 columns of a 7x7 image; the default schedule's `keep_loop` over a plane)
            # stays a loop for the vectorizer: LLVM would otherwise unroll it fully first and
            # then leave it scalar or vectorise across the enclosing loop with gathers. (Not
            # every short loop: element-wise ones of small images run faster unrolled,
            # resnet_tiny 1.5x.)
            lanes = self.mod.target.vector_lanes_f32
            short = (s.interleave > 0 and hi is not None and hi[0] == hi[1]
                     and hi[0] < SHORT_ROW_VECTORS * lanes)
            self.loop(s.var, start, extent, s.kind, s.body, s.interleave, short, s.masked_tail,
                      s.unroll_full)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Call):
            self.call(s)
        elif isinstance(s, Prefetch):
            self.prefetch(s)
        else:
            raise TypeError(f"unknown statement {s!r}")

    def call(self, s: Call) -> None:
        self.mod.require_routine(s.func)
        args = []
        for a in s.args:
            if isinstance(a, BufPtr):
                args.append(f"ptr {self._address(a.buf, a.offset)}")
            elif a.dtype == "float32":
                args.append(f"float {self.expr(a)}")
            else:
                if a.dtype != "int64":
                    raise TypeError(f"routine argument {a!r} must be int64 or float32")
                args.append(f"i64 {self.expr(a)}")
        self.line(f"call void @{s.func}(" + ", ".join(args) + ")")

    def prefetch(self, s: Prefetch) -> None:
        # no `inbounds`: the next iteration's address may lie past the buffer
        idx = self.expr(s.index)
        p = self.tmp()
        self.line(f"{p} = getelementptr {MEMTYPE[s.buf.dtype]}, ptr {self.ptr[id(s.buf)]}, "
                  f"i64 {idx}")
        self.mod.declares.add("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        self.line(f"call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 3, i32 1)")  # read, keep, data

    def loop(self, var: te.Var, start: str, end: str, kind: str, body: Stmt,
             interleave: int = 0, keep: bool = False, masked_tail: bool = False,
             unroll_full: bool = False) -> None:
        head, body_l, latch, exit_l = (self.label(x) for x in ("L", "B", "C", "X"))
        pre = self.block
        self.line(f"br label %{head}")
        self.start_block(head)
        iv = f"%{var.name}.{self.n}"
        nxt = self.tmp()
        self.line(f"{iv} = phi i64 [ {start}, %{pre} ], [ {nxt}, %{latch} ]")
        c = self.tmp()
        self.line(f"{c} = icmp slt i64 {iv}, {end}")
        self.line(f"br i1 {c}, label %{body_l}, label %{exit_l}")
        self.start_block(body_l)
        saved = self.vars.get(var)
        self.vars[var] = iv
        reduction = kind == "vectorize" and interleave > 0
        self.reductions += reduction
        self.stmt(body)
        self.reductions -= reduction
        if saved is not None:
            self.vars[var] = saved
        self.line(f"br label %{latch}")
        self.start_block(latch)
        self.line(f"{nxt} = add nuw nsw i64 {iv}, 1")
        md = self._loop_md(kind, interleave, keep, masked_tail, unroll_full)
        self.line(f"br label %{head}" + (f", !llvm.loop {md}" if md else ""))
        self.start_block(exit_l)

    def _loop_md(self, kind: str, interleave: int = 0, keep: bool = False,
                 masked_tail: bool = False, unroll_full: bool = False) -> str:
        if kind == "vectorize":
            hint = self.mod.md('!"llvm.loop.vectorize.enable", i1 true')
            if masked_tail:
                tail = self.mod.md('!"llvm.loop.vectorize.predicate.enable", i1 true')
                hint = f"{hint}, {tail}"
            if interleave:
                count = self.mod.md(f'!"llvm.loop.interleave.count", i32 {interleave}')
                hint = f"{hint}, {count}"
            if keep:
                no_unroll = self.mod.md('!"llvm.loop.unroll.disable"')
                hint = f"{hint}, {no_unroll}"
            elif unroll_full:
                # LLVM's full unroll of the vector loop and its remainder gives up past a size
                # threshold (a 14x14 plane's 3x3 window on 8 lanes: 25 vectors of 9 taps);
                # the follow-up hints ask for it whatever the size
                full = self.mod.md('!"llvm.loop.unroll.full"')
                follow = self.mod.md(f'!"llvm.loop.vectorize.followup_all", {full}')
                hint = f"{hint}, {follow}"
        elif kind == "unroll":
            hint = self.mod.md('!"llvm.loop.unroll.enable"')
        else:
            return ""
        return self.mod.md(f"$SELF, {hint}", distinct=True, self_ref=True)

    def _address(self, buf: Buffer, index: te.Expr) -> str:
        idx = self.expr(index)
        p = self.tmp()
        self.line(f"{p} = getelementptr inbounds {MEMTYPE[buf.dtype]}, ptr {self.ptr[id(buf)]}, "
                  f"i64 {idx}")
        return p

    def _alias(self, buf: Buffer) -> str:
        own, others = self.k.scope_md[id(buf)]
        return f", !alias.scope {own}" + (f", !noalias {others}" if others else "")

    def store(self, s: Store) -> None:
        if s.value.dtype != s.buf.dtype:
            raise TypeError(f"store of {s.value.dtype} into {s.buf!r}")
        val = self._reassociated(s) if self.reductions else None
        if val is None and s.buf.dtype in STORED_AS_FLOAT:
            # the store rounds: a cast from a float to the type right before it need not
            inner = s.value.a if isinstance(s.value, te.Cast) and \
                LLTYPE[s.value.a.dtype] == "float" else s.value
            val = self._memory_bits(self.expr(inner), s.buf.dtype, inner is not s.value)
        elif val is None:
            val = self.expr(s.value)
        elif s.buf.dtype in STORED_AS_FLOAT:
            val = self._memory_bits(val, s.buf.dtype)
        if s.buf.dtype in te.NARROW_INT_DTYPES:  # the value bits alone, as ml_dtypes keeps them
            z = self.tmp()
            self.line(f"{z} = and i8 {val}, {(1 << te.INT_BITS[s.buf.dtype]) - 1}")
            val = z
        if s.buf.dtype == "bool":
            z = self.tmp()
            self.line(f"{z} = zext i1 {val} to i8")
            val = z
        p = self._address(s.buf, s.index)
        self.line(f"store {MEMTYPE[s.buf.dtype]} {val}, ptr {p}, align {SIZE[s.buf.dtype]}"
                  + self._alias(s.buf))

    def _reassociated(self, s: Store) -> str | None:
        """In a vectorised reduction loop (a schedule's, interleave > 0), the combine of an
        accumulation `x[i] = x[i] op v` carries `reassoc`, so that LLVM combines the vector
        lanes at the end by halves, not one after another (DESIGN: reassociation only in
        scheduled reductions; a NaN-aware max is exactly associative anyway). None for any
        other store."""
        e = s.value
        if not (isinstance(e, te.Binary) and e.op in ("add", "max", "min", "max_nan")
                and e.dtype in te.FLOAT_DTYPES):
            return None
        own = [x for x in (e.a, e.b) if isinstance(x, BufLoad) and x.buf is s.buf
               and repr(simplify_index(x.index)) == repr(simplify_index(s.index))]
        if not own:
            return None
        a, b = self.expr(e.a), self.expr(e.b)
        ty = LLTYPE[e.dtype]
        if e.op == "add":
            r = self.tmp()
            self.line(f"{r} = fadd reassoc contract {ty} {a}, {b}")
            return r
        name, flags = _FMINMAX[e.op]
        return self._intrinsic(name, ty, [a, b], flags="reassoc " + flags)

    # expressions --------------------------------------------------------------------------
    def expr(self, e: te.Expr) -> str:
        if isinstance(e, te.Var):
            return self.vars[e]
        if isinstance(e, te.Const):
            if e.dtype in te.FLOAT_DTYPES:
                return _fconst(float(e.value), e.dtype)
            if e.dtype == "bool":
                return "true" if e.value else "false"
            return str(_int_const(int(e.value), e.dtype))
        if isinstance(e, BufLoad):
            p = self._address(e.buf, e.index)
            v = self.tmp()
            self.line(f"{v} = load {MEMTYPE[e.buf.dtype]}, ptr {p}, align {SIZE[e.buf.dtype]}"
                      + self._alias(e.buf))
            if e.buf.dtype == "bool":
                b = self.tmp()
                self.line(f"{b} = icmp ne i8 {v}, 0")
                return b
            if e.buf.dtype in te.HALF_DTYPES:
                return self._half_value(v, e.buf.dtype)
            if e.buf.dtype in te.NARROW_FLOAT_DTYPES:
                return self._narrow("decode", e.buf.dtype, v)
            if e.buf.dtype in te.NARROW_INT_DTYPES:
                return self._wrapped(v, e.buf.dtype)
            return v
        if isinstance(e, te.Binary):
            return self.binary(e)
        if isinstance(e, te.Unary):
            return self.unary(e)
        if isinstance(e, te.Select):
            return self.select(e)
        if isinstance(e, te.Cast):
            return self.cast(e)
        raise TypeError(f"cannot generate code for {e!r}")

    def _call(self, ret: str, fn: str, args: list[tuple[str, str]], flags: str = "") -> str:
        """`call [flags]ret @fn(args)`; `flags` are fast-math flags, each followed by a space."""
        v = self.tmp()
        self.line(f"{v} = call {flags}{ret} @{fn}(" + ", ".join(f"{t} {a}" for t, a in args)
                  + ")")
        return v

    def _intrinsic(self, name: str, ty: str, args: list[str], flags: str = "") -> str:
        suffix = {"float": "f32", "double": "f64"}.get(ty, ty)
        fn = f"llvm.{name}.{suffix}"
        self.mod.declares.add(f"declare {ty} @{fn}(" + ", ".join([ty] * len(args))
                              + (", i1" if name == "abs" and ty.startswith("i") else "") + ")")
        call_args = [(ty, a) for a in args]
        if name == "abs" and ty.startswith("i"):
            call_args.append(("i1", "false"))
        return self._call(ty, fn, call_args, flags)

    def _math(self, op: str, dtype: str, args: list[str]) -> str:
        ty = LLTYPE[dtype]
        if dtype == "float64":
            return self._math_f64(op, args)
        if vecmath is not None and op in vecmath.MATH_FUNCTIONS:
            self.mod.math.add(op)
            return self._call(ty, vecmath.MATH_FUNCTIONS[op], [(ty, a) for a in args])
        if op == "sigmoid":  # 1 / (1 + exp(-x))
            n = self.tmp()
            self.line(f"{n} = fneg float {args[0]}")
            ex = self._math("exp", dtype, [n])
            d = self.tmp()
            self.line(f"{d} = fadd float 1.0, {ex}")
            r = self.tmp()
            self.line(f"{r} = fdiv float 1.0, {d}")
            return r
        if op == "softplus":  # max(x,0) + log(1 + exp(-|x|))
            ab = self._intrinsic("fabs", ty, args)
            n = self.tmp()
            self.line(f"{n} = fneg float {ab}")
            ex = self._math("exp", dtype, [n])
            one = self.tmp()
            self.line(f"{one} = fadd float 1.0, {ex}")
            lg = self._math("log", dtype, [one])
            mx = self._intrinsic("maxnum", ty, [args[0], "0.0"])
            r = self.tmp()
            self.line(f"{r} = fadd float {mx}, {lg}")
            return r
        fn = _LIBM[op]
        self.mod.declares.add(f"declare float @{fn}(" + ", ".join(["float"] * len(args)) + ")")
        return self._call(ty, fn, [(ty, a) for a in args])

    def _math_f64(self, op: str, args: list[str]) -> str:
        """Double math through libm (vecmath is float-only), keeping float64 range/precision."""
        if op == "sigmoid":  # 1 / (1 + exp(-x)): exp overflow gives 0, NaN stays NaN
            n = self.tmp()
            self.line(f"{n} = fneg double {args[0]}")
            d = self.tmp()
            self.line(f"{d} = fadd double 1.0, {self._math_f64('exp', [n])}")
            r = self.tmp()
            self.line(f"{r} = fdiv double 1.0, {d}")
            return r
        if op == "softplus":  # max(x, 0) + log1p(exp(-|x|))
            n = self.tmp()
            self.line(f"{n} = fneg double {self._intrinsic('fabs', 'double', args)}")
            lg = self._math_f64("log1p", [self._math_f64("exp", [n])])
            mx = self._intrinsic("maxnum", "double", [args[0], "0.0"])
            r = self.tmp()
            self.line(f"{r} = fadd double {mx}, {lg}")
            return r
        fn = _LIBM[op][:-1] if op in _LIBM else op  # expf -> exp; log1p
        self.mod.declares.add(f"declare double @{fn}(" + ", ".join(["double"] * len(args)) + ")")
        return self._call("double", fn, [("double", a) for a in args])

    def _convert(self, v: str, op: str, src: str, dst: str) -> str:
        r = self.tmp()
        self.line(f"{r} = {op} {src} {v} to {dst}")
        return r

    def binary(self, e: te.Binary, contract: bool = True) -> str:
        dt = e.a.dtype
        ty = LLTYPE[dt]
        a, b = self.expr(e.a), self.expr(e.b)
        r = self.tmp()
        is_float = dt in te.FLOAT_DTYPES
        if e.op in te.Binary.COMPARE:
            if is_float:
                self.line(f"{r} = fcmp {_FCMP[e.op]} {ty} {a}, {b}")
            else:
                table = _UCMP if dt in UNSIGNED else _ICMP
                self.line(f"{r} = icmp {table[e.op]} {ty} {a}, {b}")
            return r
        if is_float:
            if e.op in _FBIN:
                op = _FBIN[e.op] if contract else _FBIN[e.op].removesuffix(" contract")
                self.line(f"{r} = {op} {ty} {a}, {b}")
                return r
            if e.op in _FMINMAX:
                name, flags = _FMINMAX[e.op]
                return self._intrinsic(name, ty, [a, b], flags=flags)
            if e.op == "pow":
                return self._math("pow", dt, [a, b])
            if e.op == "fmod":  # LLVM's frem is C's fmod (a libm call on most targets)
                self.line(f"{r} = frem {ty} {a}, {b}")
                return r
            raise TypeError(f"float {e.op} is not supported")
        if e.op in _IBIN:
            self.line(f"{r} = {_IBIN[e.op]} {ty} {a}, {b}")
            return r
        unsigned = dt in UNSIGNED
        if e.op in te.Binary.SHIFT:
            op = "shl" if e.op == "shl" else ("lshr" if unsigned else "ashr")
            self.line(f"{r} = {op} {ty} {a}, {b}")
            return r
        if e.op == "div":
            self.line(f"{r} = {'udiv' if unsigned else 'sdiv'} {ty} {a}, {b}")
            return r
        if e.op in ("min", "max", "max_nan"):  # integers have no NaN
            name = ("u" if unsigned else "s") + e.op.removesuffix("_nan")
            return self._intrinsic(name, ty, [a, b])
        if e.op in ("floordiv", "mod"):
            return self._floor_divmod(e.op, ty, a, b, unsigned)
        raise TypeError(f"integer {e.op} is not supported")

    def _floor_divmod(self, op: str, ty: str, a: str, b: str, unsigned: bool) -> str:
        """Python semantics (floor), which index arithmetic with negative offsets needs."""
        if unsigned:
            r = self.tmp()
            self.line(f"{r} = {'udiv' if op == 'floordiv' else 'urem'} {ty} {a}, {b}")
            return r
        q, rem, rneg, bneg, differ, nz, fix = (self.tmp() for _ in range(7))
        self.line(f"{q} = sdiv {ty} {a}, {b}")
        self.line(f"{rem} = srem {ty} {a}, {b}")
        self.line(f"{rneg} = icmp slt {ty} {rem}, 0")
        self.line(f"{bneg} = icmp slt {ty} {b}, 0")
        self.line(f"{differ} = xor i1 {rneg}, {bneg}")
        self.line(f"{nz} = icmp ne {ty} {rem}, 0")
        self.line(f"{fix} = and i1 {differ}, {nz}")
        out = self.tmp()
        if op == "floordiv":
            adj = self.tmp()
            self.line(f"{adj} = sext i1 {fix} to {ty}")
            self.line(f"{out} = add {ty} {q}, {adj}")
        else:
            addb = self.tmp()
            self.line(f"{addb} = select i1 {fix}, {ty} {b}, {ty} 0")
            self.line(f"{out} = add {ty} {rem}, {addb}")
        return out

    def unary(self, e: te.Unary) -> str:
        dt = e.dtype
        ty = LLTYPE[dt]
        a = self.expr(e.a)
        is_float = dt in te.FLOAT_DTYPES
        if e.op == "neg":
            r = self.tmp()
            self.line(f"{r} = fneg {ty} {a}" if is_float else f"{r} = sub {ty} 0, {a}")
            return r
        if e.op == "not":
            r = self.tmp()
            self.line(f"{r} = xor i1 {a}, true")
            return r
        if e.op == "abs" and not is_float:
            return self._intrinsic("abs", ty, [a])
        if not is_float:
            if e.op in ("floor", "ceil", "round"):
                return a
            raise TypeError(f"{e.op} needs a float operand")
        if e.op in _FLOAT_INTRINSIC:
            return self._intrinsic(_FLOAT_INTRINSIC[e.op], ty, [a])
        return self._math(e.op, dt, [a])

    def _speculatable(self, e: te.Expr) -> bool:
        """Whether `e` can be evaluated even when its select does not choose it: every load
        provably in bounds, no integer division (which could trap)."""
        if isinstance(e, BufLoad):
            r = interval(e.index, self.ranges)
            if r is None or r[0] < 0 or r[1] >= e.buf.size:
                return False
        if isinstance(e, te.Binary) and e.op in ("div", "floordiv", "mod") and \
                e.dtype not in te.FLOAT_DTYPES and not isinstance(e.b, te.Const):
            return False
        return all(self._speculatable(c) for c in te.children(e))

    def select(self, e: te.Select) -> str:
        c = self.expr(e.cond)
        ty = LLTYPE[e.dtype]
        if self._speculatable(e.t) and self._speculatable(e.f):
            t, f = self.expr(e.t), self.expr(e.f)
            r = self.tmp()
            self.line(f"{r} = select i1 {c}, {ty} {t}, {ty} {f}")
            return r
        # A branch that loads may index out of bounds when not taken (padding, masks):
        # evaluate only the taken side. (Loads proven in bounds are evaluated on both sides,
        # so that the loop stays vectorisable: padding copies clamp their indices for this.)
        lt, lf, lj = self.label("St"), self.label("Sf"), self.label("Sj")
        self.line(f"br i1 {c}, label %{lt}, label %{lf}")
        self.start_block(lt)
        t = self.expr(e.t)
        bt = self.block
        self.line(f"br label %{lj}")
        self.start_block(lf)
        f = self.expr(e.f)
        bf = self.block
        self.line(f"br label %{lj}")
        self.start_block(lj)
        r = self.tmp()
        self.line(f"{r} = phi {ty} [ {t}, %{bt} ], [ {f}, %{bf} ]")
        return r

    def cast(self, e: te.Cast) -> str:
        """ONNX's Cast, as onnxruntime computes it on x86-64: float → integer truncates toward
        zero, through int32 for the narrow types and int64 for uint32, so that a value out of
        the narrow type's range (but within the wider one) wraps as the C cast compiled there
        does (out-of-range conversions are undefined in ONNX); integer → integer wraps or
        extends by the source's signedness; anything → bool is "nonzero" (NaN is true); a cast
        to float16/bfloat16 rounds to nearest even, from float64 or an integer through float32
        (as onnxruntime: one rounding to float32, one to the type)."""
        src, dst = e.a.dtype, e.dtype
        if dst == "float16" and isinstance(e.a, te.Binary):
            # the rounded operation uncontracted: on a host with native half arithmetic
            # (AVX512-FP16) LLVM narrows round(a*b) to a half multiply, which `contract` would
            # fuse with the add that reads it into one FMA, skipping this rounding
            a = self.binary(e.a, contract=False)
        else:
            a = self.expr(e.a)
        if src == dst:
            return a
        st, dt_ = LLTYPE[src], LLTYPE[dst]
        fsrc, fdst = src in te.FLOAT_DTYPES, dst in te.FLOAT_DTYPES
        if dst == "bool":
            r = self.tmp()
            if fsrc:
                self.line(f"{r} = fcmp une {st} {a}, 0.0")
            else:
                self.line(f"{r} = icmp ne {st} {a}, 0")
            return r
        if fdst:
            if fsrc:
                v = a if st == dt_ else self._convert(
                    a, "fpext" if dt_ == "double" else "fptrunc", st, dt_)
            else:
                v = self._convert(a, "uitofp" if src in UNSIGNED else "sitofp", st, dt_)
            if dst in te.NARROW_FLOAT_DTYPES:
                return self._narrow("decode", dst, self._narrow("cast", dst, v))
            return self._half_value(self._half_bits(v, dst), dst) if dst in te.HALF_DTYPES else v
        if dst in te.NARROW_INT_DTYPES:
            return self._wrapped(self._to_narrow_int(a, src), dst)
        if fsrc:
            if dst == "uint64":
                return self._convert(a, "fptoui", st, dt_)
            wide = "i64" if dst in ("int64", "uint32") else "i32"
            v = self._convert(a, "fptosi", st, wide)
            return v if wide == dt_ else self._convert(v, "trunc", wide, dt_)
        if SIZE[dst] > SIZE[src] or src == "bool":
            return self._convert(a, "zext" if src in UNSIGNED else "sext", st, dt_)
        if SIZE[dst] < SIZE[src]:
            return self._convert(a, "trunc", st, dt_)
        return a

    def _to_narrow_int(self, a: str, src: str) -> str:
        """A value as an i8 whose low bits a 4- or 2-bit integer keeps (_wrapped then extends
        them). From a float, onnxruntime rounds half away from zero (std::round, not C's
        truncation) and keeps the low bits (ONNX's reference truncates); from an integer,
        the low bits."""
        st = LLTYPE[src]
        if src in te.FLOAT_DTYPES:
            wide = "i64" if st == "double" else "i32"
            a = self._convert(self._intrinsic("round", st, [a]), "fptosi", st, wide)
            return self._convert(a, "trunc", wide, "i8")
        if st == "i1":
            return self._convert(a, "zext", st, "i8")
        return a if st == "i8" else self._convert(a, "trunc", st, "i8")

    def _wrapped(self, v: str, dtype: str) -> str:
        """An i8 reduced to `dtype`'s bits: sign-extended from them, or zero-extended."""
        bits = te.INT_BITS[dtype]
        r = self.tmp()
        if dtype in UNSIGNED:
            self.line(f"{r} = and i8 {v}, {(1 << bits) - 1}")
            return r
        up = self.tmp()
        self.line(f"{up} = shl i8 {v}, {8 - bits}")
        self.line(f"{r} = ashr i8 {up}, {8 - bits}")
        return r

    def _narrow(self, op: str, dtype: str, v: str) -> str:
        """narrow_ir's `op` ("decode", "cast", "store") for an 8- or 4-bit float."""
        name = narrow_ir.function_name(op, dtype)
        if name not in self.mod.routines:
            self.mod.routines[name] = narrow_ir.function_ir(name)
        return self._call("float" if op == "decode" else "i8", name,
                          [("i8" if op == "decode" else "float", v)])

    def _memory_bits(self, v: str, dtype: str, cast: bool = False) -> str:
        """A float register value as `dtype`'s bits in memory; `cast`: rounded as a Cast to
        the type (what a stripped cast before the store asked for)."""
        if dtype in te.NARROW_FLOAT_DTYPES:
            return self._narrow("cast" if cast else "store", dtype, v)
        return self._half_bits(v, dtype)

    def _half_bits(self, v: str, dtype: str) -> str:
        """A float register value as `dtype`'s bits (MEMTYPE), rounded to nearest even. A
        bfloat16 keeps a NaN a NaN (its sign and top payload bits, made quiet), as onnxruntime
        and ml_dtypes do; other values add 0x7FFF plus the kept part's lowest bit and shift."""
        if dtype == "float16":
            return self._convert(v, "fptrunc", "float", "half")
        bits, low, odd, bias, rounded, top, nan, quiet, pick = (self.tmp() for _ in range(9))
        self.line(f"{bits} = bitcast float {v} to i32")
        self.line(f"{low} = lshr i32 {bits}, 16")
        self.line(f"{odd} = and i32 {low}, 1")
        self.line(f"{bias} = add i32 {odd}, 32767")
        self.line(f"{rounded} = add i32 {bits}, {bias}")
        self.line(f"{top} = lshr i32 {rounded}, 16")
        self.line(f"{nan} = fcmp uno float {v}, 0.0")
        self.line(f"{quiet} = or i32 {low}, 64")
        self.line(f"{pick} = select i1 {nan}, i32 {quiet}, i32 {top}")
        return self._convert(pick, "trunc", "i32", "i16")

    def _half_value(self, bits: str, dtype: str) -> str:
        """`dtype`'s bits (MEMTYPE) as the float register value they stand for (exact)."""
        if dtype == "float16":
            return self._convert(bits, "fpext", "half", "float")
        wide, high = self.tmp(), self.tmp()
        self.line(f"{wide} = zext i16 {bits} to i32")
        self.line(f"{high} = shl i32 {wide}, 16")
        return self._convert(high, "bitcast", "i32", "float")


def _int_const(value: int, dtype: str) -> int:
    """`value` modulo the type's width, written as LLVM reads a constant of iN (signed)."""
    if dtype == "bool":
        return int(bool(value))
    bits = 8 * SIZE[dtype]
    v = value & ((1 << bits) - 1)
    return v - (1 << bits) if v >> (bits - 1) else v


def _has_load(e: te.Expr) -> bool:
    if isinstance(e, BufLoad):
        return True
    return any(_has_load(c) for c in te.children(e))


def optimized_module(text: str, target: CpuTarget) -> llvm.ModuleRef:
    """Parse, verify and optimise at O3 (vectorizers on) for `target`."""
    tm = target_machine(target)
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def optimize_and_emit(text: str, target: CpuTarget) -> tuple[bytes, str]:
    """Optimise (optimized_module) and emit an object. Returns (obj, optimised IR text)."""
    mod = optimized_module(text, target)
    return target_machine(target).emit_object(mod), str(mod)
