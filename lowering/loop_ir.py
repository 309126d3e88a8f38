"""Loop IR: flat buffers, loops and stores — what a schedule produces and a code generator reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from lowering import te
from lowering.affine import simplify_index

# GPU targets: "block" is a loop bound to the grid (one work-group / thread block per
# iteration), "thread" one bound to the threads of a block; a GPU kernel's stage nests start
# with one of each (lowering/gpu_schedule.py), CPU code generators never see them.
GPU_LOOP_KINDS = ("block", "thread")
LOOP_KINDS = ("serial", "parallel", "vectorize", "unroll", *GPU_LOOP_KINDS)


class Buffer:
    """A flat kernel argument: an input, an output, or scratch memory of the kernel."""

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...], role: str) -> None:
        self.name = name
        self.dtype = dtype
        self.shape = shape
        # "input" | "output" | "scratch"; GPU kernels also "local": memory a block's threads
        # share (OpenCL __local, CUDA __shared__), declared by the kernel, not an argument,
        # and "fragment": a matrix instruction's accumulator, held by a warp's lanes together
        # (intrinsics.MmaInstruction), only passed to that instruction's routines
        self.role = role
        strides = []
        s = 1
        for d in reversed(shape):
            strides.append(s)
            s *= d
        self.strides = tuple(reversed(strides))
        self.size = s

    def __repr__(self) -> str:
        return f"{self.name}:{self.dtype}{list(self.shape)}"


class BufLoad(te.Expr):
    """Load of a flat buffer element."""

    __slots__ = ("buf", "index")

    def __init__(self, buf: Buffer, index: te.Expr) -> None:
        self.buf, self.index, self.dtype = buf, index, buf.dtype

    def substitute(self, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        return BufLoad(self.buf, te.substitute(self.index, vmap))

    def __repr__(self) -> str:
        return f"{self.buf.name}[{self.index!r}]"


class Stmt:
    pass


@dataclass
class For(Stmt):
    var: te.Var
    extent: te.Expr  # an int64 expression of enclosing loop variables (usually a Const)
    kind: str
    body: Stmt
    start: te.Expr = field(default_factory=lambda: te.Const(0, "int64"))
    # vectorized loops: vectors kept in flight (accumulators of a reduction); 0 = LLVM decides
    interleave: int = 0
    # vectorized loops: the last partial vector runs under a mask (LLVM's tail folding) instead
    # of as a scalar remainder; for short loops of dear bodies (a sigmoid over a 7x7 plane)
    masked_tail: bool = False
    # vectorized loops of a constant trip count: the vector loop and its remainder unrolled
    # fully whatever the code generator's size threshold, so that per-vector values computed
    # from the index (a plane's row and column masks) become constants
    unroll_full: bool = False


@dataclass
class Store(Stmt):
    buf: Buffer
    index: te.Expr
    value: te.Expr


@dataclass
class Seq(Stmt):
    stmts: list[Stmt]


@dataclass
class BufPtr:
    """A pointer argument: the address of element `offset` of `buf`."""

    buf: Buffer
    offset: te.Expr


@dataclass
class Call(Stmt):
    """A call of a target routine (a micro-kernel chosen by tensorization, a prefetch): `func`
    names it in the target's registry; arguments are pointers into buffers or int64 values."""

    func: str
    args: list[BufPtr | te.Expr]


@dataclass
class Prefetch(Stmt):
    """A hint to bring the cache line holding `buf[index]` closer (pragma prefetch). It never
    faults, so `index` may point past the buffer (the iteration after the last)."""

    buf: Buffer
    index: te.Expr


@dataclass
class Barrier(Stmt):
    """GPU kernels: every thread of the block waits here until all have arrived, and what
    they wrote to local buffers before it is visible to all after it. Every thread of a
    block must reach it (no thread-dependent guard may enclose it)."""


@dataclass
class Kernel:
    """One kernel: its buffers in ABI order (inputs, outputs, scratch) and one nest per stage."""

    name: str
    buffers: list[Buffer]
    stages: list[Stmt]


Names = dict[int, str] | None  # id(Var) -> printed name, for canonical (deduplication) text


def map_exprs(s: Stmt, f: Callable[[te.Expr], te.Expr]) -> Stmt:
    """`s` rebuilt with `f` applied to every expression it holds (loop bounds, indices,
    values, call arguments)."""
    if isinstance(s, For):
        return replace(s, extent=f(s.extent), start=f(s.start), body=map_exprs(s.body, f))
    if isinstance(s, Seq):
        return Seq([map_exprs(x, f) for x in s.stmts])
    if isinstance(s, Store):
        return Store(s.buf, f(s.index), f(s.value))
    if isinstance(s, Call):
        return Call(s.func, [BufPtr(a.buf, f(a.offset)) if isinstance(a, BufPtr) else f(a)
                             for a in s.args])
    if isinstance(s, Prefetch):
        return Prefetch(s.buf, f(s.index))
    if isinstance(s, Barrier):
        return s
    raise TypeError(f"unexpected statement {s!r}")


def walk(s: Stmt) -> Iterator[Stmt]:
    """`s` and every statement nested in it, outermost first, in program order."""
    yield s
    if isinstance(s, For):
        yield from walk(s.body)
    elif isinstance(s, Seq):
        for x in s.stmts:
            yield from walk(x)


