"""Depthwise 2-D convolution and 2-D pooling template: a window reduction with no channel
reduction, NCHW.

Matched from the tensor expressions: one reduction over exactly two window axes whose body is
`src[n, chan(k), oh*s0 + r0*d0 + c0, ow*s1 + r1*d1 + c1] * w[k, ..., r0, r1]` (a sum: depthwise
convolution) or `src[..]` alone (a sum: average pooling; a max: max pooling), with `src` the
input itself or a copy of it padded with the combiner's identity (a `select` on conditions of
the padded positions only), plus at most one element-wise epilogue stage reading the result at
its own index (an average pool's division by its count). Strides, dilations, pads and channel
multipliers all follow from those index expressions.

The kernel reads the unpadded input directly. Output rows and columns are cut into runs that
see the same set of in-bounds taps (computed from the padding condition, per axis): the
interior run has every tap and is vectorised over `ow` with all kh x kw taps unrolled and no
conditions; the border runs (a few rows/columns) drop their out-of-bounds taps at compile
time. Taps are summed in the reduction's own order (init, then r0, r1), so results equal the
default schedule's; maxima, exactly associative, combine as a balanced tree (same results).
Knob `rows`: output rows computed per interior iteration (they share input rows).

At stride 1 the knob `plane` offers two forms that run the window as ONE vector loop over a
plane, so short rows (7x7, 14x14) no longer pay a loop and two scalar borders per row:
`padded_kernel` copies each plane into a scratch with its padding and loops in the padded row
pitch; `masked_kernel` (small planes whose input and output rows share a pitch) loops over the
outputs with each tap masked by the output's row and column.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lowering import loop_ir, te
from lowering.affine import as_affine, evaluate
from lowering.default_schedule import PARALLEL_MIN_WORK
from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Seq, Stmt, Store
from lowering.lower import combine, flat_index, stages_of
from lowering.machine import Target
from lowering.search.cost_model import arithmetic_cost, worth_parallel
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace

I64 = "int64"
# More runs than this along an axis (strided fills, odd padding conditions): not this template.
MAX_RUNS = 8
# Pools with narrower outputs do not take the row form: its short interior runs between scalar
# borders lost to the default schedule's padded copy there (3x3/2 max pools, one core: 16 and
# 32 wide 1.4-1.9x slower, 56 and 64 wide 2.2-2.6x faster). They take rows of whole vectors or
# the split planes (_narrow_pool_form; 3x3/2 over 32x32 planes: 0.35x the default's time).
POOL_MIN_WIDTH = 48
# cycles of loop overhead per loop over a run of outputs (set-up, remainder, scalar borders)
PIECE_CYCLES = 20
# An integer window's tap in the row form, against a float one's load and FMA: the 8-bit load
# widened, its zero point subtracted, an int32 multiply and add, per use (the plane forms
# convert each element once, in their copy). MobileNetV2 int8's depthwise layers on one Zen 3
# core ran 2.3-5.5x the row form's float estimate at stride 1 and 4.5x at stride 2.
INTEGER_ROW_TAP = 4.0
# the forms of pools narrower than POOL_MIN_WIDTH (_narrow_pool_form)
NARROW_FORMS = ("row_vectors", "split")
# cycles per vector of a NaN-aware maximum (te's max: llvm.maximumnum, six instructions on
# AVX-512; the narrow pools' cost)
MAX_CYCLES = 3
# planes per parallel iteration of the padded-plane form (they share one scratch slot)
PLANES_PER_CHUNK = 8
# planes up to this many outputs may run as one masked vector loop (LLVM unrolls it fully, so
# the masks become constants)
MASKED_MAX_PLANE = 256
# The padded-plane form is offered for output rows of at most this many vectors.
PADDED_MAX_ROW_VECTORS = 2
# An epilogue dearer than this many instructions per element (a swish's sigmoid, a GELU) runs
# as its own vector loop over each finished plane instead of inside the window's loops, whose
# scalar borders and remainders would pay it one element at a time.
PLANE_EPILOGUE_COST = 8.0
# products per FMA chain of a float convolution's window (_chained_sum): 3x3 in two chains,
# 5x5 in five
TAPS_PER_CHAIN = 5


def _c(v: int) -> te.Const:
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


class DepthwiseTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> DepthwiseSpace | None:
        pat = analyze(outputs)
        if pat is None or not any(pat.x is t for t in inputs):
            return None
        if pat.weight is None and pat.w.out < POOL_MIN_WIDTH and \
                _narrow_pool_form(pat, target.vector_lanes_f32) is None:
            return None
        return DepthwiseSpace(inputs, outputs, consts, target, pat)


class DepthwiseSpace(ScheduleSpace):
    kind = "depthwise"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target,
                 pat: DepthwisePattern) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.pat = pat
        self.knobs = [Knob("rows", (2, 1, 4))]  # output rows per interior iteration
        # the masked plane form fills padding with the combiner's identity, which an integer
        # input less its zero point does not have; the padded form copies an integer input's
        # values (less its zero point) and pads them with zeros
        if pat.weight is None and pat.w.out < POOL_MIN_WIDTH:  # a narrow pool: one form
            self.knobs.append(Knob("plane", (_narrow_pool_form(pat, target.vector_lanes_f32),)))
        elif _padded_plane_ok(pat, target.vector_lanes_f32, target.masked_vectors):
            forms = ("rows", "padded", "masked") if not pat.integer and _masked_plane_ok(pat) \
                else ("rows", "padded")
            self.knobs.append(Knob("plane", forms))
        elif pat.integer and _split_ok(pat):  # strided: the copy split by stride phase
            self.knobs.append(Knob("plane", ("rows", "split")))

    def canonical(self, config: Config) -> Config:
        """The split form has no rows per iteration to choose."""
        return {**config, "rows": 2} if config.get("plane") == "split" else config

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        form = config.get("plane", "rows")
        # the narrow pools' forms (whose cost counts their maxima) run in parallel from a time
        # worth sharing; the others from PARALLEL_MIN_WORK taps
        dear = form in NARROW_FORMS and worth_parallel(self.cost(config),
                                                       self.target.machine.cores)
        b = _Builder(self, int(config["rows"]), name, dear)  # type: ignore[call-overload]
        return BuiltKernel(b.padded_kernel() if form == "padded" else
                           b.masked_kernel() if form == "masked" else
                           b.row_vectors_kernel() if form == "row_vectors" else
                           b.split_kernel(self.target.vector_lanes_f32) if form == "split" else
                           b.kernel())

    def cost(self, config: Config) -> float:
        """Vector loads dominate: kh*kw per output vector, shared between rows of a block, at
        the machine's loads per cycle; each loop over a run of a row (or over a plane's stage)
        costs PIECE_CYCLES besides, which is what short rows pay for most, and the row form's
        outputs outside whole vectors cost a load per tap each (_scalar_taps). The padded-plane
        form copies the plane into its padding, computes one vector loop over the plane in the
        padded row pitch and copies the output rows out."""
        pat, m = self.pat, self.target.machine
        lanes = self.target.vector_lanes_f32
        loads = m.loads_per_cycle
        taps = pat.h.taps * pat.w.taps
        planes = math.prod(pat.conv.shape[:2])
        if config.get("plane") == "masked":  # a load, a select and an FMA per tap and vector
            vectors = math.ceil(pat.h.out * pat.w.out / lanes)
            return planes * (vectors * taps * 1.5 + PIECE_CYCLES) / m.hz
        # the narrow pools' forms: a load and a combine per tap and vector, a NaN-aware
        # maximum being MAX_CYCLES (llvm.maximumnum's sign and NaN fix-ups around the max)
        per_tap = 1 + (MAX_CYCLES if pat.combiner == "max" else 1)
        if config.get("plane") == "row_vectors":  # per row of whole vectors
            vectors = pat.h.out * math.ceil(pat.w.out / lanes)
            return planes * (vectors * taps * per_tap + pat.h.out * PIECE_CYCLES) / m.hz
        if config.get("plane") == "split":  # fill, copy, window, copy out
            (_, _, hq), (_, _, wq) = _split_axis(pat.h, pat.x.shape[2]), \
                _split_axis(pat.w, pat.x.shape[3])
            virtual = (pat.h.out - 1) * wq + pat.w.out
            per_plane = (pat.h.stride * pat.w.stride * hq * wq + pat.x.shape[2] * pat.x.shape[3]
                         ) / lanes + math.ceil(virtual / lanes) * taps * per_tap \
                + pat.h.out * (math.ceil(pat.w.out / lanes) + PIECE_CYCLES) + 3 * PIECE_CYCLES
            return planes * per_plane / m.hz
        if config.get("plane") == "padded":
            hp, wp = len(pat.h.valid), len(pat.w.valid)
            virtual = (pat.h.out - 1) * wp + pat.w.out
            per_plane = (hp * wp / lanes + math.ceil(virtual / lanes) * max(taps / loads, 1)
                         + pat.h.out * (math.ceil(pat.w.out / lanes) + PIECE_CYCLES)
                         + 3 * PIECE_CYCLES)
            return planes * per_plane / m.hz
        rows = int(config["rows"])  # type: ignore[call-overload]
        taps_h = pat.h.taps
        loads_per_row = (taps_h + (rows - 1) * min(taps_h, pat.h.stride)) * pat.w.taps / rows
        vectors = math.prod(pat.conv.shape) / lanes
        w_runs = pat.w.runs()
        pieces = planes * pat.h.out * len(w_runs)
        # (an integer tap along a strided row also gathers its 8-bit elements: stride times
        # the loads and shuffles)
        per_tap = INTEGER_ROW_TAP * pat.w.stride if pat.integer else 1.0
        return (vectors * max(loads_per_row, taps) * per_tap / loads
                + pieces * PIECE_CYCLES
                + planes * pat.h.out * self._scalar_taps(w_runs, lanes) * per_tap / loads) / m.hz

    def _scalar_taps(self, w_runs: list[tuple[int, int, tuple[int, ...]]], lanes: int) -> int:
        """Taps a row of the row form computes one element at a time: the border runs', and,
        without masked tails, the interior run's last partial vector (a 112-wide 3x3 row on 8
        lanes: 6 of its 110 interior outputs, 54 taps beside its 13 vectors' 117)."""
        pat = self.pat
        scalar = 0
        for first, end, taps_w in w_runs:
            n = end - first
            if len(taps_w) == pat.w.taps and n > 1:
                n = 0 if self.target.masked_vectors and pat.w.stride == 1 else n % lanes
            scalar += n * len(taps_w) * pat.h.taps
        return scalar


