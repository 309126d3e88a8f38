"""The loop-IR verifier: what every kernel must satisfy before a code generator sees it,
whichever builder made it (the default lowering, a template's builder, a hand-written nest,
the compiler's copies). The compiler runs it on each kernel it adds to a program
(`aotc/compiler.py`, `add_kernel`), so a builder's mistake is reported as such, naming the
kernel and the statement, instead of surfacing as an LLVM or C compiler error, or as a
kernel that reads past a buffer.

Checked:
- the buffers: arguments in ABI order (inputs, outputs, then scratch), names unique; every
  argument buffer a statement or load names is one of the kernel's (block-local and fragment
  buffers are declared by the kernel, not passed);
- the loops: a known kind (`loop_ir.LOOP_KINDS`), int64 bounds, no variable bound twice on
  one path (a nested loop reusing an outer one's variable);
- every index, bound and value: its variables bound by an enclosing loop (run-time
  dimensions are the `dims` argument's), no tensor load left unlowered, no marker of a
  stage only a template lowers (a recurrence, a hand-written nest);
- every store: not into an input, the value of the buffer's type in registers (a float32
  value into a float16, bfloat16 or 8-/4-bit float buffer is a rounding store, as te.py
  defines them), an int64 index.
"""

from __future__ import annotations

from lowering import te
from lowering.loop_ir import (
    LOOP_KINDS,
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
    format_expr,
)

ARGUMENT_ROLES = ("input", "output", "scratch")  # in this order in Kernel.buffers
DECLARED_ROLES = ("local", "fragment")  # declared by a GPU kernel, not passed
INDEX_DTYPES = ("int64", "int32")
# The types held as a float32 in registers; a store into a buffer of one of them rounds.
ROUNDED_BY_STORE = (*te.HALF_DTYPES, *te.NARROW_FLOAT_DTYPES)


def register_dtype(dtype: str) -> str:
    """The type a value of `dtype` has in registers."""
    return "float32" if dtype in ROUNDED_BY_STORE else dtype


class LoopIRError(Exception):
    """A kernel breaks a rule of the loop IR (a bug in the builder that made it)."""


class _Verifier:
    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.buffers = {id(b) for b in kernel.buffers}

    def fail(self, what: str) -> LoopIRError:
        return LoopIRError(f"kernel {self.kernel.name}: {what}")

    def buffer(self, b: Buffer, where: str) -> None:
        if b.role in DECLARED_ROLES:
            return
        if b.role not in ARGUMENT_ROLES:
            raise self.fail(f"{where}: buffer {b.name} has the unknown role {b.role!r}")
        if id(b) not in self.buffers:
            raise self.fail(f"{where}: buffer {b.name} is not one of the kernel's")

    def expr(self, e: te.Expr, bound: set[int], where: str) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, te.Var) and not isinstance(x, te.DimVar) and id(x) not in bound:
                raise self.fail(f"{where}: variable {x.name} is not bound by an enclosing "
                                f"loop, in {format_expr(e)}")
            if isinstance(x, te.Load):
                raise self.fail(f"{where}: a tensor load ({x.tensor.name}) left unlowered")
            if isinstance(x, te.Reduce):
                raise self.fail(f"{where}: a reduction left unlowered")
            if isinstance(x, BufLoad):
                self.buffer(x.buf, where)
                self.index(x.index, where)
                stack.append(x.index)
                continue
            children = te.children(x)
            if not children and not isinstance(x, (te.Var, te.Const)):
                raise self.fail(f"{where}: {x!r} stands for a stage that only a template "
                                "lowers")
            stack.extend(children)

    def index(self, e: te.Expr, where: str) -> None:
        if e.dtype not in INDEX_DTYPES:
            raise self.fail(f"{where}: an index of type {e.dtype}: {format_expr(e)}")

    def stmt(self, s: Stmt, bound: set[int], where: str) -> None:
        if isinstance(s, Seq):
            for i, x in enumerate(s.stmts):
                self.stmt(x, bound, f"{where}.{i}")
        elif isinstance(s, For):
            at = f"{where} (loop {s.var.name})"
            if s.kind not in LOOP_KINDS:
                raise self.fail(f"{at}: unknown loop kind {s.kind!r}")
            if id(s.var) in bound:
                raise self.fail(f"{at}: the variable is bound by an enclosing loop already")
            for e in (s.extent, s.start):
                self.index(e, at)
                self.expr(e, bound, at)
            self.stmt(s.body, bound | {id(s.var)}, where)
        elif isinstance(s, Store):
            at = f"{where} (store to {s.buf.name})"
            self.buffer(s.buf, at)
            if s.buf.role == "input":
                raise self.fail(f"{at}: the buffer is an input")
            if register_dtype(s.value.dtype) != register_dtype(s.buf.dtype):
                raise self.fail(f"{at}: a {s.value.dtype} value into a {s.buf.dtype} buffer")
            self.index(s.index, at)
            self.expr(s.index, bound, at)
            self.expr(s.value, bound, at)
        elif isinstance(s, Call):
            at = f"{where} (call {s.func})"
            for a in s.args:
                if isinstance(a, BufPtr):
                    self.buffer(a.buf, at)
                    self.index(a.offset, at)
                    self.expr(a.offset, bound, at)
                else:
                    self.expr(a, bound, at)
        elif isinstance(s, Prefetch):
            at = f"{where} (prefetch of {s.buf.name})"
            self.buffer(s.buf, at)
            self.index(s.index, at)
            self.expr(s.index, bound, at)
        elif not isinstance(s, Barrier):
            raise self.fail(f"{where}: unexpected statement {s!r}")

    def run(self) -> None:
        names = [b.name for b in self.kernel.buffers]
        if len(set(names)) != len(names):
            raise self.fail(f"buffer names repeat: {names}")
        order = [ARGUMENT_ROLES.index(b.role) if b.role in ARGUMENT_ROLES else -1
                 for b in self.kernel.buffers]
        if -1 in order:
            b = self.kernel.buffers[order.index(-1)]
            raise self.fail(f"argument {b.name} has the role {b.role!r}")
        if order != sorted(order):
            raise self.fail("arguments out of ABI order (inputs, outputs, scratch): "
                            f"{[(b.name, b.role) for b in self.kernel.buffers]}")
        for i, st in enumerate(self.kernel.stages):
            self.stmt(st, set(), f"stage {i}")


def verify_kernel(kernel: Kernel) -> Kernel:
    """`kernel` itself when it satisfies the loop IR's rules (the module docstring), else
    LoopIRError naming the kernel, the statement (stage and position) and the rule."""
    _Verifier(kernel).run()
    return kernel
