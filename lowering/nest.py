"""Stages whose loop nest is written by hand: what a tensor expression cannot say, such as a
greedy selection in which each step depends on the decisions of the steps before it
(NonMaxSuppression keeps a box only if no box it kept earlier overlaps it).

Such a stage is a compute like any other for everything around it: the stages it reads are
computed before it into buffers of their own, the stages that read it find it in a buffer.
Only its own loops are not derived from a body. `lower.py` asks its op for them instead: the
op's `write(out, buffer_of, scratch)` returns the loop-IR statement that fills `out` from the
buffers `buffer_of(tensor)` gives for the tensors it reads, with scratch buffers of its own
from `scratch(name, dtype, shape)`. The body only lists what the stage reads (for producer
order and dependency analysis), around a `HandNest` expression that code generation rejects,
so a schedule that would derive loops from it fails loudly. The nest runs serially: its
loops are "serial" For loops (the CPU code generator's; GPU targets refuse such stages).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lowering import te
from lowering.loop_ir import Buffer, Stmt

# write(out, buffer_of, scratch) -> the nest that fills `out`
NestWriter = Callable[[Buffer, Callable[[te.Tensor], Buffer],
                       Callable[[str, str, tuple[int, ...]], Buffer]], Stmt]


class HandNest(te.Expr):
    """Stands for the hand-written nest in its stage's body: no generic lowering generates
    code for it."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str) -> None:
        self.name = name
        self.dtype = dtype

    def substitute(self, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        return self

    def __repr__(self) -> str:
        return f"hand_nest({self.name})"


class NestOp(te.ComputeOp):
    """The compute of a stage with a hand-written nest (see the module docstring)."""

    def __init__(self, axes: list[te.IterVar], body: te.Expr, write: NestWriter) -> None:
        super().__init__(axes, body, False, "hand_nest")
        self.write = write


def nest_stage(shape: Sequence[int], dtype: str, name: str, reads: Sequence[te.Tensor],
               write: NestWriter) -> te.Tensor:
    """A stage of `shape` and `dtype` filled by the nest `write` builds from `reads`. A read
    that would be inlined gets a stage of its own first, so that it has a buffer."""
    stored = [te.compute(r.shape, lambda *i, r=r: r[i], name=f"{r.name}_stored")
              if r.op is not None and r.op.inline else r for r in reads]
    body: te.Expr = HandNest(name, dtype)
    for r in stored:
        first = r[tuple(te.Const(0, "int64") for _ in r.shape)]
        body = body + te.cast(dtype, first)
    axes = [te.IterVar(f"{name}{d}_", n, "spatial") for d, n in enumerate(shape)]
    order = {id(r): s for r, s in zip(reads, stored, strict=True)}

    def written(out: Buffer, buffer_of: Callable[[te.Tensor], Buffer],
                scratch: Callable[[str, str, tuple[int, ...]], Buffer]) -> Stmt:
        return write(out, lambda t: buffer_of(order.get(id(t), t)), scratch)

    return te.Tensor(tuple(shape), dtype, name, NestOp(axes, body, written))


def hand_nests(stages: Sequence[te.Tensor]) -> list[te.Tensor]:
    """The stages among `stages` whose nest is written by hand."""
    return [t for t in stages if isinstance(t.op, NestOp)]
