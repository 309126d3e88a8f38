"""What LSTM, GRU and RNN share: their inputs and attributes checked, the activation functions,
the input projection, and the `Recurrence` (lowering/recurrence.py) with its outputs.

Inputs (ONNX order): X, W, R, B, sequence_lens, initial_h (LSTM: then initial_c, P). W, R and B
may be constants or computed; sequence_lens may be either too. Attributes: direction, hidden_size,
layout, clip, activations (with activation_alpha/beta), linear_before_reset (GRU), input_forget
(LSTM). float32 only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lowering import te
from lowering.ops import OpContext
from lowering.recurrence import MatVec, Pointwise, Recurrence, State, outputs

F32 = "float32"
Act = Callable[[te.Expr], te.Expr]

# ONNX's activation functions for recurrent operators, with onnxruntime's alpha and beta when
# a model gives none (measured: onnxruntime 1.32): (uses alpha, uses beta, default alpha, beta)
ACTIVATION_PARAMS: dict[str, tuple[bool, bool, float, float]] = {
    "Relu": (False, False, 0.0, 0.0),
    "Tanh": (False, False, 0.0, 0.0),
    "Sigmoid": (False, False, 0.0, 0.0),
    "Affine": (True, True, 0.0, 0.0),
    "LeakyRelu": (True, False, 0.01, 0.0),
    "ThresholdedRelu": (True, False, 0.0, 0.0),
    "ScaledTanh": (True, True, 0.0, 0.0),
    "HardSigmoid": (True, True, 0.2, 0.5),
    "Elu": (True, False, 1.0, 0.0),
    "Softsign": (False, False, 0.0, 0.0),
    "Softplus": (False, False, 0.0, 0.0),
}


def _f(v: float) -> te.Const:
    return te.Const(v, F32)


def activation(name: str, alpha: float, beta: float) -> Act:
    a, b = _f(alpha), _f(beta)
    fns: dict[str, Act] = {
        "Relu": lambda x: te.maximum(x, _f(0.0)),
        "Tanh": lambda x: te.unary("tanh", x),
        "Sigmoid": lambda x: te.unary("sigmoid", x),
        "Affine": lambda x: a * x + b,
        "LeakyRelu": lambda x: te.select(te.ge(x, _f(0.0)), x, a * x),
        "ThresholdedRelu": lambda x: te.select(te.gt(x, a), x, _f(0.0)),
        "ScaledTanh": lambda x: a * te.unary("tanh", b * x),
        "HardSigmoid": lambda x: te.minimum(te.maximum(a * x + b, _f(0.0)), _f(1.0)),
        "Elu": lambda x: te.select(te.ge(x, _f(0.0)), x, a * (te.unary("exp", x) - 1.0)),
        "Softsign": lambda x: x / (te.unary("abs", x) + 1.0),
        "Softplus": lambda x: te.unary("softplus", x),
    }
    return fns[name]


@dataclass
class Spec:
    """A recurrent node's inputs and attributes, checked."""

    x: te.Tensor
    w: te.Tensor
    r: te.Tensor
    b: te.Tensor | None
    lens: te.Tensor | None
    initial: list[te.Tensor | None]  # initial_h (and initial_c)
    steps: int
    batch: int
    hidden: int
    reverse: tuple[bool, ...]
    batch_major: bool
    clip: float | None
    acts: list[list[Act]]  # per direction, per activation slot
    direction: te.Var

    @property
    def directions(self) -> int:
        return len(self.reverse)

    def act(self, slot: int) -> Act:
        """Activation `slot` of the node (f, g, h), per direction when they differ."""
        fwd = self.acts[0][slot]
        if self.directions == 1 or self.acts[1][slot] is fwd:
            return fwd
        rev = self.acts[1][slot]
        d = self.direction
        return lambda x: te.select(te.eq(d, te.Const(1, "int64")), rev(x), fwd(x))

    def gate(self, slot: int, x: te.Expr) -> te.Expr:
        """Activation `slot` of `x`, clipped first when the node clips."""
        if self.clip is not None:
            x = te.minimum(te.maximum(x, _f(-self.clip)), _f(self.clip))
        return self.act(slot)(x)


