"""Recurrences over time: what a tensor expression cannot say (a value that depends on its own
past), described as data that `lowering/templates/recurrent.py` lowers to a serial time loop.

A `Recurrence` runs, independently for every direction `d` and batch row `b`, a loop over the
time steps that carries state vectors of length `hidden` (an RNN's h, an LSTM's h and c). Each
step is a short program of phases over per-(d, b) vectors, each vector a placeholder of shape
`[n]`:
- `MatVec(out, src, first_row)`: `out[i] = sum_k W[d, first_row + i, k] * src[k]` with `W` the
  recurrent weights (`Recurrence.weights`, an input `[D, rows, hidden]`);
- `Pointwise(index, length, stores)`: for `index` in `[0, length)`, every `(vector, value)` of
  `stores` at once: `vector[index] = value`, a tensor expression that loads vectors (at
  `index`, or `index` plus a constant) and may name the direction (`Recurrence.direction`);
  values read the vectors as they were before the phase. A phase reads a vector it writes
  only at `index`, so a state is updated in place (no two stores may read each other's
  vectors).

The vectors a step sees: `x_row`, the step's row of `proj` (the per-step inputs, a compute
stage `[T, B, D, N]`, or `[B, T, D, N]` when `batch_major`, computed for every step up front:
the input projection as one GEMM); the states (`State.vec`); per-step temporaries (`temps`);
and per-direction rows of inputs (`params`: a placeholder `[n]` standing for row `d` of an
input `[D, n]`).

Sequence lengths (`lens`, an input `[B]` of int32/int64, clamped into `[0, T]`): a reverse
direction runs over each row's own length backwards; a step past a row's length leaves its
states as they were (stores into states are masked) and its output is zero. Outputs
(`outputs`): the sequence of state 0 (`Y`, `[T, D, B, H]` or `[B, T, D, H]`) and the final
states (`[D, B, H]` or `[B, D, H]`), zero for a row of length 0 (as onnxruntime).

The output tensors are computes whose body only lists what the recurrence reads, around a
`Pending` expression that no generic lowering can generate code for: only the recurrent
template lowers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lowering import te


@dataclass(frozen=True, eq=False)
class MatVec:
    out: te.Tensor  # [n] temporary
    src: te.Tensor  # [hidden] state or temporary
    first_row: int


@dataclass(frozen=True, eq=False)
class Pointwise:
    index: te.Var
    length: int
    stores: tuple[tuple[te.Tensor, te.Expr], ...]


@dataclass(frozen=True, eq=False)
class State:
    vec: te.Tensor  # [hidden]
    initial: te.Tensor | None  # input [D, B, hidden] ([B, D, hidden] when batch_major); None: 0


@dataclass(eq=False)
class Recurrence:
    steps: int
    batch: int
    hidden: int
    reverse: tuple[bool, ...]  # per direction
    batch_major: bool  # ONNX layout 1
    proj: te.Tensor  # compute [T, B, D, N] ([B, T, D, N] when batch_major)
    x_row: te.Tensor  # [N]: the step's row of proj
    weights: te.Tensor  # input [D, rows, hidden]
    states: list[State]
    phases: list[MatVec | Pointwise]
    temps: list[te.Tensor] = field(default_factory=list)
    params: list[tuple[te.Tensor, te.Tensor]] = field(default_factory=list)  # (row [n], input [D, n])
    lens: te.Tensor | None = None
    direction: te.Var = field(default_factory=lambda: te.Var("direction"))

    @property
    def directions(self) -> int:
        return len(self.reverse)

    def inputs(self) -> list[te.Tensor]:
        """The placeholders the recurrence reads besides those `proj` reads."""
        out = [self.weights, *(p for _, p in self.params)]
        out += [s.initial for s in self.states if s.initial is not None]
        if self.lens is not None:
            out.append(self.lens)
        return out

    def sequence_shape(self) -> tuple[int, ...]:
        t, b, d, h = self.steps, self.batch, self.directions, self.hidden
        return (b, t, d, h) if self.batch_major else (t, d, b, h)

    def state_shape(self) -> tuple[int, ...]:
        b, d, h = self.batch, self.directions, self.hidden
        return (b, d, h) if self.batch_major else (d, b, h)


class Pending(te.Expr):
    """Stands for the recurrence in its outputs' bodies: code generation rejects it, so a
    recurrence lowered by anything but the recurrent template fails loudly."""

    __slots__ = ("recurrence",)

    def __init__(self, recurrence: Recurrence) -> None:
        self.recurrence = recurrence
        self.dtype = "float32"

    def substitute(self, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        return self

    def __repr__(self) -> str:
        return "recurrence"


class RecurrenceOutput(te.ComputeOp):
    """The compute of one output of a recurrence: `which` is "sequence" (state 0 at every
    step) or the index of a state (its final value)."""

    def __init__(self, axes: list[te.IterVar], body: te.Expr, recurrence: Recurrence,
                 which: str | int) -> None:
        super().__init__(axes, body, False, "recurrence")
        self.recurrence = recurrence
        self.which = which


def _reads(rec: Recurrence) -> te.Expr:
    """An expression loading every tensor the recurrence reads (for dependency analysis)."""
    body: te.Expr = Pending(rec)
    for t in [rec.proj, *rec.inputs()]:
        ld = t[tuple(te.Const(0, "int64") for _ in t.shape)]
        body = body + te.cast("float32", ld)
    return body


def outputs(rec: Recurrence, which: list[str | int]) -> list[te.Tensor]:
    """The tensors of the recurrence's outputs named by `which` ("sequence" or a state's
    index), in that order."""
    out = []
    for w in which:
        shape = rec.sequence_shape() if w == "sequence" else rec.state_shape()
        axes = [te.IterVar(f"r{d}_", n, "spatial") for d, n in enumerate(shape)]
        name = "rec_seq" if w == "sequence" else f"rec_state{w}"
        out.append(te.Tensor(shape, "float32", name, RecurrenceOutput(axes, _reads(rec), rec, w)))
    return out


def recurrence_of(outputs: list[te.Tensor]) -> Recurrence | None:
    """The recurrence all `outputs` belong to, or None."""
    recs = {id(t.op.recurrence): t.op.recurrence for t in outputs
            if isinstance(t.op, RecurrenceOutput)}
    if len(recs) != 1 or not all(isinstance(t.op, RecurrenceOutput) for t in outputs):
        return None
    return next(iter(recs.values()))