class _Builder:
    def __init__(self, space: DepthwiseSpace, rows: int, name: str, dear: bool = False) -> None:
        self.pat = space.pat
        self.rows = rows
        self.name = name
        self.dear = dear  # enough estimated time to share among the cores (worth_parallel)
        self.plane_epilogue = _plane_epilogue(space.pat)
        self.masked_tail = space.target.masked_vectors
        self.buffers: list[Buffer] = []
        self.buf: dict[int, Buffer] = {}
        for t in space.inputs:
            self._add(t, "input")
        for t in space.outputs:
            self._add(t, "output")

    def _add(self, t: te.Tensor, role: str) -> None:
        b = Buffer(f"{role[0]}{len(self.buffers)}", t.dtype, t.shape, role)
        self.buf[id(t)] = b
        self.buffers.append(b)

    def kernel(self) -> Kernel:
        pat = self.pat
        nb, kb = pat.conv.shape[:2]
        plane = te.Var("plane")
        self.env: dict[te.Var, te.Expr] = {pat.n: plane // kb, pat.k: plane % kb}
        h_runs = pat.h.runs()
        w_runs = pat.w.runs()
        body = Seq([self._h_run(a, b, taps, w_runs) for a, b, taps in h_runs]
                   + self._epilogue_pass())
        return Kernel(self.name, self.buffers,
                      [For(plane, _c(nb * kb), self._loop_kind(nb * kb), body)])

    def _loop_kind(self, iterations: int) -> str:
        """The outer loop's kind: parallel over at least two iterations of enough work (taps
        over the outputs, or an estimated time worth sharing: a 3x3 max pool of 4096 outputs
        is a few microseconds, the maxima being several instructions each)."""
        pat = self.pat
        work = math.prod(pat.conv.shape) * pat.h.taps * pat.w.taps
        enough = work >= PARALLEL_MIN_WORK or self.dear
        return "parallel" if iterations >= 2 and enough else "serial"

    def _identity(self) -> te.Const:
        """The combiner's identity: what a tap outside the input contributes."""
        return te.reduce_identity(self.pat.combiner, self.pat.x.dtype)

    def _copy_padding(self) -> te.Const:
        """What the plane forms' copies hold outside the input: the identity, or for an
        integer window zero (its values less the zero point), in float32 where the window's
        sums are exact in it (_exact_in_float), else in the values' own type."""
        value = self.pat.x_value
        if value is None:
            return self._identity()
        return te.const(0, "float32" if _exact_in_float(self.pat) else value.dtype)

    def _copied(self, load: te.Expr) -> te.Expr:
        """What the plane forms' copies hold for the input element `load`."""
        value = self.pat.x_value
        if value is None:
            return load
        v = self._lower(_replace_load(value, self.pat.x, load))
        return te.cast("float32", v) if _exact_in_float(self.pat) else v

    def _h_run(self, first: int, end: int, taps: tuple[int, ...],
               w_runs: list[tuple[int, int, tuple[int, ...]]], rows: int | None = None) -> Stmt:
        """Output rows [first, end) that read filter rows `taps`, `rows` (default: the
        configured number) per interior iteration."""
        oh = te.Var("oh")
        count = end - first
        block = (self.rows if rows is None else rows) if len(taps) == self.pat.h.taps else 1
        if block <= 1 or count < block:
            return For(oh, _c(end), "serial", self._row_block([oh], taps, w_runs), start=_c(first))
        ob = te.Var("ohb")
        blocks, rest = divmod(count, block)
        ohs = [_c(first) + ob * block + i for i in range(block)]
        out: list[Stmt] = [For(ob, _c(blocks), "serial", self._row_block(ohs, taps, w_runs))]
        if rest:
            out.append(For(oh, _c(end), "serial", self._row_block([oh], taps, w_runs),
                           start=_c(first + blocks * block)))
        return Seq(out)

    def _row_block(self, ohs: list[te.Expr], taps_h: tuple[int, ...],
                   w_runs: list[tuple[int, int, tuple[int, ...]]] | None) -> Stmt:
        """Output rows `ohs`, each cut into the runs `w_runs`; None: each as one vector loop
        over all its columns, every one of which sees every column tap (row_vectors_kernel;
        interleave 1 keeps the short loop a loop for the vectorizer)."""
        if w_runs is None:
            ow = te.Var("ow")
            every = tuple(range(self.pat.w.taps))
            stores = [self._store(oh, ow, taps_h, every) for oh in ohs]
            return loop_ir.simplify_indices(For(ow, _c(self.pat.w.out), "vectorize",
                                                Seq(stores), interleave=1))
        loops: list[Stmt] = []
        for first, end, taps_w in w_runs:
            ow = te.Var("ow")
            interior = len(taps_w) == self.pat.w.taps
            stores = [self._store(oh, ow, taps_h, taps_w) for oh in ohs]
            # border runs are a column or two, each with its own taps: left serial
            kind = "vectorize" if interior and end - first > 1 else "serial"
            # the interior's last partial vector under a mask where masks are cheap: as a
            # scalar remainder it cost more than the vectors (14 of a 112-wide row's 110
            # interior outputs, each nine taps). Not along strided rows, whose masked loads
            # LLVM turns into gathers (3x3/2 at 112: 11x slower)
            masked = kind == "vectorize" and self.masked_tail and self.pat.w.stride == 1
            loops.append(For(ow, _c(end), kind, Seq(stores), start=_c(first),
                             masked_tail=masked))
        return Seq(loops)

    def _store(self, oh: te.Expr, ow: te.Expr, taps_h: tuple[int, ...],
               taps_w: tuple[int, ...]) -> Stmt:
        pat = self.pat
        env = {**self.env, pat.oh: oh, pat.ow: ow}
        xb = self.buf[id(pat.x)]
        chan = te.substitute(pat.chan, env)
        taps = []
        for r0 in taps_h:
            ih = oh * pat.h.stride + (r0 * pat.h.dilation + pat.h.offset - pat.h.shift)
            for r1 in taps_w:
                iw = ow * pat.w.stride + (r1 * pat.w.dilation + pat.w.offset - pat.w.shift)
                xv: te.Expr = BufLoad(xb, flat_index(xb, [env[pat.n], chan, ih, iw]))
                if pat.x_value is not None:
                    xv = self._lower(_replace_load(pat.x_value, pat.x, xv))
                taps.append((r0, r1, xv))
        return self._output(env, oh, ow, self._window(env, taps))

    def _window(self, env: dict[te.Var, te.Expr],
                taps: list[tuple[int, int, te.Expr]]) -> te.Expr:
        """The initial value, then each tap's value (r0, r1, x) in order: a weighted sum for a
        convolution, the window's sum or maximum for a pool. NaN-aware maxima (llvm.maximumnum,
        -0 below +0) are exactly associative, so they combine as a balanced tree, which gives
        the chain's result in less than half its latency (a 3x3 pool with its initial value:
        4 dependent steps instead of 9). A float convolution's weighted sum runs as
        independent chains of FMAs (_chained_sum, a scheduled reduction's reassociation);
        integer windows and pools' sums keep the reduction's own order (= the default
        schedule's)."""
        pat = self.pat
        acc = self._lower(te.substitute(pat.init, env))
        if pat.weight is not None:
            products = []
            for r0, r1, xv in taps:
                wenv = {**env, pat.r[0]: _c(r0), pat.r[1]: _c(r1)}
                w = self._lower(te.substitute(pat.weight, wenv))
                if xv.dtype != w.dtype:  # an integer window's exact float32 values
                    w = te.cast(xv.dtype, w)
                products.append(xv * w)
            if pat.integer or products[0].dtype != acc.dtype:
                window = functools.reduce(lambda a, b: a + b, products)
                return acc + (window if window.dtype == acc.dtype else
                              te.cast(acc.dtype, window))
            return _chained_sum(acc, products)
        leaves = [acc] + [xv for _, _, xv in taps]
        if pat.combiner == "max":
            return _balanced(pat.combiner, leaves)
        return functools.reduce(lambda a, b: combine(pat.combiner, a, b), leaves)

    def _output(self, env: dict[te.Var, te.Expr], oh: te.Expr, ow: te.Expr,
                acc: te.Expr) -> Stmt:
        """The store of output (oh, ow): the window's value `acc` through the epilogue."""
        pat = self.pat
        target = pat.conv
        if pat.epilogue is not None:
            target = pat.epilogue
            if not self.plane_epilogue:
                acc = self._apply_epilogue(env, oh, ow, acc)
        ob = self.buf[id(target)]
        return Store(ob, flat_index(ob, [env[pat.n], env[pat.k], oh, ow]), acc)

    def _apply_epilogue(self, env: dict[te.Var, te.Expr], oh: te.Expr, ow: te.Expr,
                        acc: te.Expr) -> te.Expr:
        """The epilogue's value at output (oh, ow) for the window's value `acc`."""
        pat = self.pat
        axes = [ax.var for ax in pat.epilogue.op.axes]  # type: ignore[union-attr]
        body = te.expand_inline(pat.epilogue.op.body)  # type: ignore[union-attr]
        body = _replace_load(body, pat.conv, acc)
        return self._lower(te.substitute(body, dict(zip(axes, [env[pat.n], env[pat.k], oh, ow],
                                                        strict=True))))

    def _epilogue_pass(self) -> list[Stmt]:
        """With `plane_epilogue`: the loops above stored the window sums in the output plane;
        one vector loop over the plane (contiguous in NCHW) applies the epilogue in place."""
        if not self.plane_epilogue:
            return []
        pat = self.pat
        ob = self.buf[id(pat.epilogue)]
        v = te.Var("e")
        oh, ow = v // _c(pat.w.out), v % _c(pat.w.out)
        index = flat_index(ob, [self.env[pat.n], self.env[pat.k], oh, ow])
        value = self._apply_epilogue(self.env, oh, ow, BufLoad(ob, index))
        return [loop_ir.simplify_indices(For(v, _c(pat.h.out * pat.w.out), "vectorize",
                                             Store(ob, index, value),
                                             masked_tail=self.masked_tail))]

    def masked_kernel(self) -> Kernel:
        """Small planes whose input and output rows have the same pitch (stride 1, 'same'
        padding, no channel multiplier): ONE vector loop over the plane's outputs, v = oh*OW +
        ow, every tap the input element at v plus a constant, kept where the tap lies inside
        the plane (a select on v's row and column; LLVM unrolls the loop fully, so the masks
        are constants). A tap outside the plane then reads the neighbouring plane's element
        and drops it: in bounds for every plane but the first and the last, which run in the
        row form. A 7x7 plane is 4 vectors per tap and no copies."""
        pat = self.pat
        nb, kb = pat.conv.shape[:2]
        planes = nb * kb
        oh_n, ow_n = pat.h.out, pat.w.out
        ident = self._identity()
        xb = self.buf[id(pat.x)]
        h_runs, w_runs = pat.h.runs(), pat.w.runs()

        def edge(index: int) -> Stmt:  # (one output row per interior iteration)
            self.env = {pat.n: _c(index // kb), pat.k: _c(index % kb)}
            return Seq([self._h_run(a, b, taps, w_runs, rows=1) for a, b, taps in h_runs]
                       + self._epilogue_pass())

        first, last = edge(0), edge(planes - 1)
        plane, v = te.Var("q"), te.Var("v")
        self.env = {pat.n: plane // kb, pat.k: plane % kb}
        env = self.env
        oh, ow = v // _c(ow_n), v % _c(ow_n)
        base = plane * (oh_n * ow_n)  # input and output planes have the same size
        taps = []
        for r0 in range(pat.h.taps):
            dh = r0 * pat.h.dilation + pat.h.offset - pat.h.shift
            for r1 in range(pat.w.taps):
                dw = r1 * pat.w.dilation + pat.w.offset - pat.w.shift
                conds = []
                if dh < 0:
                    conds.append(te.Binary("ge", oh, _c(-dh)))
                if dh > 0:
                    conds.append(te.Binary("lt", oh, _c(oh_n - dh)))
                if dw < 0:
                    conds.append(te.Binary("ge", ow, _c(-dw)))
                if dw > 0:
                    conds.append(te.Binary("lt", ow, _c(ow_n - dw)))
                xv: te.Expr = BufLoad(xb, base + v + (dh * ow_n + dw))
                if conds:
                    xv = te.select(functools.reduce(lambda a, b: te.Binary("and", a, b), conds),
                                   xv, ident)
                taps.append((r0, r1, xv))
        body = Seq([loop_ir.simplify_indices(For(v, _c(oh_n * ow_n), "vectorize", self._output(
            env, oh, ow, self._window(env, taps)), unroll_full=True))] + self._epilogue_pass())
        return Kernel(self.name, self.buffers,
                      [first, For(plane, _c(planes - 1), self._loop_kind(planes - 2), body,
                                  start=_c(1)), last])

    def row_vectors_kernel(self) -> Kernel:
        """Narrow pools whose every column sees every column tap (_narrow_pool_form): each
        output row is ONE vector loop over all its columns, a whole number of vectors (LLVM
        reads a 2x2/2 window's columns as one group of whole vectors and shuffles them apart),
        rows split by the filter rows they see as in the row form. A 16-wide row is one
        vector per tap instead of the default's padded copy and strided gathers."""
        pat = self.pat
        nb, kb = pat.conv.shape[:2]
        plane = te.Var("plane")
        self.env = {pat.n: plane // kb, pat.k: plane % kb}
        body = Seq([self._h_run(a, b, taps, None) for a, b, taps in pat.h.runs()]
                   + self._epilogue_pass())
        return Kernel(self.name, self.buffers,
                      [For(plane, _c(nb * kb), self._loop_kind(nb * kb), body)])

    def split_kernel(self, lanes: int) -> Kernel:
        """Strided windows over short rows (the padded-plane form split by stride phase): each
        plane is copied into sh x sw sub-planes, phase (a, b) holding input rows a, a + sh, ..
        and columns b, b + sw, .., with the combiner's identity around them; a tap then reads
        one phase at the output's own sub-plane position plus a constant, so the window is ONE
        vector loop over the plane in the sub-planes' row pitch, v = oh*WQ + ow, every tap a
        plain load at v plus a constant (no masks, no strided loads), run to a whole number of
        vectors (the sub-planes have room for it), and the output rows are copied out of that
        pitch. The copy into the phases reads each input row once as whole vectors, a group
        of sw adjacent columns per sub-plane column (LLVM's interleaved loads)."""
        pat = self.pat
        nb, kb = pat.conv.shape[:2]
        planes = nb * kb
        sh, sw = pat.h.stride, pat.w.stride
        hx, wx = pat.x.shape[2], pat.x.shape[3]
        (offs_h, lh, hq), (offs_w, lw, wq) = _split_axis(pat.h, hx), _split_axis(pat.w, wx)
        oh_n, ow_n = pat.h.out, pat.w.out
        phase = hq * wq
        size = sh * sw * phase
        virtual = -(-((oh_n - 1) * wq + ow_n) // lanes) * lanes
        chunks = -(-planes // PLANES_PER_CHUNK)
        ident = self._copy_padding()
        # the window's last vectors read up to virtual - 1 past a phase's start (the results
        # past the plane are thrown away): slack after the last chunk's sub-planes
        pad, virt, ch, j = self._chunk_scratch((chunks * size + virtual,), (chunks * virtual,),
                                               ident.dtype)
        env = self.env
        chan = te.substitute(pat.chan, env)
        xb = self.buf[id(pat.x)]
        p0 = ch * size

        def sub(a: int, b: int) -> te.Expr:
            return p0 + (a * sw + b) * phase

        e, i, c, v = te.Var("e"), te.Var("i"), te.Var("c"), te.Var("v")
        stages: list[Stmt] = [For(e, _c(size), "vectorize", Store(pad, p0 + e, ident))]
        cols = wx // sw
        for a in range(min(sh, hx)):
            row = i * sh + a
            at = (i + lh) * wq + lw

            def src(col: te.Expr, row: te.Expr = row) -> te.Expr:
                return self._copied(BufLoad(xb, flat_index(xb, [env[pat.n], chan, row, col])))

            copy: list[Stmt] = []
            if cols:
                copy.append(For(c, _c(cols), "vectorize", Seq([
                    Store(pad, sub(a, b) + at + c, src(c * sw + b)) for b in range(sw)])))
            copy += [Store(pad, sub(a, b) + at + cols, src(_c(cols * sw + b)))
                     for b in range(wx % sw)]
            stages.append(For(i, _c(-(-(hx - a) // sh)), "serial", Seq(copy)))
        taps = [(r0, r1, BufLoad(pad, sub(dh % sh, dw % sw) + v
                                 + ((dh // sh + lh) * wq + dw // sw + lw)))
                for r0, dh in enumerate(offs_h) for r1, dw in enumerate(offs_w)]
        return self._plane_chunks([loop_ir.simplify_indices(Seq(stages))], taps, v, virt,
                                  virtual, wq, ch, j)

    def padded_kernel(self) -> Kernel:
        """Short rows: each plane is copied into a scratch with its padding (the combiner's
        identity) around it, and the window is computed by ONE vector loop over the plane
        in the padded row pitch, v = oh*Wp + ow, where every tap is the load at v plus a
        constant; the Wp - OW positions past each row's end are thrown away when the output
        rows are copied out. A 7x7 plane is then 4 vectors per tap instead of 7 rows of a
        5-wide interior run between two scalar borders. Stride 1 only (_padded_plane_ok).
        An integer convolution's copy holds its input's values less the zero point, zero in
        the padding (float32 where the window's sums are exact in it, else int32:
        _copy_padding), so the taps read the values their products take."""
        pat = self.pat
        nb, kb = pat.conv.shape[:2]
        hp, wp = len(pat.h.valid), len(pat.w.valid)
        oh_n, ow_n = pat.h.out, pat.w.out
        virtual = (oh_n - 1) * wp + ow_n
        planes = nb * kb
        chunks = -(-planes // PLANES_PER_CHUNK)
        ident = self._copy_padding()
        pad, virt, ch, j = self._chunk_scratch((chunks, hp * wp), (chunks, virtual),
                                               ident.dtype)
        env = self.env
        chan = te.substitute(pat.chan, env)
        xb = self.buf[id(pat.x)]
        p0 = ch * (hp * wp)
        (h0, h1), (w0, w1) = _valid_run(pat.h.valid), _valid_run(pat.w.valid)
        ph, pw, v = te.Var("ph"), te.Var("pw"), te.Var("v")
        # the padded copy: rows of padding, then input rows with padding at both ends (the
        # code generator splits the row loop where the condition changes)
        fill = For(pw, _c(wp), "vectorize", Store(pad, p0 + ph * wp + pw, ident))
        inside = te.Binary("and", te.Binary("ge", pw, _c(w0)), te.Binary("lt", pw, _c(w1)))
        src = BufLoad(xb, flat_index(xb, [env[pat.n], chan, ph - pat.h.shift,
                                          te.minimum(te.maximum(pw - pat.w.shift, _c(0)),
                                                     _c(pat.x.shape[3] - 1))]))
        src = self._copied(src)
        copy = For(pw, _c(wp), "vectorize", Store(pad, p0 + ph * wp + pw,
                                                  te.select(inside, src, ident)))
        stages: list[Stmt] = []
        if h0 > 0:
            stages.append(For(ph, _c(h0), "serial", fill))
        stages.append(For(ph, _c(h1), "serial", copy, start=_c(h0)))
        if h1 < hp:
            stages.append(For(ph, _c(hp), "serial", fill, start=_c(h1)))
        # the window over the plane in the padded pitch, taps in the reduction's order
        taps = [(r0, r1, BufLoad(pad, p0 + v + ((r0 * pat.h.dilation + pat.h.offset) * wp
                                                + r1 * pat.w.dilation + pat.w.offset)))
                for r0 in range(pat.h.taps) for r1 in range(pat.w.taps)]
        return self._plane_chunks(stages, taps, v, virt, virtual, wp, ch, j)

    def _chunk_scratch(self, pad_shape: tuple[int, ...], virt_shape: tuple[int, ...],
                       pad_dtype: str | None = None) -> tuple[Buffer, Buffer, te.Var, te.Var]:
        """The plane forms' scratches, one slot per chunk of planes: the plane copied with its
        padding (elements of `pad_dtype`, default the input's), and the window's values in
        that copy's pitch; and the chunk and the plane within it, plane
        ch * PLANES_PER_CHUNK + j, which self.env is set to."""
        pat = self.pat
        pad = Buffer(f"s{len(self.buffers)}", pad_dtype or pat.x.dtype, pad_shape, "scratch")
        self.buffers.append(pad)
        virt = Buffer(f"s{len(self.buffers)}", pat.conv.dtype, virt_shape, "scratch")
        self.buffers.append(virt)
        ch, j = te.Var("chunk"), te.Var("j")
        plane = ch * PLANES_PER_CHUNK + j
        self.env = {pat.n: plane // pat.conv.shape[1], pat.k: plane % pat.conv.shape[1]}
        return pad, virt, ch, j

    def _plane_chunks(self, stages: list[Stmt], taps: list[tuple[int, int, te.Expr]],
                      v: te.Var, virt: Buffer, virtual: int, pitch: int, ch: te.Var,
                      j: te.Var) -> Kernel:
        """The plane forms' kernel: a loop over chunks of PLANES_PER_CHUNK planes (plane
        ch * PLANES_PER_CHUNK + j), each plane running `stages` (its copy into a scratch),
        the window as one vector loop over `virtual` positions v of the scratch's row `pitch`
        into `virt`, and the output rows copied out of that pitch through the epilogue
        (interleave 1: the code generator keeps a short row a loop, which LLVM would unroll
        and then vectorise across the rows with gathers and scatters, 3x slower on 14x14)."""
        pat, env = self.pat, self.env
        planes = math.prod(pat.conv.shape[:2])
        v0 = ch * virtual
        oh, ow = te.Var("oh"), te.Var("ow")
        stages = stages + [
            For(v, _c(virtual), "vectorize", Store(virt, v0 + v, self._window(env, taps))),
            For(oh, _c(pat.h.out), "serial", For(
                ow, _c(pat.w.out), "vectorize",
                self._output(env, oh, ow, BufLoad(virt, v0 + oh * pitch + ow)), interleave=1))]
        stages += self._epilogue_pass()
        count = te.minimum(_c(PLANES_PER_CHUNK), _c(planes) - ch * PLANES_PER_CHUNK)
        if planes % PLANES_PER_CHUNK == 0:
            count = _c(PLANES_PER_CHUNK)
        chunks = -(-planes // PLANES_PER_CHUNK)
        return Kernel(self.name, self.buffers,
                      [For(ch, _c(chunks), self._loop_kind(chunks),
                           For(j, count, "serial", Seq(stages)))])

    def _lower(self, e: te.Expr) -> te.Expr:
        if isinstance(e, te.Load):
            buf = self.buf[id(e.tensor)]
            return BufLoad(buf, flat_index(buf, [self._lower(i) for i in e.indices]))
        if isinstance(e, (te.Var, te.Const, BufLoad)):
            return e
        if isinstance(e, te.Binary):
            return te.binary(e.op, self._lower(e.a), self._lower(e.b))
        if isinstance(e, te.Unary):
            return te.Unary(e.op, self._lower(e.a))
        if isinstance(e, te.Select):
            return te.select(self._lower(e.cond), self._lower(e.t), self._lower(e.f))
        if isinstance(e, te.Cast):
            return te.cast(e.dtype, self._lower(e.a))
        # an already-lowered subexpression (the window sum inside an epilogue)
        return e


def _exact_in_float(pat: DepthwisePattern) -> bool:
    """Whether an integer window's sum of products is exact in float32: 8-bit inputs and
    weights less their zero points (|value| <= 255) over few enough taps that every partial
    sum stays below 2^24. Its vector loop is then a load and an FMA per tap (against a
    load, a multiply and an add in int32), and the int32 result is the same."""
    if pat.x_value is None or pat.weight is None or pat.x.dtype not in ("int8", "uint8"):
        return False
    weights = te.tensors_read(pat.weight)
    if not weights or any(t.dtype not in ("int8", "uint8") for t in weights):
        return False
    return pat.h.taps * pat.w.taps * 255 * 255 < 1 << 24


def _plane_epilogue(pat: DepthwisePattern) -> bool:
    """Whether the epilogue runs as its own pass over each plane (PLANE_EPILOGUE_COST): the
    window sums are then stored in the output, so it must have their type."""
    epi = pat.epilogue
    return (epi is not None and epi.dtype == pat.conv.dtype
            and arithmetic_cost(te.expand_inline(epi.op.body)) > PLANE_EPILOGUE_COST)  # type: ignore[union-attr]


def _valid_run(valid: list[bool]) -> tuple[int, int]:
    """The source positions that hold input elements, as one run [first, end)."""
    first = valid.index(True)
    return first, first + sum(valid)


def _padded_plane_ok(pat: DepthwisePattern, lanes: int, masked_tails: bool) -> bool:
    """Whether the padded-plane form applies: stride 1 on both axes (every tap is then the
    virtual output index plus a constant), the input elements one run per axis, and, where
    a row's last partial vector runs under a mask (`masked_tails`), short rows
    (PADDED_MAX_ROW_VECTORS): on wider ones the row form's loop overhead is small, and the
    padded form's two copies of the plane cost more than they save (one core, 3x3, 16 lanes:
    56- and 112-wide planes 1.3-1.6x slower padded; 28-wide 1.2x faster). Without masks the
    row form pays each row's remainder in scalars, and LLVM's GVN turns the row's overlapping
    tap loads into loop-carried vectors that it shifts with cross-lane shuffles; the padded
    form's one loop over the plane does neither (one Zen 1 core, 3x3 at 8 lanes: 28- to
    112-wide planes 0.75-0.85x the row form's time)."""
    if pat.w.out > PADDED_MAX_ROW_VECTORS * lanes and masked_tails and not pat.integer:
        return False
    for a in (pat.h, pat.w):
        if a.stride != 1 or not any(a.valid):
            return False
        first, end = _valid_run(a.valid)
        if not all(a.valid[first:end]):
            return False
    return True


def _narrow_pool_form(pat: DepthwisePattern, lanes: int) -> str | None:
    """The form of a pool narrower than POOL_MIN_WIDTH: rows of whole vectors where every
    column tap of every column is a plain load (no padding to mask; unit stride, or a
    stride-s window of s adjacent columns, which LLVM reads as one group of whole vectors) and
    rows are whole vectors, else the split planes (a masked or gapped strided tap leaves LLVM
    half-width vectors and scalar remainders: a 3x3/2 pool over 32x32 planes ran 3x slower in
    rows), else None (the default schedule)."""
    w = pat.w
    offsets = sorted(r * w.dilation + w.offset - w.shift for r in range(w.taps))
    masked = any(not w.tap_ok(o, r) for o in range(w.out) for r in range(w.taps))
    grouped = w.stride == 1 or offsets == list(range(offsets[0], offsets[0] + w.stride))
    if not pat.integer and grouped and not masked and w.out % lanes == 0:
        return "row_vectors"
    return "split" if _split_ok(pat) else None


def _split_axis(a: Axis, size: int) -> tuple[list[int], int, int]:
    """The split form along one axis of an input `size` long: each tap's offset from the
    output's position times the stride (input position o*s + off: phase off % s, sub-plane
    index o + off // s + lead), the sub-plane positions before input position 0 (`lead`),
    and the sub-plane's length (room for every tap of every output and for the input)."""
    offs = [r * a.dilation + a.offset - a.shift for r in range(a.taps)]
    lead = max(0, -min(o // a.stride for o in offs))
    end = max(a.out + max(o // a.stride for o in offs), -(-size // a.stride))
    return offs, lead, lead + end


def _split_ok(pat: DepthwisePattern) -> bool:
    """Whether the split form applies: a float pool or an integer convolution whose output
    planes each read their own input plane, and whose padding is exactly what lies outside the
    input (the sub-planes hold the whole input and the padding value around it). At stride 1
    it is the padded-plane form with the window run to whole vectors."""
    if (pat.weight is not None) != pat.integer:
        return False
    if pat.chan is not pat.k or pat.x.shape[:2] != pat.conv.shape[:2]:
        return False
    for a, size in ((pat.h, pat.x.shape[2]), (pat.w, pat.x.shape[3])):
        if not any(a.valid) or _valid_run(a.valid) != (a.shift, a.shift + size) \
                or not all(a.valid[a.shift:a.shift + size]):
            return False
    return True


def _masked_plane_ok(pat: DepthwisePattern) -> bool:
    """Whether the masked-plane form applies: stride 1 with input and output planes of one
    size (their rows one pitch), each output channel reading its own input channel, small
    planes, and at least three of them (the first and last run in the row form)."""
    h, w = pat.h, pat.w
    return (h.stride == 1 and w.stride == 1 and pat.x.shape[2:] == pat.conv.shape[2:]
            and pat.chan is pat.k and pat.x.shape[1] == pat.conv.shape[1]
            and h.out * w.out <= MASKED_MAX_PLANE and math.prod(pat.conv.shape[:2]) >= 3)


def _chained_sum(init: te.Expr, products: list[te.Expr]) -> te.Expr:
    """init + the products, as ceil(n / TAPS_PER_CHAIN) chains of consecutive products, the
    first seeded with `init`, summed pairwise: one dependent FMA after another made each
    output vector wait nine FMA latencies for a 3x3 window, and with the FP scheduler full
    of waiting chains the core ran it at a third of its FMA rate (one Zen 1 core, a 3x3
    plane at 8 lanes: 25 cycles a vector for nine FMAs). Two chains cost no more
    instructions than one (the second's first product is the multiply the single chain
    started with, their sum the add of `init`)."""
    n = -(-len(products) // TAPS_PER_CHAIN)
    size = -(-len(products) // n)
    chains = []
    for i in range(0, len(products), size):
        part = products[i:i + size]
        chain = init if i == 0 else part.pop(0)
        for p in part:
            chain = chain + p
        chains.append(chain)
    return _balanced("sum", chains)


def _balanced(combiner: str, leaves: list[te.Expr]) -> te.Expr:
    """The leaves combined pairwise, level by level."""
    while len(leaves) > 1:
        pairs = [combine(combiner, leaves[i], leaves[i + 1])
                 for i in range(0, len(leaves) - 1, 2)]
        leaves = pairs + leaves[len(pairs) * 2:]  # an odd one out joins the next level
    return leaves[0]


def _replace_load(e: te.Expr, t: te.Tensor, by: te.Expr) -> te.Expr:
    """`e` (a TE expression) with every load of `t` replaced by the loop-IR value `by`."""
    if isinstance(e, te.Load):
        return by if e.tensor is t else te.Load(e.tensor, [_replace_load(i, t, by)
                                                           for i in e.indices])
    if isinstance(e, te.Binary):
        return te.binary(e.op, _replace_load(e.a, t, by), _replace_load(e.b, t, by))
    if isinstance(e, te.Unary):
        return te.Unary(e.op, _replace_load(e.a, t, by))
    if isinstance(e, te.Select):
        return te.select(*(_replace_load(x, t, by) for x in (e.cond, e.t, e.f)))
    if isinstance(e, te.Cast):
        return te.cast(e.dtype, _replace_load(e.a, t, by))
    return e
