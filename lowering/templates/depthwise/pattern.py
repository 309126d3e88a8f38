"""The depthwise template's pattern: matching a window reduction with no channel reduction
and its frozen analysis (the axes' strides, taps and padding)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lowering import te
from lowering.affine import as_affine, evaluate
from lowering.lower import stages_of

I64 = "int64"
# More runs than this along an axis (strided fills, odd padding conditions): not this template.
MAX_RUNS = 8


def c64(v: int) -> te.Const:
    return te.Const(v, I64)


@dataclass
class Axis:
    """One spatial axis: output o, tap r read source position o*stride + r*dilation + offset;
    `valid[p]` says whether source position p is an input element (else padding, zero);
    input element = p - shift."""

    out: int
    taps: int
    stride: int
    dilation: int
    offset: int
    valid: list[bool]
    shift: int

    def tap_ok(self, o: int, r: int) -> bool:
        p = o * self.stride + r * self.dilation + self.offset
        return 0 <= p < len(self.valid) and self.valid[p]

    def runs(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """(first, end, in-bounds taps) over maximal runs of outputs with the same taps."""
        out: list[tuple[int, int, tuple[int, ...]]] = []
        for o in range(self.out):
            taps = tuple(r for r in range(self.taps) if self.tap_ok(o, r))
            if out and out[-1][2] == taps:
                out[-1] = (out[-1][0], o + 1, taps)
            else:
                out.append((o, o + 1, taps))
        return out


@dataclass
class DepthwisePattern:
    conv: te.Tensor
    epilogue: te.Tensor | None
    x: te.Tensor  # the unpadded input
    chan: te.Expr  # input channel of output channel k (an expression of the k variable)
    weight: te.Expr | None  # None: a pooling window (the source alone)
    combiner: str  # "sum" or "max"
    init: te.Expr
    n: te.Var
    k: te.Var
    oh: te.Var
    ow: te.Var
    r: tuple[te.Var, te.Var]  # the window variables along H and W
    h: Axis
    w: Axis
    # an integer convolution's input value: an element-wise function of its load of x (8-bit
    # x less its zero point, as the quantized operators compose); None: x itself
    x_value: te.Expr | None = None

    @property
    def integer(self) -> bool:
        return self.x_value is not None


def analyze(outputs: Sequence[te.Tensor]) -> DepthwisePattern | None:
    if len(outputs) != 1:
        return None
    stages = stages_of(outputs)
    reductions = [t for t in stages if t.op.reduce_axes]  # type: ignore[union-attr]
    if len(reductions) != 1:
        return None
    p = reductions[0]
    op = p.op
    assert op is not None
    red = op.body
    assert isinstance(red, te.Reduce)
    if red.combiner not in ("sum", "max") or op.inline or len(p.shape) != 4 \
            or len(red.axes) != 2:
        return None
    # float sums and maxima (not the halves), or an int32 sum of integer products
    integer = p.dtype == "int32" and red.combiner == "sum"
    if not integer and outputs[0].dtype not in ("float32", "float64"):
        return None
    body = te.expand_inline(red.body)
    n, k, oh, ow = (ax.var for ax in op.axes)
    wl: te.Expr | None = None
    if isinstance(body, te.Load) and not integer:
        src: te.Expr = body
    elif (red.combiner == "sum" and isinstance(body, te.Binary) and body.op == "mul"
          and (integer or isinstance(body.a, te.Load) and isinstance(body.b, te.Load))):
        src, wl = body.a, body.b
        if any(te.mentions(i, oh) or te.mentions(i, ow) for i in _indices(wl)):
            src, wl = wl, src
        if any(te.mentions(i, v) for i in _indices(wl) for v in (n, oh, ow)):
            return None
    else:
        return None
    x_value = None
    if not isinstance(src, te.Load):  # an integer input less its zero point, unpadded
        x_load = _only_image_load(src)
        if x_load is None:
            return None
        src, x_value = x_load, src
    if len(src.indices) != 4 or src.indices[0] is not n:
        return None
    chan = src.indices[1]
    if any(te.mentions(chan, v) for v in (n, oh, ow, red.axes[0].var, red.axes[1].var)):
        return None
    rvars = [ax.var for ax in red.axes]
    ext = {ax.var: ax.extent for ax in red.axes}
    axes = []
    used: list[te.Var] = []
    for idx, o, size in ((src.indices[2], oh, p.shape[2]), (src.indices[3], ow, p.shape[3])):
        f = as_affine(idx)
        if f is None or f.coefficient(o) <= 0:
            return None
        rs = [r for r in rvars if f.coefficient(r) != 0]
        if len(rs) > 1 or not f.depends_only_linearly(o):
            return None
        r = rs[0] if rs else next((v for v in rvars if ext[v] == 1 and v not in used), None)
        if r is None or r in used or len(f.terms) != (2 if rs else 1):
            return None
        used.append(r)
        axes.append((size, r, f.coefficient(o), f.coefficient(r) or 1, f.const))
    source = _source(src.tensor, te.reduce_identity(red.combiner, src.tensor.dtype).value,
                     integer)
    if source is None:
        return None
    x, valid_h, valid_w, shift_h, shift_w, padded_value = source
    x_value = x_value if x_value is not None else padded_value
    if integer != (x_value is not None):
        return None
    epilogue = _epilogue(stages, p, outputs[0])
    if epilogue is False:
        return None
    others = [t for t in stages if t is not p and t is not epilogue and t is not src.tensor
              and not t.op.inline]  # type: ignore[union-attr]
    if others or (src.tensor.op is not None and any(src.tensor is o for o in outputs)):
        return None
    h = Axis(axes[0][0], ext[axes[0][1]], axes[0][2], axes[0][3], axes[0][4], valid_h, shift_h)
    w = Axis(axes[1][0], ext[axes[1][1]], axes[1][2], axes[1][3], axes[1][4], valid_w, shift_w)
    for a in (h, w):
        if len(a.runs()) > MAX_RUNS:
            return None
    return DepthwisePattern(p, epilogue or None, x, chan, wl, red.combiner, red.init, n, k,
                            oh, ow, (axes[0][1], axes[1][1]), h, w, x_value)


def _indices(e: te.Expr) -> list[te.Expr]:
    """The indices of every load in `e`."""
    out: list[te.Expr] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, te.Load):
            out += x.indices
        stack.extend(te.children(x))
    return out


def _only_image_load(e: te.Expr) -> te.Load | None:
    """The one load of a 4-D input in `e`, an element-wise function of it (other loads read
    single elements, a zero point), or None."""
    loads: list[te.Load] = []
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, te.Load):
            loads.append(x)
        stack.extend(te.children(x))
    images = [ld for ld in loads if ld.tensor.op is None and len(ld.tensor.shape) == 4]
    if len(images) != 1 or any(ld is not images[0] and ld.tensor.size != 1 for ld in loads):
        return None
    return images[0]


def _unclamped(e: te.Expr) -> te.Expr:
    """A padded copy's source index without the clamp that keeps its load in bounds (the
    padding conditions, checked separately, are what decide which positions are read)."""
    while isinstance(e, te.Binary) and e.op in ("min", "max") and isinstance(e.b, te.Const):
        e = e.a
    return e


def _source(t: te.Tensor, pad: float, integer: bool = False
            ) -> tuple[te.Tensor, list[bool], list[bool], int, int, te.Expr | None] | None:
    """The input a window source reads and, per spatial axis, which source positions hold an
    input element (the rest are padding, which must be `pad`, the combiner's identity, for
    the taps on it to be dropped) and the shift from source to input position; for an
    `integer` product, the padded value as a function of its load of the input."""
    if t.op is None:
        return t, [True] * t.shape[2], [True] * t.shape[3], 0, 0, None
    if t.op.reduce_axes or len(t.shape) != 4:
        return None
    pn, pc, ph, pw = (ax.var for ax in t.op.axes)
    body = te.expand_inline(t.op.body)
    conds: list[te.Expr] = []
    if isinstance(body, te.Select):
        if not (isinstance(body.f, te.Const) and body.f.value == pad):
            return None
        conds = te.conjuncts(body.cond)
        body = body.t
    value = None
    if integer and not isinstance(body, te.Load):
        load = _only_image_load(body)
        if load is None:
            return None
        value, body = body, load
    if not (isinstance(body, te.Load) and body.tensor.op is None and len(body.indices) == 4):
        return None
    x = body.tensor
    if body.indices[0] is not pn or body.indices[1] is not pc or x.shape[:2] != t.shape[:2]:
        return None
    valid: list[list[bool]] = []
    shifts = []
    for d, (var, idx) in enumerate(((ph, body.indices[2]), (pw, body.indices[3]))):
        f = as_affine(_unclamped(idx))
        if f is None or f.coefficient(var) != 1 or len(f.terms) != 1:
            return None
        mine = [c for c in conds if te.mentions(c, var)]
        if any(te.mentions(c, v) for c in mine for v in (pn, pc, ph if d else pw)):
            return None
        try:
            ok = [all(bool(evaluate(c, {var: q})) for c in mine) for q in range(t.shape[2 + d])]
        except (ValueError, KeyError):
            return None
        if any(o and not 0 <= q + f.const < x.shape[2 + d] for q, o in enumerate(ok)):
            return None
        valid.append(ok)
        shifts.append(-f.const)
    if any(not any(te.mentions(c, v) for v in (ph, pw)) for c in conds):
        return None
    return x, valid[0], valid[1], shifts[0], shifts[1], value


def _epilogue(stages: list[te.Tensor], p: te.Tensor, out: te.Tensor) -> te.Tensor | None | bool:
    """The output stage applied to the sum element-wise (None: the sum is the output; False:
    something else reads the sum)."""
    if out is p:
        return None
    if out.shape != p.shape or out.op is None or out.op.reduce_axes:
        return False
    readers = [t for t in stages if t is not p and any(
        d is p for d in te.tensors_read(t.op.body))]  # type: ignore[union-attr]
    if readers != [out]:
        return False
    axes = [ax.var for ax in out.op.axes]
    body = te.expand_inline(out.op.body)
    stack = [body]
    while stack:
        e = stack.pop()
        if isinstance(e, te.Load) and e.tensor is p and any(
                i is not v for i, v in zip(e.indices, axes, strict=True)):
            return False
        if isinstance(e, te.Load) and e.tensor.op is not None and e.tensor is not p:
            return False
        stack.extend(te.children(e))
    return out
