"""The integer GEMM pattern: an int32 sum of products of two operands, each an 8-bit tensor less
its zero point (the activations, possibly zero-padded by a convolution) or a compile-time
constant (the weights), plus an element-wise epilogue (a requantization). This is what
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv compose to (lowering/ops/quant/).

The analysis finds the batch, M (broadcast rows), N (vector columns, the output's innermost
axes) and K axis groups as the float GEMM pattern does, and for each operand its int32 value
with any padding stage inlined:
  - a runtime operand is `x - z` (or 0 where a convolution pads) with `z` known at compile
    time, so it can be stored shifted into an instruction's operand type (see `IntDot`):
    `x + off` for an 8-bit type (padding `z + off`), `x - z` itself for a 16-bit one;
  - a constant operand (weights less their zero points) is evaluated here with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowering import te
from lowering.templates.gemm.pattern import MIN_MACS, Group, depends_on, loads_of, sum_product


@dataclass
class Operand:
    value: te.Expr  # the int32 value, in the product's axis variables (pre stages inlined)
    source: te.Tensor | None  # the runtime 8-bit input it reads (None: constant)
    zero: int  # the runtime input's zero point z (value = x - z); 0 for a constant
    # a convolution's padding stage the product reads (`x - z` inside, 0 outside), and that
    # load: the kernel stores the stage shifted into the instruction's type once, so that
    # packing reads it without bounds tests
    stage: te.Load | None = None


@dataclass
class IntGemmPattern:
    product: te.Tensor
    epilogue: te.Tensor | None  # the output stage reading the product element-wise
    rows: Operand  # carries the M axes (broadcast)
    cols: Operand  # carries the N axes (vectors)
    batch: Group
    m: Group
    n: Group
    k: Group
    init: te.Expr  # the reduction's initial value (a bias), an expression of output axes

    @property
    def macs(self) -> int:
        return self.batch.size * self.m.size * self.n.size * self.k.size


def analyze(outputs: Sequence[te.Tensor], consts: dict[int, np.ndarray]
            ) -> IntGemmPattern | None:
    """The pattern of `outputs`, or None. `consts` maps id(placeholder) to its value for
    the inputs known at compile time."""
    found = sum_product(outputs, "int32")
    if found is None:
        return None
    stages, p, red = found
    after = [t for t in stages if t is not p and p in depends_on(t)]
    pre = [t for t in stages if t is not p and t not in after]
    if any(t.op is None or isinstance(t.op.body, te.Reduce) for t in pre):
        return None
    epilogue = None
    if after:
        out = outputs[0]
        if after != [out] or out.op.inline or out.shape != p.shape:  # type: ignore[union-attr]
            return None
        body = te.expand_inline(out.op.body)  # type: ignore[union-attr]
        if isinstance(body, te.Reduce) or any(t in pre for t in te.tensors_read(body)):
            return None
        axes = [ax.var for ax in out.op.axes]  # type: ignore[union-attr]
        for ld in loads_of(body, p):
            if any(i is not v for i, v in zip(ld.indices, axes, strict=True)):
                return None
        epilogue = out
    raw = te.expand_inline(red.body)
    if not (isinstance(raw, te.Binary) and raw.op == "mul"):
        return None
    ops = [_operand(_inline_stages(e, pre), consts) for e in (raw.a, raw.b)]
    if ops[0] is None or ops[1] is None:
        return None
    for op, e in zip(ops, (raw.a, raw.b), strict=True):
        if isinstance(e, te.Load) and e.tensor in pre and op.source is not None:
            op.stage = e
    spatial = list(p.op.axes)  # type: ignore[union-attr]
    role = []
    for ax in spatial:
        ua, ub = te.mentions(ops[0].value, ax.var), te.mentions(ops[1].value, ax.var)
        role.append(0 if ua and not ub else 1 if ub and not ua else -1)
    if not role or role[-1] < 0:
        return None
    n_role = role[-1]
    i = len(role)
    while i > 0 and role[i - 1] == n_role:
        i -= 1
    j = i
    while j > 0 and role[j - 1] == 1 - n_role:
        j -= 1
    if j == i:
        return None  # no M axes: a matrix-vector product, memory-bound
    rows, cols = ops[1 - n_role], ops[n_role]
    for rv in red.axes:
        if rv.extent != 1 and not (te.mentions(rows.value, rv.var)
                                   and te.mentions(cols.value, rv.var)):
            return None
    batch = spatial[:j]
    for op in (rows, cols):
        if op.source is None and any(te.mentions(op.value, a.var) for a in batch):
            return None  # constant operands are packed once, not per batch index

    def group(axes: Sequence[te.IterVar]) -> Group:
        return Group([a.var for a in axes], [a.extent for a in axes])

    pat = IntGemmPattern(p, epilogue, rows, cols, group(batch), group(spatial[j:i]),
                         group(spatial[i:]), group(red.axes), red.init)
    if pat.m.size * pat.n.size * pat.k.size < MIN_MACS:
        return None
    return pat


def _inline_stages(e: te.Expr, stages: Sequence[te.Tensor]) -> te.Expr:
    """`e` with every load of one of `stages` (element-wise) replaced by its body."""
    if isinstance(e, te.Load) and e.tensor in stages:
        op = e.tensor.op
        assert op is not None
        vmap = {ax.var: i for ax, i in zip(op.axes, e.indices, strict=True)}
        return _inline_stages(te.substitute(te.expand_inline(op.body), vmap), stages)
    return te.map_children(e, lambda c: _inline_stages(c, stages))


def _operand(e: te.Expr, consts: dict[int, np.ndarray]) -> Operand | None:
    """An operand's form: all of it constant, or `x - z` of one 8-bit runtime input x (with
    a constant z), possibly under a padding select whose other side is 0."""
    tensors = te.tensors_read(e)
    runtime = [t for t in tensors if id(t) not in consts]
    if not runtime:
        return Operand(e, None, 0)
    if len(set(map(id, runtime))) != 1 or runtime[0].op is not None or \
            runtime[0].dtype not in ("int8", "uint8"):
        return None
    x = runtime[0]
    core = e
    if isinstance(core, te.Select):
        if not (isinstance(core.f, te.Const) and core.f.value == 0) or \
                any(t is x for t in te.tensors_read(core.cond)):
            return None
        core = core.t
    z: te.Expr = te.Const(0, "int32")
    if isinstance(core, te.Binary) and core.op == "sub":
        core, z = core.a, core.b
    if not (isinstance(core, te.Cast) and core.dtype == "int32"
            and isinstance(core.a, te.Load) and core.a.tensor is x):
        return None
    zv = eval_const(z, {}, consts)
    if zv is None or np.ndim(zv) != 0:
        return None
    return Operand(e, x, int(zv))


def eval_const(e: te.Expr, env: dict[te.Var, np.ndarray], consts: dict[int, np.ndarray]
               ) -> np.ndarray | None:
    """The integer value of `e` with its variables bound to (broadcasting) index arrays and its
    loads reading compile-time constants; None when it reads anything else."""
    try:
        return np.asarray(_eval(e, env, consts))
    except (KeyError, ValueError):
        return None


_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
    "mod": np.mod, "min": np.minimum, "max": np.maximum, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or,
}


def _eval(e: te.Expr, env: dict[te.Var, np.ndarray], consts: dict[int, np.ndarray]):
    if isinstance(e, te.Var):
        return env[e]
    if isinstance(e, te.Const):
        if e.dtype.startswith("float"):
            raise ValueError("a float constant")
        return np.int64(e.value)
    if isinstance(e, te.Load):
        arr = consts[id(e.tensor)]
        if arr.dtype.kind not in "iub":
            raise ValueError("a non-integer constant")
        idx = tuple(np.asarray(_eval(i, env, consts), dtype=np.int64) for i in e.indices)
        return np.asarray(arr, dtype=np.int64).reshape(e.tensor.shape)[idx] if idx else \
            np.int64(np.asarray(arr).reshape(()))
    if isinstance(e, te.Cast):
        if e.dtype not in ("int32", "int64", "int16", "int8", "uint8"):
            raise ValueError(e.dtype)
        return _eval(e.a, env, consts)
    if isinstance(e, te.Binary) and e.op in _OPS:
        return _OPS[e.op](_eval(e.a, env, consts), _eval(e.b, env, consts))
    if isinstance(e, te.Select):
        return np.where(_eval(e.cond, env, consts), _eval(e.t, env, consts),
                        _eval(e.f, env, consts))
    raise ValueError(type(e).__name__)