def bind(s: Stmt, vmap: dict[te.Var, te.Expr]) -> Stmt:
    """`s` with variables substituted."""
    return map_exprs(s, lambda e: te.substitute(e, vmap))


def kernel_dims(k: Kernel) -> list[te.DimVar]:
    """The run-time dimensions a kernel reads (loop bounds, indices), by index."""
    found: dict[int, te.DimVar] = {}

    def visit(e: te.Expr) -> te.Expr:
        if isinstance(e, te.DimVar):
            found[e.index] = e
        if isinstance(e, BufLoad):
            visit(e.index)
        for ch in te.children(e):
            visit(ch)
        return e

    for st in k.stages:
        map_exprs(st, visit)
    return [found[i] for i in sorted(found)]


def simplify_loads(e: te.Expr) -> te.Expr:
    """`e` with the (affine) index of every buffer load folded."""
    if isinstance(e, BufLoad):
        return BufLoad(e.buf, simplify_index(e.index))
    return te.map_children(e, simplify_loads)


def simplify_indices(s: Stmt) -> Stmt:
    """`s` with every store and load index folded (see affine.simplify_index)."""
    if isinstance(s, Store):
        return Store(s.buf, simplify_index(s.index), simplify_loads(s.value))
    if isinstance(s, For):
        return replace(s, body=simplify_indices(s.body))
    if isinstance(s, Seq):
        return Seq([simplify_indices(x) for x in s.stmts])
    return map_exprs(s, simplify_loads)


def divides(s: Stmt, v: te.Var) -> bool:
    """Whether an index or value in `s` divides `v` or takes a remainder of it (is not affine
    in v)."""
    found = False

    def visit(e: te.Expr) -> te.Expr:
        nonlocal found
        if isinstance(e, te.Binary) and e.op in ("floordiv", "mod") and te.mentions(e, v):
            found = True
        if isinstance(e, BufLoad):
            visit(e.index)
        for ch in te.children(e):
            visit(ch)
        return e

    map_exprs(s, visit)
    return found


_CONST_SUFFIX = {"float32": "f", "float16": "h", "bfloat16": "bf"}


def format_expr(e: te.Expr, names: Names = None) -> str:
    def f(x: te.Expr) -> str:
        return format_expr(x, names)

    if isinstance(e, te.Var):
        return names.get(id(e), e.name) if names else e.name
    if isinstance(e, te.Const):
        return f"{e.value!r}{_CONST_SUFFIX.get(e.dtype, '')}"
    if isinstance(e, BufLoad):
        return f"{e.buf.name}[{f(e.index)}]"
    if isinstance(e, te.Binary):
        return f"{e.op}({f(e.a)}, {f(e.b)})"
    if isinstance(e, te.Unary):
        return f"{e.op}({f(e.a)})"
    if isinstance(e, te.Select):
        return f"select({f(e.cond)}, {f(e.t)}, {f(e.f)})"
    if isinstance(e, te.Cast):
        return f"{e.dtype}({f(e.a)})"
    raise TypeError(f"not a loop-IR expression: {e!r}")


def format_stmt(s: Stmt, indent: int = 0, names: Names = None) -> str:
    pad = "  " * indent
    if isinstance(s, For):
        var = format_expr(s.var, names)
        head = f"{pad}for {var} in [{format_expr(s.start, names)}, {format_expr(s.extent, names)})"
        if s.kind != "serial":
            head += f"  # {s.kind}"
        if s.interleave:
            head += f" x{s.interleave}"
        if s.masked_tail:
            head += " masked tail"
        if s.unroll_full:
            head += " unrolled"
        return head + "\n" + format_stmt(s.body, indent + 1, names)
    if isinstance(s, Store):
        return (f"{pad}{s.buf.name}[{format_expr(s.index, names)}] = "
                f"{format_expr(s.value, names)}")
    if isinstance(s, Seq):
        return "\n".join(format_stmt(x, indent, names) for x in s.stmts)
    if isinstance(s, Call):
        args = ", ".join(
            f"&{a.buf.name}[{format_expr(a.offset, names)}]" if isinstance(a, BufPtr)
            else format_expr(a, names) for a in s.args)
        return f"{pad}{s.func}({args})"
    if isinstance(s, Prefetch):
        return f"{pad}prefetch(&{s.buf.name}[{format_expr(s.index, names)}])"
    if isinstance(s, Barrier):
        return f"{pad}barrier"
    raise TypeError(f"not a statement: {s!r}")


def _loop_vars(s: Stmt, out: list[te.Var]) -> None:
    if isinstance(s, For):
        out.append(s.var)
        _loop_vars(s.body, out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _loop_vars(x, out)


def format_kernel(k: Kernel, canonical: bool = False) -> str:
    """Readable text of a kernel. `canonical` renames loop variables by position and drops the
    kernel's name, so that two kernels computing the same thing print the same text."""
    names: Names = None
    if canonical:
        found: list[te.Var] = []
        for st in k.stages:
            _loop_vars(st, found)
        names = {}
        for v in found:
            names.setdefault(id(v), f"v{len(names)}")
    title = "kernel" if canonical else f"kernel {k.name}"
    head = f"{title}(" + ", ".join(f"{b.role} {b!r}" for b in k.buffers) + ")"
    return head + "\n" + "\n".join(format_stmt(s, 1, names) for s in k.stages)