def parse(ctx: OpContext, gates: int, default_acts: tuple[str, ...],
          n_initial: int = 1) -> Spec:
    op = ctx.op_type
    for i in range(len(ctx.inputs)):
        t = ctx.inputs[i]
        if t is None:
            continue
        # (float16/bfloat16 inputs reach definitions as float32 views, inline casts of them)
        dtype = te.tensors_read(t.op.body)[0].dtype if t.op is not None else t.dtype
        if i != 4 and dtype != F32:
            raise ctx.error(f"{op} on {dtype} data is not supported (float32 only)")
    x, w, r = ctx.input(0), ctx.input(1), ctx.input(2)
    layout = int(ctx.attr("layout", 0))
    if layout not in (0, 1):
        raise ctx.error(f"layout must be 0 or 1, got {layout}")
    if len(x.shape) != 3 or len(w.shape) != 3 or len(r.shape) != 3:
        raise ctx.error(f"X, W and R must have rank 3, got {list(x.shape)}, {list(w.shape)}, "
                        f"{list(r.shape)}")
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
    direction = ctx.attr("direction", "forward")
    if isinstance(direction, bytes):
        direction = direction.decode()
    reverse = {"forward": (False,), "reverse": (True,),
               "bidirectional": (False, True)}.get(direction)
    if reverse is None:
        raise ctx.error(f"direction must be forward, reverse or bidirectional, got '{direction}'")
    nd = len(reverse)
    hidden = r.shape[2]
    if ctx.attr("hidden_size") is not None and int(ctx.attr("hidden_size")) != hidden:
        raise ctx.error(f"hidden_size={ctx.attr('hidden_size')} but R is {list(r.shape)}")
    n = gates * hidden
    if tuple(w.shape) != (nd, n, x.shape[2]) or tuple(r.shape) != (nd, n, hidden):
        raise ctx.error(f"W must be {[nd, n, x.shape[2]]} and R {[nd, n, hidden]} for "
                        f"direction {direction} and hidden size {hidden}, got {list(w.shape)} "
                        f"and {list(r.shape)}")
    b = ctx.inputs[3] if ctx.has_input(3) else None
    if b is not None and tuple(b.shape) != (nd, 2 * n):
        raise ctx.error(f"B must be {[nd, 2 * n]}, got {list(b.shape)}")
    lens = ctx.inputs[4] if ctx.has_input(4) else None
    if lens is not None and (lens.dtype not in ("int32", "int64")
                             or tuple(lens.shape) != (batch,)):
        raise ctx.error(f"sequence_lens must be int32 of shape [{batch}], got "
                        f"{lens.dtype}{list(lens.shape)}")
    state_shape = (batch, nd, hidden) if layout else (nd, batch, hidden)
    initial: list[te.Tensor | None] = []
    for i in range(5, 5 + n_initial):
        t = ctx.inputs[i] if ctx.has_input(i) else None
        if t is not None and tuple(t.shape) != state_shape:
            raise ctx.error(f"input {i} (initial state) must be {list(state_shape)}, got "
                            f"{list(t.shape)}")
        initial.append(t)
    clip = ctx.attr("clip")
    if clip is not None:
        clip = float(clip)
        if not clip > 0:
            raise ctx.error(f"clip must be positive, got {clip}")
    return Spec(x, w, r, b, lens, initial, steps, batch, hidden, reverse, bool(layout), clip,
                _activations(ctx, default_acts, nd), te.Var("direction"))


def _activations(ctx: OpContext, defaults: tuple[str, ...], nd: int) -> list[list[Act]]:
    names = [a.decode() if isinstance(a, bytes) else str(a)
             for a in (ctx.attr("activations") or [])] or list(defaults) * nd
    if len(names) != len(defaults) * nd:
        raise ctx.error(f"{len(names)} activations given, {ctx.op_type} with {nd} direction(s) "
                        f"takes {len(defaults) * nd}")
    alphas = [float(a) for a in (ctx.attr("activation_alpha") or [])]
    betas = [float(b) for b in (ctx.attr("activation_beta") or [])]
    known = {k.lower(): k for k in ACTIVATION_PARAMS}
    out: list[list[Act]] = []
    cache: dict[tuple[str, float, float], Act] = {}
    for i, raw in enumerate(names):
        name = known.get(raw.lower())
        if name is None:
            raise ctx.error(f"activation '{raw}' is not an activation of {ctx.op_type}",
                            hint=", ".join(ACTIVATION_PARAMS))
        takes_a, takes_b, alpha, beta = ACTIVATION_PARAMS[name]
        # each function that has an alpha (beta) takes the next one given, in order
        if takes_a and alphas:
            alpha = alphas.pop(0)
        if takes_b and betas:
            beta = betas.pop(0)
        key = (name, alpha, beta)
        if key not in cache:
            cache[key] = activation(name, alpha, beta)
        if i % len(defaults) == 0:
            out.append([])
        out[-1].append(cache[key])
    return out


def projection(spec: Spec, bias: Callable[[te.Expr, te.Expr], te.Expr] | None) -> te.Tensor:
    """Every step's input projection `X·Wᵀ (+ bias(d, n))`, `[T, B, D, N]` (`[B, T, D, N]`
    batch-major): one GEMM over all steps."""
    x, w = spec.x, spec.w
    r0, r1, size = x.shape
    nd, n, _ = w.shape
    k = te.reduce_axis(size, "k")

    def prod_body(a: te.Expr, b: te.Expr, d: te.Expr, g: te.Expr) -> te.Expr:
        return te.reduce("sum", x[a, b, k.var] * w[d, g, k.var], [k])

    prod = te.compute((r0, r1, nd, n), prod_body, name="rnn_proj")
    if bias is None:
        return prod
    return te.compute((r0, r1, nd, n), lambda a, b, d, g: prod[a, b, d, g] + bias(d, g),
                      name="rnn_proj_bias")


def vector(n: int, name: str) -> te.Tensor:
    """A per-(direction, batch row) vector of a recurrence step."""
    return te.placeholder((n,), F32, name)


def build(ctx: OpContext, spec: Spec, proj: te.Tensor, x_row: te.Tensor, states: list[te.Tensor],
          phases: list[MatVec | Pointwise], temps: list[te.Tensor],
          params: list[tuple[te.Tensor, te.Tensor]] | None = None) -> list[te.Tensor]:
    """The recurrence and the node's outputs (Y, Y_h[, Y_c]) as tensors."""
    rec = Recurrence(
        steps=spec.steps, batch=spec.batch, hidden=spec.hidden, reverse=spec.reverse,
        batch_major=spec.batch_major, proj=proj, x_row=x_row, weights=spec.r,
        states=[State(v, init) for v, init in zip(states, spec.initial, strict=True)],
        phases=phases, temps=temps, params=params or [], lens=spec.lens,
        direction=spec.direction,
    )
    which: list[str | int] = ["sequence", *range(len(states))]
    return outputs(rec, which[:len(ctx.out_shapes)])
