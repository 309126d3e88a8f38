"""Tensorized GEMM template: any `C[b.., m.., n..] = sum_k A * B` (+ element-wise epilogue) on
the register-blocked micro-kernel of `targets/cpu/microkernels.py`.

Matching is structural (AMOS-style): one sum-reduction stage whose body is the product of two
loads; the output axes that only the second operand reads form the trailing N group (flattened,
contiguous in the output), those only the first reads form the M group before it, and the rest
are batch loops. MatMul, Gemm (any transposes), batched MatMul and Conv (implicit GEMM: M =
output channels, N = output pixels, K = input channels x window) all match.

Operands reach the micro-kernel in one of these ways:
- "const": a compile-time constant operand, packed once by the compiler into micro-panels
  (A: [M/MR][K][MR], B: [N/NR][K][NR], zero-padded) — weights cost nothing to pack at run time;
- "direct": read in place when its flat index is affine in (m, k) / (k, n) with B contiguous
  in n (plain MatMul operands, 1x1 stride-1 convolutions);
- "pack": copied into micro-panels by the kernel itself (im2col for other convolutions);
- "window" (B of a convolution whose window reads the input with unit stride along the output
  width): no im2col. The output pixels are numbered in the input's row pitch ("virtual"
  columns `oh * Wp + ow`, a few per row past the output width computed and thrown away), so
  for each filter tap and input channel the B row is one contiguous run of the (padded) input,
  shifted by the tap's offset; the taps become outer loops around micro-kernel calls that
  accumulate into a virtual-column scratch, and the epilogue compacts it into the output.
  The input is read in place, once per tap, instead of being copied nine times over.
- "pixels" (a convolution with constant weights): the roles swapped, on the convolution
  micro-kernel (`_ConvWriter`): output pixels are its rows, read in place from the (padded)
  input, output channels its vectors, the reduction over taps and channels stays in registers
  and the tile is stored transposed into the output (see `_Builder._pixels_main`).
The epilogue (bias, activation, residual, the conv bias of the reduction's init) is applied to
each output panel right after the micro-kernels wrote it, while it is still in cache.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lowering import te
from lowering.affine import evaluate, normalize, simplify_index
from lowering.default_schedule import default_schedule
from lowering.intrinsics import GemmBlock, conv_routine, gemm_blocks, transpose_routine
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
    bind,
    divides,
    simplify_loads,
)
from lowering.lower import _Converter, lower_stage, stages_of
from lowering.machine import Machine, Target
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.tensorize import epilogue_args

I64 = "int64"
# Below this many multiply-adds a tensorized GEMM's packing and edge handling do not pay off.
MIN_MACS = 1 << 14
# Parallel loops below this many multiply-adds cost more than they save.
PARALLEL_MIN_MACS = 1 << 21
KC_OPTIONS = (128, 256, 512)
# Cost model. The machine's clock, FMA units, caches and bandwidths come from the target's
# machine model (lowering/machine.py); what follows are the model's own factors. They only rank
# schedules; their values were fitted (random search, objective: geomean of chosen/best time
# times total chosen/best time) to single-core measurements of the configurations of every
# ResNet-50 and MobileNetV2 convolution, square GEMMs 256-2048 and the BERT projections on a
# Cascade Lake core (benchmarks/RESULTS.md, "cost model"), whose machine model holds the
# clock, caches and bandwidths fitted with them. Rates of particular access patterns are
# kept as fractions of the bandwidth of the level they stream from.
EFF_MAX = 0.92  # fraction of peak the micro-kernel reaches on L1-resident operands
EFF_INTENSITY = 1.75  # FMAs per loaded value below which the loads limit the micro-kernel
STALL = 0.25  # fraction of operand traffic that out-of-order execution does not hide
# write-back of an output larger than L2, from a loop over few / many page streams, as a
# multiple of the memory bandwidth (fitted to one-layer bundles, see GemmSpace._write_back)
OUT_STREAMED, OUT_SCATTERED, PREFETCH_STREAMS = 24 / 13.5, 6 / 13.5, 16
CHUNK_MIN_PANELS = 4
# rows of an A read in place whose line misses the core overlaps, and the cycles each further
# one waits (GEMMs with activations as A: 14-row blocks measured 5-40 % slower than 6-9 rows
# at K >= 512, e.g. GEMM 512 2.46 against 6x4's 2.30 ms, 128x3072x768 7.6 against 5.5 ms)
A_STREAMS_OVERLAPPED, LINE_WAIT_CYCLES = 10, 14
A_PACK_ELEMENT_CYCLES = 6.5  # per element of A packed (GEMM 512: 0.66-0.72 ms for 262k)
# cache-line rate of window-mode B rows (software-prefetched from L2), of the L2 bandwidth
WINDOW_RATE = 27 / 143
PACK_RUN_CYCLES = 7  # loop and tail overhead of one copied run in the im2col packing
PACK_ELEMENT_CYCLES = 2.0  # per element the im2col packing copies (measured 2-4 on strided stems)
# more per element when the pixels along a row are strided (a stride-2 1x1 projection: its
# packing measured 0.39 ms more than the model said against pixel mode, at 256x784 elements)
PACK_GATHER_CYCLES = 3.0
PACK_CONTIGUOUS_CYCLES = 1.0  # per element of a contiguous run (1x1: 0.08 ms for 64 x 3136)
# per element of pixel mode's padding copy written channels-last, more than a plain copy
CHANNELS_LAST_COPY_CYCLES = 0.5
# elements from which that copy runs its image rows in parallel
PARALLEL_COPY_MIN = 1 << 17
# the smallest (padded) input plane, in floats, whose strided windows may be copied
# channels-last (see GemmSpace._channels_last)
CHANNELS_LAST_MIN_PLANE = 2048


def _c(v: int) -> te.Const:
    return te.Const(v, I64)


def _zero_pixels(dst: Buffer, plane: te.Expr, row: te.Expr, col0: int, cols: int,
                 layout: tuple[int, int, int]) -> Stmt:
    """Zeros into `cols` pixels from (`row`, `col0`) of `plane` of a padded buffer whose
    planes are (rows, row pitch, elements per pixel) = `layout`: [n, c, hp, wp] has one
    element per pixel, the channels-last copy [n, hp, wp, c] has c."""
    hp, wp, unit = layout
    z = te.Var("zx")
    n = cols * unit
    base = ((plane * hp + row) * wp + col0) * unit
    return For(z, _c(n), "vectorize" if n >= 4 else "serial",
               Store(dst, simplify_index(base + z), te.Const(0.0, "float32")))


def _loads_of(e: te.Expr, t: te.Tensor) -> list[te.Load]:
    out = [e] if isinstance(e, te.Load) and e.tensor is t else []
    for c in te.children(e):
        out += _loads_of(c, t)
    return out


@dataclass
class Group:
    """Axes flattened into one GEMM dimension (row-major)."""

    vars: list[te.Var]
    extents: list[int]

    @property
    def size(self) -> int:
        return math.prod(self.extents)

    @property
    def nonunit(self) -> list[tuple[te.Var, int]]:
        """(var, extent) of the axes longer than 1, in order."""
        return [(v, e) for v, e in zip(self.vars, self.extents, strict=True) if e != 1]

    def unflatten(self, flat: te.Expr) -> dict[te.Var, te.Expr]:
        out: dict[te.Var, te.Expr] = {}
        rest = flat
        for v, e in reversed(list(zip(self.vars, self.extents, strict=True))):
            if e == 1:
                out[v] = _c(0)
                continue
            out[v] = rest % e if v is not self.vars[0] else rest
            rest = rest // e
        return out


@dataclass
class GemmPattern:
    product: te.Tensor
    epilogue: te.Tensor | None  # the output stage reading the product element-wise
    pre: list[te.Tensor]  # stages the operands read (padding copies), computed first
    a: te.Load  # operand carrying the M axes
    b: te.Load  # operand carrying the N axes
    batch: Group
    m: Group
    n: Group
    k: Group
    init: te.Expr  # the reduction's initial value (conv bias), an expression of output axes
    # the output zero-padded around the epilogue (a padding its consumer would otherwise copy
    # in, moved into this kernel by aotc/passes/pad_in_producer.py): the first element's
    # offset along each output axis; None when the output is the epilogue itself
    out_begin: tuple[int, ...] | None = None
    # a grouped convolution (1 < groups, several channels per group): the product's channel
    # axis split into a group (a batch axis both operands read) and the channel within it (M):
    # {channel var: group * per_group + channel in group}; A, constant, is packed per group
    split: dict[te.Var, te.Expr] = field(default_factory=dict)
    group: te.Var | None = None

    def axis_values(self, vmap: dict[te.Var, te.Expr]) -> dict[te.Var, te.Expr]:
        """`vmap` (values of the batch, M and N axes) with the product's split axis added."""
        return {**vmap, **{v: te.substitute(e, vmap) for v, e in self.split.items()}}


@dataclass
class Window:
    """How a convolution's B operand is read in "window" mode (see the module docstring)."""

    run: te.Var  # the reduction axis the micro-kernel walks (input channels)
    run_extent: int
    run_stride: int  # elements between consecutive run values in B's buffer
    taps: list[tuple[te.Var, int, int]]  # the other reduction axes: (var, extent, offset/step)
    out_row: int  # output row length (the innermost N axis)
    row: int  # virtual row pitch: the input's row stride (>= out_row)
    rows: int  # output rows (all outer N axes flattened)
    flat: te.Expr  # B's flat index in the batch, N and K variables
    col_stride: int = 1  # elements between neighbouring output pixels of a row in the input

    @property
    def size(self) -> int:
        """Virtual columns: the last row ends at the output's row length."""
        return (self.rows - 1) * self.row + self.out_row

    @property
    def k_group(self) -> Group:
        """The reduction axes in the order the packed A is laid out for this mode."""
        return Group([v for v, _, _ in self.taps] + [self.run],
                     [e for _, e, _ in self.taps] + [self.run_extent])


@dataclass(frozen=True)
class ChannelsLastCopy:
    """Pixel mode's padding copy written channels-last (GemmSpace._channels_last)."""

    copy: te.Tensor  # [n, h, w, c]: the padded input, channels innermost
    window: Window  # pixel mode's reading of it
    source: te.Tensor  # the input it pads
    top: int  # padding rows above the source's first row
    left: int  # padding columns left of its first column


# Above this fraction of thrown-away virtual columns, im2col packing is cheaper.
WINDOW_MAX_WASTE = 0.3
# Pixel mode: output pixels per block of rows that share one pass over a weight panel.
PIXELS_PER_BLOCK = 48
# Pixel mode: weights (bytes) up to which a block's channel tiles run innermost
# rate of pixel mode's per-step stream (weights and input lines) from L2, of the L2 bandwidth
PIXELS_RATE = 60 / 143
PIXELS_CALL_CYCLES = 40  # set-up of one tap-by-tap pixel-mode call (row pointers, branches)


def analyze(outputs: Sequence[te.Tensor]) -> GemmPattern | None:
    if len(outputs) != 1 or outputs[0].dtype != "float32":
        return None
    stages = stages_of(outputs)
    reductions = [t for t in stages if isinstance(t.op.body, te.Reduce)]  # type: ignore[union-attr]
    if len(reductions) != 1:
        return None
    p = reductions[0]
    red = p.op.body  # type: ignore[union-attr]
    assert isinstance(red, te.Reduce)
    if red.combiner != "sum" or p.dtype != "float32" or p.op.inline:  # type: ignore[union-attr]
        return None
    body = te.expand_inline(red.body)
    if not (isinstance(body, te.Binary) and body.op == "mul"
            and isinstance(body.a, te.Load) and isinstance(body.b, te.Load)):
        return None
    # stages after the product: at most the output, reading it only at its own index
    after = [t for t in stages if t is not p and p in _depends(t)]
    epilogue = None
    out_begin = None
    if after:
        out = outputs[0]
        if after != [out] or out.op.inline:  # type: ignore[union-attr]
            return None
        if out.shape != p.shape:
            unpadded = _unpad(out, p)
            if unpadded is None:
                return None
            out, out_begin = unpadded
        flat_body = te.expand_inline(out.op.body)  # type: ignore[union-attr]
        if isinstance(flat_body, te.Reduce):
            return None
        axes = [ax.var for ax in out.op.axes]  # type: ignore[union-attr]
        for ld in _loads_of(flat_body, p):
            if len(ld.indices) != len(axes) or not all(
                    i is v or (n == 1 and isinstance(i, te.Const))
                    for i, v, n in zip(ld.indices, axes, p.shape, strict=True)):
                return None
        epilogue = out
    pre = [t for t in stages if t is not p and t not in after]
    spatial = [ax for ax in p.op.axes]  # type: ignore[union-attr]
    reduce_axes = list(red.axes)
    init = red.init
    split: dict[te.Var, te.Expr] = {}
    group_var = None
    grouped = _grouped_axis(spatial, body.a, body.b)
    if grouped is not None:
        pos, per_group, direct = grouped
        ax = spatial[pos]
        g = te.IterVar("g", ax.extent // per_group, "spatial")
        kk = te.IterVar("kk", per_group, "spatial")
        whole = g.var * per_group + kk.var
        loads = [body.a, body.b]
        loads = [te.substitute(ld, {ax.var: whole}) if i == direct
                 else _replace_group_index(ld, ax.var, per_group, g.var)
                 for i, ld in enumerate(loads)]
        body = te.Binary("mul", loads[0], loads[1])
        init = te.substitute(init, {ax.var: whole})
        spatial = [*spatial[:pos], g, kk, *spatial[pos + 1:]]
        split, group_var = {ax.var: whole}, g.var

    def uses(load: te.Load, v: te.Var) -> bool:
        return any(te.mentions(i, v) for i in load.indices)

    role = []
    for ax in spatial:
        ua, ub = uses(body.a, ax.var), uses(body.b, ax.var)
        role.append("x" if ua and not ub else "y" if ub and not ua else "batch")
    # the trailing run of one operand's axes is N; the run before it, of the other, is M
    if not role or role[-1] == "batch":
        return None
    n_role = role[-1]
    m_role = "y" if n_role == "x" else "x"
    i = len(role)
    while i > 0 and role[i - 1] == n_role:
        i -= 1
    j = i
    while j > 0 and role[j - 1] == m_role:
        j -= 1
    if j == i:
        return None  # no M axes: a matrix-vector product, memory-bound
    a_load, b_load = (body.a, body.b) if m_role == "x" else (body.b, body.a)
    for rv in reduce_axes:
        if not (uses(a_load, rv.var) and uses(b_load, rv.var)) and rv.extent != 1:
            return None

    def group(axes: Sequence[te.IterVar]) -> Group:
        return Group([a.var for a in axes], [a.extent for a in axes])

    if group_var is not None and not (group_var in [a.var for a in spatial[:j]]
                                      and out_begin is None):
        return None  # the group must be a batch axis; no padded output
    pat = GemmPattern(
        product=p, epilogue=epilogue, pre=pre, a=a_load, b=b_load,
        batch=group(spatial[:j]), m=group(spatial[j:i]), n=group(spatial[i:]),
        k=group(reduce_axes), init=init, out_begin=out_begin, split=split, group=group_var,
    )
    if pat.m.size * pat.n.size * pat.k.size < MIN_MACS:
        return None
    i_out = i - (1 if split else 0)  # the N axes' start among the product's own axes
    if (out_begin is not None and any(out_begin[:i_out])) or \
            any(a != b for a, b in zip(outputs[0].shape[:i_out], p.shape[:i_out], strict=True)):
        return None  # padding only along the pixels' axes
    return pat


def _grouped_axis(spatial: Sequence[te.IterVar], a: te.Load, b: te.Load
                  ) -> tuple[int, int, int] | None:
    """A grouped convolution's channel axis: (its position, channels per group, which load
    reads it whole). One load (the weights) indexes by the channel itself, the other (the
    input) only through channel // per_group: its group."""
    for pos, ax in enumerate(spatial):
        for direct, other in ((0, b), (1, a)):
            whole = (a, b)[direct]
            if not (any(i is ax.var for i in whole.indices) and
                    all(i is ax.var or not te.mentions(i, ax.var) for i in whole.indices)):
                continue
            divisors = _group_divisors(other, ax.var)
            if divisors is None or len(divisors) != 1:
                continue
            per_group = divisors.pop()
            if 1 < ax.extent // per_group and ax.extent % per_group == 0:
                return pos, per_group, direct
    return None


def _group_divisors(e: te.Expr, v: te.Var) -> set[int] | None:
    """The constants d of every `v // d` in `e`, or None if `v` occurs otherwise (or not)."""
    found: set[int] = set()

    def walk(x: te.Expr) -> bool:
        if x is v:
            return False
        if isinstance(x, te.Binary) and x.op == "floordiv" and x.a is v and \
                isinstance(x.b, te.Const):
            found.add(int(x.b.value))
            return True
        return all(walk(c) for c in te.children(x))

    return found if walk(e) and found else None


def _replace_group_index(e: te.Expr, v: te.Var, per_group: int, group: te.Var) -> te.Expr:
    """`e` with every `v // per_group` replaced by `group`."""
    if isinstance(e, te.Binary) and e.op == "floordiv" and e.a is v and \
            isinstance(e.b, te.Const) and int(e.b.value) == per_group:
        return group
    return te.map_children(e, lambda c: _replace_group_index(c, v, per_group, group))


def _unpad(out: te.Tensor, p: te.Tensor, identity: bool = False
           ) -> tuple[te.Tensor, tuple[int, ...]] | None:
    """An output that is an element-wise function of the product, zero-padded:
    `out[o] = select(o - begin inside p's shape, f(p[o - begin]), 0)` with constant `begin`
    and `f` reading nothing else (with `identity`, f must be the identity). Returns `f` as a
    stage over the product's own axes (what the epilogue analysis reads) and `begin`."""
    op = out.op
    assert op is not None
    body = te.expand_inline(op.body)
    if not (isinstance(body, te.Select) and isinstance(body.f, te.Const)
            and float(body.f.value) == 0.0 and len(out.shape) == len(p.shape)):
        return None
    if identity and not (isinstance(body.t, te.Load) and body.t.tensor is p):
        return None
    axes = [ax.var for ax in op.axes]
    loads = _loads_of(body.t, p)
    if not loads or any(x is not p for x in te.tensors_read(body.t)):
        return None
    begin: list[int] | None = None
    for ld in loads:
        offs = []
        for ix, v, n in zip(ld.indices, axes, out.shape, strict=True):
            if n == 1 and isinstance(ix, te.Const):  # a broadcast read of a unit axis
                offs.append(0)
                continue
            d = normalize(v - _unclamped(ix))
            if d is None or d.terms:
                return None
            offs.append(int(d.const))
        if begin is None:
            begin = offs
        elif offs != begin:
            return None
    assert begin is not None
    ends = [n - m - b for n, m, b in zip(out.shape, p.shape, begin, strict=True)]
    if min(begin) < 0 or min(ends) < 0:
        return None
    # the condition: exactly the bounds of the padded axes
    need = {(i, "ge") for i, b in enumerate(begin) if b} | \
        {(i, "lt") for i, e in enumerate(ends) if e}
    seen = set()
    for c in te.conjuncts(body.cond):
        if not (isinstance(c, te.Binary) and c.op in ("ge", "lt", "le")
                and isinstance(c.b, te.Const)):
            return None
        hit = None
        for i, v in enumerate(axes):
            d = normalize(c.a - v)
            if d is not None and not d.terms and d.const == -begin[i]:
                hit = i
        if hit is None:
            return None
        # x < n, or x <= n - 1 (the convolution's own padding copy)
        cmp, bound = ("lt", int(c.b.value) + 1) if c.op == "le" else (c.op, int(c.b.value))
        if bound != (0 if cmp == "ge" else p.shape[hit]):
            return None
        seen.add((hit, cmp))
    if seen != need:
        return None
    probe = _replace_loads(body.t, p, te.Const(0.0, p.dtype))
    if any(te.mentions(probe, v) for v in axes):
        return None  # the value depends on the position other than through the product

    def unpadded(*o: te.Var) -> te.Expr:
        return _replace_loads(body.t, p, p[o])

    return te.compute(p.shape, unpadded, out.name, tag=op.tag), tuple(begin)


def _depends(t: te.Tensor) -> set[te.Tensor]:
    out: set[te.Tensor] = set()
    stack = [t]
    while stack:
        x = stack.pop()
        if x.op is None:
            continue
        for d in te.tensors_read(x.op.body):
            if d not in out:
                out.add(d)
                stack.append(d)
    return out


class GemmTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> GemmSpace | None:
        if target.vector_lanes_f32 < 4:
            return None
        pat = analyze(outputs)
        if pat is None:
            return None
        space = GemmSpace(inputs, outputs, consts, target, pat)
        b_modes = next(k.options for k in space.knobs if k.name == "b")
        return space if b_modes else None


class GemmSpace(ScheduleSpace):
    kind = "gemm"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target, pat: GemmPattern) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.pat = pat
        self.blocks = gemm_blocks(target)  # type: ignore[arg-type]
        self.direct_strides: dict[int, tuple[int, int]] = {}  # id(operand load) -> (own, k)
        self.a_const = self._const_index(pat.a, pat.m)
        self.b_const = self._const_index(pat.b, pat.n)
        a_modes = ["const"] if self.a_const is not None else (
            ["direct", "pack"] if self._direct_ok(pat.a, pat.m, need_unit=None) else ["pack"])
        b_modes = ["const"] if self.b_const is not None else (
            ["direct", "pack"] if self._direct_ok(pat.b, pat.n, need_unit=pat.n) else ["pack"])
        self.window = self._window_of(pat.b) if "direct" not in b_modes and \
            self.a_const is not None and self.b_const is None and pat.group is None else None
        if self.window is not None:
            b_modes.append("window")
        # "pixels": the convolution with the roles swapped, see _Builder._pixels_main
        self.pixels = self._conv_reading(pat.b) if self.a_const is not None and \
            self.b_const is None and pat.group is None else None
        if self.pixels is not None and len(self.pixels.taps) <= 2:
            b_modes.append("pixels")
        # pixel mode may copy a padded input channels-last (see _channels_last)
        self.pixels_cl = self._channels_last() if "pixels" in b_modes else None
        self.fused_epilogue = self._clamped_bias()
        if pat.out_begin is not None and not (len(pat.n.vars) == 2 and min(pat.n.extents) > 1):
            b_modes = []  # a padded output is written per image row (see _Builder.padded)
        # B's columns one contiguous run (a 1x1 convolution's pixels): its packing is a plain
        # vector copy per k row (see _Builder._pack_stage)
        col = te.Var("col")
        self.b_contiguous = _unit_stride(simplify_index(te.substitute(
            _flat_index(pat.b), pat.n.unflatten(col))), col)
        # B's pixels every so many elements along an output row (a strided convolution): its
        # packing gathers them
        f = normalize(_flat_index(pat.b))
        last = pat.n.nonunit[-1][0] if pat.n.nonunit else None
        self.b_gathers = last is not None and f is not None and \
            f.depends_only_linearly(last) and abs(f.coefficient(last)) > 1
        K = pat.k.size
        self.knobs = [
            Knob("block", tuple(f"{b.mr}x{b.nv}" for b in self.blocks)),
            Knob("kc", (K, *[kc for kc in KC_OPTIONS if kc < K])),
            Knob("a", tuple(a_modes)),
            Knob("b", tuple(b_modes)),
            # the loop order: N panels outermost ("n"), M tiles outermost ("m"), or N chunks,
            # K blocks and M blocks around the N-outer order ("blocked", see `blocking`)
            Knob("parallel", ("n", "m", "blocked") if self._blocks_m() else ("n", "m")),
            # pixel mode's input: as the kernel reads it, or its padding copy channels-last
            Knob("layout", ("planes", "channels_last") if self.pixels_cl else ("planes",)),
        ]

    # analysis helpers ------------------------------------------------------------------------
    def _const_index(self, load: te.Load, own: Group) -> int | None:
        """Input index of a compile-time constant operand read by axes (own, k) only."""
        t = load.tensor
        if t.op is not None:
            return None
        for i, x in enumerate(self.inputs):
            if x is t and self.consts[i] is not None:
                for v in self.pat.batch.vars:  # a grouped convolution's weights: per group
                    if v is not self.pat.group and any(te.mentions(ix, v) for ix in load.indices):
                        return None
                return i
        return None

    def _flat(self, load: te.Load, own: Group, own_flat: te.Expr, k_flat: te.Expr,
              k_group: Group | None = None) -> te.Expr:
        k = self.pat.k
        units = {v: _c(0) for v, e in zip(k.vars, k.extents, strict=True) if e == 1}
        vmap = {**units, **own.unflatten(own_flat), **(k_group or k).unflatten(k_flat)}
        return te.substitute(_flat_index(load), vmap)

    def _direct_ok(self, load: te.Load, own: Group, need_unit: Group | None) -> bool:
        """Whether the operand's flat index is affine in its (own, k) flat indices."""
        if load.tensor.op is not None and load.tensor.op.inline:
            return False
        mv, kv = te.Var("mf"), te.Var("kf")
        f = normalize(self._flat(load, own, mv, kv))
        if f is None or not (f.depends_only_linearly(mv) and f.depends_only_linearly(kv)):
            return False
        if need_unit is not None and f.coefficient(mv) != 1:
            return False
        self.direct_strides[id(load)] = (f.coefficient(mv), f.coefficient(kv))
        return True

    def _conv_reading(self, load: te.Load) -> Window | None:
        """How a convolution reads its input B: the flat index affine in every N and K axis,
        with at most two (non-unit) N axes, output rows and the pixels along a row."""
        p = self.pat
        t = load.tensor
        if t.op is not None and t.op.inline:
            return None
        flat = _flat_index(load)
        f = normalize(flat)
        if f is None:
            return None
        nvars, kvars = p.n.nonunit, p.k.nonunit
        if not 1 <= len(nvars) <= 2 or not kvars:
            return None
        if not all(f.depends_only_linearly(v) for v, _ in nvars + kvars):
            return None
        out_row = nvars[-1][1]
        col_stride = f.coefficient(nvars[-1][0])
        row = f.coefficient(nvars[0][0]) if len(nvars) == 2 else out_row * col_stride
        rows = nvars[0][1] if len(nvars) == 2 else 1
        if col_stride < 1 or row < out_row * col_stride:
            return None
        # the micro-kernel's k loop: the longest reduction axis, among equals the one whose
        # steps lie closest together (the filter width of an RGB stem: 7 taps one float apart)
        run, run_extent = min(kvars, key=lambda ve: (-ve[1], abs(f.coefficient(ve[0]))))
        taps = [(v, e, f.coefficient(v)) for v, e in kvars if v is not run]
        return Window(run, run_extent, f.coefficient(run), taps, out_row, row, rows, flat,
                      col_stride)

    def _channels_last(self) -> ChannelsLastCopy | None:
        """Pixel mode over a channels-last copy of a padded input: when B reads a padding
        copy [n, c, h, w] of an input that nothing else reads, the kernel may write that
        copy as [n, h, w, c] instead (_Builder._channels_last_copy). A tile's k steps then
        walk one line per pixel, a line every 16 channels, rather than a strided run of a
        new channel plane per step. Measured on ResNet-50's strided 3x3 layers, the
        transposing copy included: 0.92-0.97x the time at 56x56 (128 channels), but
        1.03-1.05x at 28x28 and 1.09-1.14x at 14x14; so only strided windows over planes
        of at least CHANNELS_LAST_MIN_PLANE floats get the option."""
        p = self.pat
        t = p.b.tensor
        lanes = self.target.vector_lanes_f32
        if t.op is None or t.op.inline or t not in p.pre or len(t.shape) != 4 or \
                t.shape[1] < self.line_floats or t.shape[1] % lanes or \
                isinstance(t.op.body, te.Reduce) or self.pixels is None or \
                self.pixels.col_stride < 2 or t.shape[2] * t.shape[3] < CHANNELS_LAST_MIN_PLANE:
            return None
        # the copy must be a zero padding of an input (the transposing copy reads it)
        sources = te.tensors_read(te.expand_inline(t.op.body))
        if len(sources) != 1 or sources[0].op is not None or sources[0] not in self.inputs:
            return None
        unpadded = _unpad(t, sources[0], identity=True)
        if unpadded is None or not self.only_b_reads(t):
            return None
        ax = [a.var for a in t.op.axes]
        n, c, h, w = t.shape

        def moved(b: te.Var, y: te.Var, x: te.Var, ch: te.Var) -> te.Expr:
            return te.substitute(t.op.body, dict(zip(ax, (b, ch, y, x), strict=True)))  # type: ignore[union-attr]

        copy = te.compute((n, h, w, c), moved, "channels_last")
        i = p.b.indices
        load = copy[(i[0], i[2], i[3], i[1])]
        assert isinstance(load, te.Load)
        win = self._conv_reading(load)
        if win is None or len(win.taps) > 2 or win.run_stride != 1 or win.run_extent != c:
            return None
        top, left = unpadded[1][2:]
        return ChannelsLastCopy(copy, win, sources[0], top, left)

    def only_b_reads(self, t: te.Tensor) -> bool:
        """Whether nothing but the B operand reads stage `t` (no other stage, the epilogue,
        A or the reduction's initial value)."""
        p = self.pat
        readers = [x for x in p.pre if x is not t] + ([p.epilogue] if p.epilogue else [])
        if any(t in te.tensors_read(te.expand_inline(x.op.body)) for x in readers):  # type: ignore[union-attr]
            return False
        return p.a.tensor is not t and not _loads_of(p.init, t)

    def pixel_window(self, config: Config) -> Window:
        """Pixel mode's window for `config`: over the input as read, or its channels-last copy."""
        if config.get("layout") == "channels_last" and self.pixels_cl is not None:
            return self.pixels_cl.window
        assert self.pixels is not None
        return self.pixels

    def _window_of(self, load: te.Load) -> Window | None:
        """The window-mode reading of B: unit stride along the output row, taps besides the
        input channels, and few thrown-away virtual columns."""
        w = self._conv_reading(load)
        if w is None or w.col_stride != 1 or not w.taps:
            return None
        if w.size > (1 + WINDOW_MAX_WASTE) * self.pat.n.size:
            return None
        return w

    def _clamped_bias(self) -> FusedEpilogue | None:
        """The epilogue as clamp(acc + bias[output channel] + residual, lo, hi), each part
        optional (a bare convolution, bias, ReLU, Clip, a ResNet block's Add + ReLU): the
        micro-kernels apply it to a finished tile in registers (the convolution kernel's
        columns, the GEMM kernel's rows being output channels). None for anything else."""
        p = self.pat
        bias = None
        if not (isinstance(p.init, te.Const) and float(p.init.value) == 0.0):
            mvars = [v for v, _ in p.m.nonunit]
            init = p.init
            if not (isinstance(init, te.Load) and init.tensor.op is None and len(mvars) == 1
                    and len(init.indices) == 1 and init.indices[0] is mvars[0]
                    and init.tensor.dtype == "float32"):
                return None
            bias = init.tensor
        if p.epilogue is None:
            return FusedEpilogue(bias, None, None, None)
        clamps = _clamps(te.expand_inline(p.epilogue.op.body), p.product)  # type: ignore[union-attr]
        if clamps is None:
            return None
        lo, hi, inner = clamps
        if isinstance(inner, te.Load) and inner.tensor is p.product:
            return FusedEpilogue(bias, None, lo, hi)
        # acc + residual: the residual an input read at the output's own index
        axes = [ax.var for ax in p.epilogue.op.axes]  # type: ignore[union-attr]
        if isinstance(inner, te.Binary) and inner.op == "add":
            for x, r in ((inner.a, inner.b), (inner.b, inner.a)):
                if (isinstance(x, te.Load) and x.tensor is p.product and isinstance(r, te.Load)
                        and r.tensor.op is None and r.tensor.dtype == "float32"
                        and r.tensor.shape == p.product.shape
                        and all(i is v for i, v in zip(r.indices, axes, strict=True))):
                    return FusedEpilogue(bias, r.tensor, lo, hi)
        return None

    @property
    def machine(self) -> Machine:
        return self.target.machine

    @property
    def line_floats(self) -> int:
        return self.machine.line // 4

    def block(self, config: Config) -> GemmBlock:
        mr, nv = (int(x) for x in str(config["block"]).split("x"))
        return GemmBlock(mr, nv, self.target.vector_lanes_f32)

    def default_config(self) -> Config:
        """The configuration the cost model ranks best (the space is small: enumerate). A
        bundle runs at its compiled thread count or, overridden at run time, at one thread:
        the rank is the sum of both times, so that balancing tiles over the threads does not
        buy a configuration that is much slower on one core."""
        best: tuple[float, Config] | None = None
        for combo in itertools.product(*[k.options for k in self.knobs]):
            cfg = {k.name: v for k, v in zip(self.knobs, combo, strict=True)}
            one_core = self.cost(cfg)
            c = one_core + self.threaded_cost(cfg, one_core)
            if best is None or c < best[0]:
                best = (c, cfg)
        assert best is not None
        return best[1]

    def flops(self) -> float:
        p = self.pat
        return 2.0 * p.batch.size * p.m.size * p.n.size * p.k.size

    def canonical(self, config: Config) -> Config:
        """Window and pixel modes reduce over one tap's channel run at a time, so every K
        block at or past the run builds the same kernel (in pixel mode, every one at or past
        K the one-call-per-tile kernel); pixel mode has no loop order to choose either (its
        one parallel loop runs over channel tiles and pixel blocks)."""
        kc = int(config["kc"])  # type: ignore[call-overload]
        if config["b"] == "window" and self.window is not None:
            return {**config, "kc": min(kc, self.window.run_extent), "layout": "planes",
                    "parallel": "n" if config["parallel"] == "blocked" else config["parallel"]}
        if config["b"] == "pixels" and self.pixels is not None:
            K = self.pat.k.size
            layout = config.get("layout") if self.pixels_cl is not None else "planes"
            return {**config, "parallel": "n", "layout": layout,
                    "kc": K if kc >= K else min(kc, self.pixel_window(config).run_extent)}
        return {**config, "layout": "planes"}

    # cost model ---------------------------------------------------------------------------
    def cost(self, config: Config) -> float:
        """Seconds on one core: the larger of the padded FMA work (at a rate set by the
        block's arithmetic intensity) and the operand traffic of the loop order, plus the part
        of the traffic that stalls the core anyway, plus packing and partial-result passes.
        Traffic: in the N-outer order ("n") the packed A is re-read once per N panel and each
        B micro-panel once per M tile; in the M-outer order ("m") the other way round. A
        re-read comes from L1, L2 or memory depending on what the loop touches in between."""
        if config["b"] == "pixels":
            return self._pixels_cost(config)
        p, blk = self.pat, self.block(config)
        M, N, K, B = p.m.size, p.n.size, p.k.size, p.batch.size
        window = config["b"] == "window"
        if window:
            assert self.window is not None
            N = self.window.size  # virtual columns
        mt, nt = math.ceil(M / blk.mr), math.ceil(N / blk.nr)
        Mp, Np = mt * blk.mr, nt * blk.nr
        m = self.machine
        compute = B * Mp * Np * K / _fma_rate(blk, m)
        kc = int(config["kc"])  # type: ignore[call-overload]

        bw = m.bandwidth  # the rate of the smallest level a working set fits in

        a_bytes, b_bytes = Mp * K * 4, K * Np * 4
        # an epilogue the micro-kernel does not apply to the tile in registers re-reads the
        # output: an M x NR panel ("n") or an MR x N one ("m")
        epilogue_pass = not self._fuses_epilogue(config)
        if config["parallel"] == "n":
            # jo > kb > io: a B micro-panel stays resident across the io loop; an A block is
            # reused only by the next N panel, after the whole of A went through the cache
            traffic = nt * a_bytes / bw(a_bytes) + mt * b_bytes / bw(kc * blk.nr * 4)
            traffic += epilogue_pass * Mp * Np * 8 / bw(Mp * blk.nr * 4)
        elif config["parallel"] == "blocked":
            # chunk > kb > M block > jo > io: an A block is read from beyond L2 once per
            # chunk and re-read from L2 per N panel; a B micro-panel stays in L1 across the M
            # block's tiles, and a chunk of B is re-read per M block
            tiles, panels = self.blocking(blk, kc)
            kd = min(kc, K)
            traffic = math.ceil(nt / panels) * a_bytes / bw(a_bytes) + \
                nt * a_bytes / bw(tiles * blk.mr * kd * 4) + \
                mt * b_bytes / bw(kd * blk.nr * 4) + \
                math.ceil(mt / tiles) * b_bytes / bw(panels * kd * blk.nr * 4)
            traffic += epilogue_pass * Mp * Np * 8 / bw(Mp * blk.nr * 4)
        else:
            # io > kb > jo within chunks of N panels (chunk_panels): a chunk of B is re-read
            # per M tile from where half of the cache holds it, all of A once per chunk
            chunk = min(nt, self.chunk_panels(blk))
            traffic = mt * b_bytes / bw(2 * chunk * K * blk.nr * 4) + \
                nt * a_bytes / bw(kc * blk.mr * 4)
            if chunk < nt:
                traffic += math.ceil(nt / chunk) * a_bytes / bw(a_bytes)
            traffic += epilogue_pass * Mp * Np * 8 / bw(blk.mr * chunk * blk.nr * 4)
        traffic += (a_bytes + b_bytes) / bw(a_bytes + b_bytes)  # first touch of each operand
        traffic += self._write_back(config, nt)
        t = B * (max(compute, traffic) + STALL * traffic)
        if p.out_begin is not None:
            t += self._padding_copy()
        if config["b"] == "pack":
            # im2col copies output-row runs: a vector copy plus a fixed cost per run. The
            # copy's cycles per element were fitted with 16-lane vectors; narrower ones copy
            # fewer elements per instruction (AVX2 3x3 layers measured 1.1-1.3x slower packed
            # than in pixel mode, which the unscaled costs ranked first)
            run = min(p.n.extents[-1], blk.nr)  # a panel row copies at most NR pixels
            per = (PACK_CONTIGUOUS_CYCLES if self.b_contiguous else PACK_ELEMENT_CYCLES) * \
                self.line_floats / blk.lanes
            if not self.b_contiguous:
                per += PACK_RUN_CYCLES / run + PACK_GATHER_CYCLES * self.b_gathers
            t += B * K * Np * per / m.hz
        if config["a"] == "pack":  # a transposing copy into MR-row panels
            t += B * Mp * K * A_PACK_ELEMENT_CYCLES / m.hz
        if config["b"] == "direct" and K > 64:
            if _set_conflicts(self.direct_strides[id(p.b)][1], 2 * blk.nv):
                t += B * mt * b_bytes / m.memory_bandwidth
        if config["a"] == "direct":
            rs, ks = self.direct_strides[id(p.a)]
            if _set_conflicts(rs if ks == 1 else ks, blk.mr):
                t += B * nt * a_bytes / m.memory_bandwidth
            # A read in place: each of the block's MR rows is a stream of its own that crosses
            # into a new line every line's worth of k steps; past A_STREAMS_OVERLAPPED rows, each
            # further one waits that often (measured in both loop orders and with K blocks
            # small enough for the tile to stay in L1: 14x2 with kc 128 is no faster)
            if blk.mr > A_STREAMS_OVERLAPPED:
                waits = (blk.mr - A_STREAMS_OVERLAPPED) * math.ceil(K / self.line_floats)
                t += B * mt * nt * waits * LINE_WAIT_CYCLES / m.hz
        if window:
            w = self.window
            assert w is not None
            # B rows are far apart: every call streams its rows' cache lines from L2 (NV
            # vectors touch NV + 1 lines unaligned) rather than reusing a resident panel
            t = max(t, B * mt * nt * K * (blk.nv + 1) * m.line / (WINDOW_RATE * m.l2_bandwidth))
            # partial results per tap and run block; the compaction pass
            blocks = K // w.run_extent * math.ceil(w.run_extent / kc)
            t += B * Mp * Np * 4 * 2 * blocks / m.l2_bandwidth / blk.nv
            t += B * M * p.n.size * 4 * 2 / m.l2_bandwidth
        elif kc < K:  # partial results written and re-read per K block, from L2 unless the
            # blocked order's K loop spans more tiles than L2 holds (scattered lines then)
            rate = m.l2_bandwidth
            if config["parallel"] == "blocked":
                panels = self.blocking(blk, kc)[1]
                if Mp * panels * blk.nr * 4 > m.l2:
                    rate = OUT_SCATTERED * m.memory_bandwidth
            t += B * Mp * Np * 4 * 2 * (math.ceil(K / kc) - 1) / rate
        return t

    def _write_back(self, config: Config, nt: int) -> float:
        """The output's write-back (read for ownership, written back) and the fused residual's
        read, once the output outgrows L2, at the rate the hardware prefetchers sustain only
        while the loop touches few streams of pages at a time. The M-outer order writes MR
        whole rows at a time, the N-outer one a column strip of every row per N panel; a B
        read in place adds one stream per reduction row, a packed or constant one a single
        stream. (Measured in one-layer bundles: MobileNetV2's 16->96 at 112x112 and 24->144
        at 56x56, ResNet-50's 64->256 at 56x56 and 128->512 at 28x28 are fastest with B packed
        in the M-outer order, 0.63-0.90x of reading it in place in the N-outer order, which the
        model had ranked first for all four.)"""
        p, blk, m = self.pat, self.block(config), self.machine
        out = p.m.size * p.n.size * 4
        if out <= m.l2:
            return 0.0
        fe = self.fused_epilogue
        reads = 1 if fe is not None and fe.residual is not None and \
            self._fuses_epilogue(config) else 0
        rows = p.m.size if config["parallel"] != "m" and nt > 1 else blk.mr
        streams = rows + (p.k.size if config["b"] in ("direct", "window") else 1)
        rate = OUT_STREAMED if streams <= PREFETCH_STREAMS else OUT_SCATTERED
        return out * (2 + reads) / (rate * m.memory_bandwidth)

    def in_place_input(self, config: Config) -> int | None:
        """The input (its position) whose memory the output may take over: the fused
        residual, where the micro-kernel reads each residual element right before it stores
        the output element at the same place and nothing else in the kernel touches either
        first. That holds when the tile is finished in one call (one K block; pixel mode keeps
        partial tiles in a scratch) and the residual is no operand of the product. Reading a
        line and then writing it saves the read-for-ownership of a separate output (ResNet-50's
        64->256 at 56x56 with its residual: 0.85-0.91x). Only the micro-kernel, whose pointer
        parameters carry no `noalias`, touches the two buffers then: no loop of the kernel,
        whose accesses carry alias scopes, loads or stores them (DESIGN: no noalias on
        parameters that may share memory)."""
        fe = self.fused_epilogue
        if fe is None or fe.residual is None:
            return None
        if config["b"] != "pixels" and not (self._fuses_epilogue(config)
                                            and int(config["kc"]) >= self.pat.k.size):
            return None
        res, out = fe.residual, self.outputs[0]
        operands = {self.pat.a.tensor, self.pat.b.tensor}
        operands |= _depends(self.pat.a.tensor) | _depends(self.pat.b.tensor)
        if res.shape != out.shape or res.dtype != out.dtype or res in operands:
            return None
        return next((i for i, t in enumerate(self.inputs) if t is res), None)

    def _blocks_m(self) -> bool:
        """Whether the blocked order is offered: A (its rows over any K block) outgrows half
        of L2, so that the N-outer order would stream it from memory once per N panel."""
        p = self.pat
        return p.m.size * min(p.k.size, KC_OPTIONS[-1]) * 4 > self.machine.l2 // 2

    def blocking(self, blk: GemmBlock, kc: int) -> tuple[int, int]:
        """M tiles per M block and N panels per chunk of the blocked order (GotoBLAS's mc and
        nc): an A block of MR-row tiles K-block deep fills half of L2, across which each B
        micro-panel stays in L1; a chunk's K block of B panels fills half of this core's L3
        share, and there are at least as many chunks as cores to share out."""
        p, m = self.pat, self.machine
        kc = min(kc, p.k.size)
        mt, nt = math.ceil(p.m.size / blk.mr), math.ceil(p.n.size / blk.nr)
        tiles = max(1, min(mt, m.l2 // 2 // (kc * blk.mr * 4)))
        panels = max(1, min(nt, m.l3 // 2 // (kc * blk.nr * 4),
                            math.ceil(nt / max(1, m.cores))))
        return tiles, panels

    def chunk_panels(self, blk: GemmBlock) -> int:
        """N panels per chunk of the M-outer order: all of them while B fits in half of L2,
        else as many as fill a quarter of it (the rest: A, the output and residual streaming
        by, which evict a B of most of L2 before the next M tile reads it again).
        Chunks of fewer than CHUNK_MIN_PANELS panels would be the N-outer order in disguise
        (a deep K: GEMM 1024 measured 1.3x slower so): B is then not chunked."""
        p, l2 = self.pat, self.machine.l2
        nt = math.ceil(p.n.size / blk.nr)
        panel = p.k.size * blk.nr * 4
        chunk = l2 // 4 // panel
        return nt if nt * panel <= l2 // 2 or chunk < CHUNK_MIN_PANELS else chunk

    def _padding_copy(self) -> float:
        """Seconds of the copy of an unpadded result into a padded output: a contiguous
        vector copy per image row (ResNet-50's 64->64 1x1 at 56: 0.06-0.08 ms for 200k
        floats, which made its direct schedule slower than pixel mode's padded stores)."""
        p = self.pat
        lanes = self.target.vector_lanes_f32
        return p.batch.size * p.m.size * p.n.size * PACK_CONTIGUOUS_CYCLES * \
            self.line_floats / lanes / self.machine.hz

    def stores_padded(self, config: Config) -> bool:
        """Whether pixel mode's tiles store straight into a padded output: each tile within
        one output row, the epilogue applied in registers (the padding stays zero)."""
        fe = self.fused_epilogue
        return (config["b"] == "pixels" and self.pixels is not None and fe is not None
                and fe.residual is None
                and PixelTiling.of(self.pixel_window(config), self.block(config).mr).g == 1)

    def _fuses_epilogue(self, config: Config) -> bool:
        """Whether the GEMM micro-kernel applies the epilogue to finished tiles (see _Builder:
        not in window mode, nor when tiles accumulate in a line-pitched scratch)."""
        if self.fused_epilogue is None or config["b"] == "window":
            return False
        return not _accumulates_line_pitched(self.pat.n.size, self.block(config).nr,
                                             str(config["parallel"]), self.line_floats)

    def _pixels_cost(self, config: Config) -> float:
        """Pixel mode: the FMA work of the tiles (a short one by a shorter micro-kernel),
        against the stream it reads per k step and tile from L2 — NR weights and the lines
        the tile's input pixels span — plus the partial tiles of tap-by-tap calls,
        the output's write-back and the in-place epilogue. (Tap-by-tap calls reuse a tap's
        weights from L1 across a block's tiles, but measured no faster than one call per
        tile: the model leaves that reuse out.)"""
        p, blk, w = self.pat, self.block(config), self.pixel_window(config)
        m, line = self.machine, self.line_floats
        M, K, B = p.m.size, p.k.size, p.batch.size
        tiling = PixelTiling.of(w, blk.mr)
        tiles = tiling.tiles
        nt = math.ceil(M / blk.nr)
        # whole tiles of m_full rows (all MR but in images of short rows), short ones of `tail`
        row_steps = (tiles - tiling.tails) * tiling.m_full / _fma_rate(
            GemmBlock(tiling.m_full, blk.nv, blk.lanes), m)
        if tiling.tails:
            row_steps += tiling.tails * tiling.tail / _fma_rate(
                GemmBlock(tiling.tail, blk.nv, blk.lanes), m)
        compute = row_steps * nt * blk.nr * K
        seg = min(blk.mr, w.out_row)
        # the lines the tile's pixels span, at most one per pixel (channels-last rows)
        lines = tiling.g * min((seg - 1) * w.col_stride + line, seg * line) / line
        # k steps closer than a line (a stem's filter width, channels-last) revisit the same
        # lines
        lines *= min(1.0, w.run_stride / line)
        traffic = tiles * nt * K * (blk.nr * 4 + lines * m.line) / (PIXELS_RATE * m.l2_bandwidth)
        t = max(compute, traffic) + STALL * traffic
        kc = int(config["kc"])  # type: ignore[call-overload]
        if kc < K:
            calls = tiles * nt * (K // w.run_extent) * math.ceil(w.run_extent / kc)
            t += calls * (blk.mr * blk.nr * 8 / m.l1_bandwidth + PIXELS_CALL_CYCLES / m.hz)
        # the transposed stores write parts of lines across the output: lines are read for
        # ownership and written back, from memory when the output outgrows L2; then the
        # epilogue's pass
        out_bytes = M * w.rows * w.out_row * 4
        t += out_bytes * 2 / (m.l2_bandwidth if out_bytes <= m.l2 else m.memory_bandwidth)
        if p.out_begin is not None and not self.stores_padded(config):
            t += self._padding_copy() / B
        if w is not self.pixels:  # the padding copy transposes
            assert self.pixels_cl is not None
            t += math.prod(self.pixels_cl.copy.shape) / B * CHANNELS_LAST_COPY_CYCLES / m.hz
        if self.fused_epilogue is None:  # not fused into the micro-kernel: a pass in place
            t += out_bytes * 2 / m.l2_bandwidth
        elif self.fused_epilogue.residual is not None:  # read next to the stores
            t += out_bytes / (m.l2_bandwidth if out_bytes <= m.l2 else m.memory_bandwidth)
        return B * t

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        """One-core time divided among the threads by the tiles of the parallel loop."""
        t = self.cost(config) if one_core is None else one_core
        p, blk = self.pat, self.block(config)
        n = self.window.size if config["b"] == "window" and self.window else p.n.size
        tiles = p.batch.size * (math.ceil(n / blk.nr) if config["parallel"] == "n"
                                else math.ceil(p.m.size / blk.mr))
        if config["parallel"] == "blocked":
            nt = math.ceil(n / blk.nr)
            tiles = p.batch.size * math.ceil(nt / self.blocking(blk, int(config["kc"]))[1])
        if config["b"] == "pixels":  # the parallel loop runs over channel tiles x blocks
            tiles = p.batch.size * math.ceil(p.m.size / blk.nr) * PixelTiling.of(
                self.pixel_window(config), blk.mr).blocks
        threads = self.machine.cores
        if 2 * p.batch.size * p.m.size * p.n.size * p.k.size < 2 * PARALLEL_MIN_MACS:
            threads = 1
        return t * math.ceil(tiles / threads) / tiles

    # build ------------------------------------------------------------------------------------
    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        return _Builder(self, config, name).build()


def _accumulates_line_pitched(n: int, nr: int, parallel: str, line_floats: int) -> bool:
    """Whether N tiles run on different threads ("n" order, several) on a row pitch that is
    not a whole number of cache lines: they then accumulate in a line-pitched scratch."""
    return bool(n % line_floats) and parallel != "m" and math.ceil(n / nr) > 1


def _set_conflicts(stride: int, rows: int) -> bool:
    """Whether `rows` rows `stride` floats apart crowd into too few L1 sets: with 4 KiB per
    cache way, rows a multiple of 4 KiB apart share one set, and more rows than the set has
    ways (8) evict each other between k steps (measured: 6 or 7 rows per set cost nothing)."""
    period = 4096 // math.gcd(stride * 4, 4096)  # rows before the set index repeats
    return math.ceil(rows / period) > 8


class _Builder:
    def __init__(self, space: GemmSpace, config: Config, name: str) -> None:
        self.s = space
        self.p = space.pat
        self.cfg = config
        self.name = name
        self.blk = space.block(config)
        self.kc = int(config["kc"])  # type: ignore[call-overload]
        self.a_mode = str(config["a"])
        self.b_mode = str(config["b"])
        self.pw = space.pixel_window(config) if self.b_mode == "pixels" else None
        self.buffers: list[Buffer] = []
        self.bufs: dict[int, Buffer] = {}
        self.transforms: dict[int, object] = {}

    def _folds_into_packing(self, t: te.Tensor) -> bool:
        """Whether the packing should read `t`, an element-wise pre stage that only B reads,
        through its expression rather than from a copy."""
        p = self.p
        if t not in p.pre or t.op is None or isinstance(t.op.body, te.Reduce) or \
                not self.s.only_b_reads(t):
            return False
        # folding costs a clamp and a select per packed element, the copy one pass over the
        # tensor: worth it only when the packing reads each element a few times at most
        # (strided windows), not for 3x3 stride-1 windows (9 times; measured 1.3-1.8x slower)
        packed = p.batch.size * p.n.size * p.k.size
        return packed <= 3 * math.prod(t.shape)

    def _stride_split(self) -> tuple[te.Tensor, te.Load] | None:
        """(split tensor, B load rewritten to read it) when B's last index is `s * n + k`
        with n the innermost N axis, s > 1, and k a function of reduction axes only."""
        p = self.p
        load = p.b
        t = load.tensor
        if t.op is not None and t.op.inline or len(load.indices) < 2:
            return None
        n_axes = [v for v, _ in p.n.nonunit]
        if not n_axes:
            return None
        n_last = n_axes[-1]
        last = load.indices[-1]
        f = normalize(last)
        if f is None or not f.depends_only_linearly(n_last):
            return None
        stride = f.coefficient(n_last)
        if stride <= 1 or any(te.mentions(ix, n_last) for ix in load.indices[:-1]):
            return None
        rest = normalize(last - n_last * stride)
        if rest is None or any(te.mentions(rest.to_expr(), v) for v in p.n.vars + p.batch.vars):
            return None
        k_part = rest.to_expr()
        if not any(te.mentions(k_part, v) for v, e in zip(p.k.vars, p.k.extents, strict=True)
                   if e > 1):
            return None  # no taps along the row (1x1 strided): the split would copy unused data
        if any(isinstance(a, te.Var) and c < 0 for a, c in rest.terms.values()) or rest.const < 0:
            return None  # the residue and quotient below assume a non-negative offset
        width = t.shape[-1]

        def body(q: te.Var, *idx: te.Var) -> te.Expr:
            col = idx[-1] * stride + q
            clamped = te.minimum(col, _c(width - 1))
            return te.select(te.Binary("lt", col, _c(width)), t[(*idx[:-1], clamped)],
                             te.Const(0.0, t.dtype))

        split = te.compute((stride, *t.shape[:-1], _round_up(width, stride) // stride), body,
                           "strided_split")
        new_load = split[(k_part % stride, *load.indices[:-1], n_last + k_part // stride)]
        assert isinstance(new_load, te.Load)
        return split, new_load

    def _inline(self, t: te.Tensor) -> te.Expr | None:
        if t.op is not None and (t.op.inline or id(t) in self.folded):
            return t.op.body
        return None

    def _add(self, dtype: str, shape: tuple[int, ...], role: str) -> Buffer:
        b = Buffer(f"{role[0]}{len(self.buffers)}", dtype, shape, role)
        self.buffers.append(b)
        return b

    def build(self) -> BuiltKernel:
        s, p, blk = self.s, self.p, self.blk
        M, N, K = p.m.size, p.n.size, p.k.size
        self.mt, self.nt = math.ceil(M / blk.mr), math.ceil(N / blk.nr)
        # a grouped convolution's weights: one packed A per group
        self.groups = dict(zip(p.batch.vars, p.batch.extents, strict=True))[p.group] \
            if p.group is not None else 1
        # pixel mode: output-channel tiles of NR (its vectors hold channels, its rows pixels)
        self.ct = math.ceil(M / blk.nr)
        for i, t in enumerate(s.inputs):
            shape = t.shape
            if self.a_mode == "const" and i == s.a_const and self.b_mode == "pixels":
                assert self.pw is not None
                shape = (self.ct, K, blk.nr)
                self.transforms[i] = self._const_packer(p.a, p.m, blk.nr, self.ct,
                                                        self.pw.k_group)
            elif self.a_mode == "const" and i == s.a_const:
                shape = (self.groups * self.mt, K, blk.mr)
                self.transforms[i] = self._const_packer(
                    p.a, p.m, blk.mr, self.mt,
                    s.window.k_group if self.b_mode == "window" else None,  # type: ignore[union-attr]
                    grouped=True)
            if self.b_mode == "const" and i == s.b_const:
                shape = (self.nt, K, blk.nr)
                self.transforms[i] = self._const_packer(p.b, p.n, blk.nr, self.nt)
            self.bufs[id(t)] = self._add(t.dtype, shape, "input")
        out = s.outputs[0]
        self.out = self._add(out.dtype, out.shape, "output")
        self.bufs[id(out)] = self.out
        # A padded output (GemmPattern.out_begin): pixel mode's tiles store into it where
        # they can (stores_padded); otherwise the kernel computes the unpadded output into a
        # scratch, as it would any output, and copies it in by image rows at the end.
        self.padded = self.out if p.out_begin is not None else None
        if self.padded is not None and not s.stores_padded(self.cfg):
            self.out = self._add(out.dtype, p.product.shape, "scratch")
        # B read with a stride along the packed rows (strided convolutions): the packing would
        # gather; instead one pass splits B's last axis by residue (x = s*j + q -> [q][..][j])
        # and the packing copies contiguous runs of the split
        self.split = self._stride_split() if self.b_mode == "pack" else None
        # a padding copy that only the packed B operand reads is folded into the packing
        # (its clamped loads make it a vectorised select there): one pass over the input less
        self.folded = {id(p.b.tensor)} if self.b_mode == "pack" and self.split is None and \
            self._folds_into_packing(p.b.tensor) else set()
        # pixel mode's window, over B as read or over its channels-last copy (which then
        # takes the place of the padding copy)
        self.cl = s.pixels_cl if self.b_mode == "pixels" and \
            self.cfg.get("layout") == "channels_last" else None
        if self.cl is not None:
            self.folded.add(id(p.b.tensor))
            self.bufs[id(self.cl.copy)] = self._add("float32", self.cl.copy.shape, "scratch")
        for t in p.pre:
            if id(t) not in self.bufs and not t.op.inline and id(t) not in self.folded:  # type: ignore[union-attr]
                self.bufs[id(t)] = self._add(t.dtype, t.shape, "scratch")
        if self.split is not None:
            self.bufs[id(self.split[0])] = self._add("float32", self.split[0].shape, "scratch")
        nb = p.batch.size
        self.ap = self._add("float32", (nb, self.mt, K, blk.mr), "scratch") \
            if self.a_mode == "pack" else None
        self.bp = self._add("float32", (nb, self.nt, K, blk.nr), "scratch") \
            if self.b_mode == "pack" else None
        self.win = s.window if self.b_mode == "window" else None
        if self.b_mode == "pixels":
            assert self.pw is not None
            self.tiling = PixelTiling.of(self.pw, blk.mr)
            if self.kc < K:  # partial tiles between calls
                items = nb * self.ct * self.tiling.blocks
                self.part = self._add("float32", (items * self.tiling.gb * self.tiling.tpr,
                                                  blk.mr * blk.nr), "scratch")
        # Where the micro-kernels accumulate: the output itself, or a scratch whose row pitch
        # is a whole number of cache lines. N tiles of different threads then never share a
        # line: with a pitch like 196 floats, the tiles' edges share lines that the threads
        # store to on every K block (false sharing measured 3x slower at 2 threads).
        self.acc, self.ld = self.out, N
        line = s.line_floats
        if self.win is not None:  # the virtual-column output
            self.nt = math.ceil(self.win.size / blk.nr)
            self.ld = _round_up(self.win.size, line)
            self.acc = self._add("float32", (nb, M, self.ld), "scratch")
        elif (_accumulates_line_pitched(N, blk.nr, str(self.cfg["parallel"]), line)
              and self.b_mode != "pixels"):  # pixel mode stores its tiles into the output
            self.ld = _round_up(N, line)
            self.acc = self._add("float32", (nb, M, self.ld), "scratch")
        lanes = self.s.target.vector_lanes_f32
        stages: list[Stmt] = [lower_stage(default_schedule(t, lanes), self.bufs)
                              for t in p.pre if id(t) in self.bufs]
        if self.cl is not None:
            stages += self._channels_last_copy()
        if self.split is not None:
            stages.append(lower_stage(default_schedule(self.split[0], lanes), self.bufs))
        stages += self._main()
        if self.padded is not None:
            if self.out is not self.padded:
                stages.append(self._copy_into_padded())
            stages.append(self._zero_border())
        kernel = Kernel(self.name, self.buffers, stages)
        return BuiltKernel(kernel, dict(self.transforms))  # type: ignore[arg-type]

    # constant packing at compile time -----------------------------------------------------------
    def _const_packer(self, load: te.Load, own: Group, r: int, tiles: int,
                      k_group: Group | None = None, grouped: bool = False):
        """The compile-time packing of a constant operand into [tile][k][r] panels (for a
        grouped convolution's weights, `grouped`: [group][tile][k][r])."""
        s = self.s
        K = self.p.k.size
        size = own.size
        flat_expr_vars = (te.Var("of"), te.Var("kf"))
        flat = s._flat(load, own, *flat_expr_vars, k_group=k_group)

        groups, group = (self.groups, self.p.group) if grouped else (1, None)

        def pack(arr: np.ndarray) -> np.ndarray:
            of = np.arange(tiles * r).reshape(1, tiles, 1, r)
            kf = np.arange(K).reshape(1, 1, K, 1)
            valid = of < size
            env: dict[te.Var, object] = {flat_expr_vars[0]: np.minimum(of, size - 1),
                                         flat_expr_vars[1]: kf}
            if group is not None:
                env[group] = np.arange(groups).reshape(groups, 1, 1, 1)
            idx = evaluate(flat, env)
            vals = arr.reshape(-1)[np.broadcast_to(idx, (groups, tiles, K, r))]
            return np.where(valid, vals, 0).astype(np.float32).reshape(groups * tiles, K, r)

        return pack

    # the main nest --------------------------------------------------------------------------------
    def _operand_ptr(self, which: str, bvars: dict[te.Var, te.Expr], tile: te.Expr,
                     k0: te.Expr, bidx: te.Expr) -> tuple[BufPtr, te.Expr, te.Expr]:
        """Pointer and (row stride, k stride) of operand `which` at tile `tile`, k offset k0."""
        p, blk = self.p, self.blk
        K = p.k.size
        if which == "a":
            mode, load, own, r = self.a_mode, p.a, p.m, blk.mr
            packed = self.ap
            const_i = self.s.a_const
        else:
            mode, load, own, r = self.b_mode, p.b, p.n, blk.nr
            packed = self.bp
            const_i = self.s.b_const
        if mode == "const":
            buf = self.bufs[id(self.s.inputs[const_i])]  # type: ignore[index]
            if which == "a" and p.group is not None:  # this group's packed weights
                tile = bvars[p.group] * self.mt + tile
            return BufPtr(buf, simplify_index(tile * (K * r) + k0 * r)), _c(1), _c(r)
        if mode == "pack":
            assert packed is not None
            return BufPtr(packed, (bidx * self.mt_or_nt(which) + tile) * (K * r) + k0 * r), \
                _c(1), _c(r)
        flat = self.s._flat(load, own, tile * r, k0)
        flat = te.substitute(flat, bvars)
        own_stride, k_stride = self.s.direct_strides[id(load)]  # found by _direct_ok
        buf = self.bufs[id(load.tensor)]
        return BufPtr(buf, simplify_index(flat)), _c(own_stride), _c(k_stride)

    def _source(self, load: te.Load, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        """The packed operand's value at the loop variables of `vmap`, as buffer loads."""
        return simplify_loads(_Converter(self.bufs, self._inline)(te.substitute(load, vmap)))

    def mt_or_nt(self, which: str) -> int:
        return self.mt if which == "a" else self.nt

    def _pack_stage(self, which: str, bvar: te.Var, bvars: dict[te.Var, te.Expr],
                    tile: te.Var) -> Stmt:
        """Copy one operand tile into its micro-panel: panel[b][tile][k][r], zero past the
        edge. The copy loops run over the operand's own axes (not the flattened index), so
        the innermost loop walks a contiguous row of the source: im2col without divisions."""
        p, blk = self.p, self.blk
        K = p.k.size
        load, own, r, buf = (p.a, p.m, blk.mr, self.ap) if which == "a" else \
            (p.b if self.split is None else self.split[1], p.n, blk.nr, self.bp)
        assert buf is not None
        t0 = tile * r
        valid = te.minimum(_c(r), _c(own.size) - t0)
        vmap: dict[te.Var, te.Expr] = dict(bvars)
        # reduce axes: one loop each; their flat index is affine
        kloops: list[tuple[te.Var, int]] = []
        kflat: te.Expr = _c(0)
        for v, e in zip(p.k.vars, p.k.extents, strict=True):
            kflat = kflat * e
            if e == 1:
                vmap[v] = _c(0)
                continue
            lv = te.Var("pk")
            vmap[v] = lv
            kloops.append((lv, e))
            kflat = kflat + lv
        # own axes: the last one innermost over its part of the tile, the others flattened
        axes = own.nonunit
        for v, e in zip(own.vars, own.extents, strict=True):
            if e == 1:
                vmap[v] = _c(0)
        inner = te.Var("pr")
        if len(axes) > 1:
            # the own axes as one run when the operand holds them contiguously (a 1x1
            # convolution's pixels): one copy per k row, not one per image row it spans
            flat = {**vmap, **Group([v for v, _ in axes], [e for _, e in axes]).unflatten(
                t0 + inner)}
            if not divides(Store(buf, _c(0), self._source(load, flat)), inner):
                vmap, axes = flat, []
        if len(axes) <= 1:
            if axes:
                vmap[axes[0][0]] = t0 + inner
            dst_r: te.Expr = inner
            lo: te.Expr = _c(0)
            hi: te.Expr = valid
            wrap = None
        else:
            last_v, last_e = axes[-1]
            outer_group = Group([v for v, _ in axes[:-1]], [e for _, e in axes[:-1]])
            of = te.Var("po")
            vmap.update(outer_group.unflatten(of))
            vmap[last_v] = inner
            dst_r = of * last_e + inner - t0
            lo = te.maximum(_c(0), t0 - of * last_e)
            hi = te.minimum(_c(last_e), t0 + valid - of * last_e)
            wrap = (of, t0 // last_e, (t0 + valid - 1) // last_e + 1)
        value = self._source(load, vmap)
        panel = (bvar * self.mt_or_nt(which) + tile) * K
        dst = simplify_index((panel + kflat) * r + dst_r)
        body: Stmt = For(inner, hi, "vectorize", Store(buf, dst, value), start=lo)
        if wrap is None and isinstance(value, BufLoad) and _unit_stride(value.index, inner):
            # the next tile's run of this row, one tile ahead: each k row is a stream of its
            # own (a plane apart), more streams than the hardware prefetchers follow
            ahead = [Prefetch(value.buf, simplify_index(te.substitute(
                value.index, {inner: _c(r + line * self.s.line_floats)})))
                for line in range(math.ceil(r / self.s.line_floats))]
            body = Seq([*ahead, body])
        if wrap is not None:
            body = For(wrap[0], wrap[2], "serial", body, start=wrap[1])
        for lv, e in reversed(kloops):
            body = For(lv, _c(e), "serial", body)
        if own.size % r:
            kz, rz = te.Var("zk"), te.Var("zr")
            zero = For(kz, _c(K), "serial", For(rz, _c(r), "serial", Store(
                buf, (panel + kz) * r + rz, te.Const(0.0, "float32")), start=valid))
            body = Seq([body, zero])
        return body

    def _main(self) -> list[Stmt]:
        p, blk = self.p, self.blk
        M, N, K = p.m.size, p.n.size, p.k.size
        nb = p.batch.size
        par = str(self.cfg["parallel"])
        macs = nb * M * N * K
        outer_kind = "parallel" if macs >= PARALLEL_MIN_MACS else "serial"
        bflat = te.Var("bf")
        bvars = p.batch.unflatten(bflat)
        io, jo, kb = te.Var("io"), te.Var("jo"), te.Var("kb")
        stages: list[Stmt] = []

        # the epilogue in the micro-kernel's last call on a tile, when the tile is stored
        # straight into the output (not into a line-pitched accumulator)
        fused = self.s.fused_epilogue if self.acc is self.out else None
        nk = math.ceil(K / self.kc)

        def tile_call(io_: te.Expr, jo_: te.Expr, k0: te.Expr, klen: te.Expr,
                      acc: te.Expr) -> Stmt:
            a_ptr, a_rs, a_ks = self._operand_ptr("a", bvars, io_, k0, bflat)
            b_ptr, _, b_ks = self._operand_ptr("b", bvars, jo_, k0, bflat)
            c_off = (bflat * M + io_ * blk.mr) * self.ld + jo_ * blk.nr
            m_valid = te.minimum(_c(blk.mr), _c(M) - io_ * blk.mr)
            n_valid = te.minimum(_c(blk.nr), _c(N) - jo_ * blk.nr)
            last = _c(1) if nk == 1 else te.select(te.Binary("eq", kb, _c(nk - 1)), _c(1), _c(0))
            return Call(blk.routine, [a_ptr, a_rs, a_ks, b_ptr, b_ks, BufPtr(self.acc, c_off),
                                      _c(self.ld), klen, m_valid, n_valid, acc,
                                      last if fused else _c(0),
                                      *self._fused_args(fused, io_ * blk.mr, c_off)])

        def k_blocks(body_of) -> Stmt:
            """body_of(k0, klen, accumulate) over the K blocks."""
            if self.kc >= K:
                return body_of(_c(0), _c(K), _c(0))
            k0 = kb * self.kc
            return For(kb, _c(nk), "serial",
                       body_of(k0, te.minimum(_c(self.kc), _c(K) - k0), te.minimum(kb, _c(1))))

        # packing of runtime operands that the main loop does not pack itself
        if self.a_mode == "pack":
            t = te.Var("pio")
            stages.append(self._fused_loop(bflat, t, nb, self.mt, outer_kind,
                                           self._pack_stage("a", bflat, bvars, t)))
        if self.b_mode == "pack" and par == "m":
            t = te.Var("pjo")
            stages.append(self._fused_loop(bflat, t, nb, self.nt, outer_kind,
                                           self._pack_stage("b", bflat, bvars, t)))
        if self.win is not None:
            stages.append(self._window_main(bflat, bvars, par, outer_kind))
            return stages
        if self.b_mode == "pixels":
            stages.append(self._pixels_main(outer_kind))
            return stages
        if par == "n":
            body: list[Stmt] = []
            if self.b_mode == "pack":
                body.append(self._pack_stage("b", bflat, bvars, jo))
            body.append(k_blocks(lambda k0, kl, acc: For(
                io, _c(self.mt), "serial", tile_call(io, jo, k0, kl, acc))))
            if fused is None:
                body.append(self._epilogue(bvars, bflat, _c(0), _c(M), jo * blk.nr,
                                           te.minimum(_c(blk.nr), _c(N) - jo * blk.nr)))
            stages.append(self._fused_loop(bflat, jo, nb, self.nt, outer_kind, Seq(body)))
        elif par == "blocked":
            # GotoBLAS's order: chunks of N panels (parallel) > K blocks > M blocks > N panels
            # > M tiles (GemmSpace.blocking)
            tiles, panels = self.s.blocking(blk, self.kc)
            jc, mb = te.Var("jc"), te.Var("mb")
            j0, i0 = jc * panels, mb * tiles
            jn = te.minimum(_c(panels), _c(self.nt) - j0)
            i_n = te.minimum(_c(tiles), _c(self.mt) - i0)
            body = []
            if self.b_mode == "pack":
                body.append(For(jo, jn, "serial", self._pack_stage("b", bflat, bvars, j0 + jo)))
            body.append(k_blocks(lambda k0, kl, acc: For(
                mb, _c(math.ceil(self.mt / tiles)), "serial", For(jo, jn, "serial", For(
                    io, i_n, "serial", tile_call(i0 + io, j0 + jo, k0, kl, acc))))))
            if fused is None:
                n0 = j0 * blk.nr
                body.append(self._epilogue(bvars, bflat, _c(0), _c(M), n0,
                                           te.minimum(_c(panels * blk.nr), _c(N) - n0)))
            stages.append(self._fused_loop(bflat, jc, nb, math.ceil(self.nt / panels),
                                           outer_kind, Seq(body)))
        else:
            # M tiles outermost within chunks of N panels that stay in L2 across them
            # (GemmSpace.chunk_panels); one chunk when all of B fits
            cp = self.s.chunk_panels(blk)
            chunks = math.ceil(self.nt / cp)
            f = te.Var("mc")
            ch, io_ = (f // self.mt, f % self.mt) if chunks > 1 else (_c(0), f)
            j0 = ch * cp
            jn = te.minimum(_c(cp), _c(self.nt) - j0)
            body = [k_blocks(lambda k0, kl, acc: For(
                jo, jn, "serial", tile_call(io_, j0 + jo, k0, kl, acc)))]
            if fused is None:
                n0 = j0 * blk.nr
                body.append(self._epilogue(bvars, bflat, io_ * blk.mr,
                                           te.minimum(_c(blk.mr), _c(M) - io_ * blk.mr),
                                           n0, te.minimum(_c(cp * blk.nr), _c(N) - n0)))
            stages.append(self._fused_loop(bflat, f, nb, chunks * self.mt, outer_kind,
                                           Seq(body)))
        return stages

    def _window_main(self, bflat: te.Var, bvars: dict[te.Var, te.Expr], par: str,
                     kind: str) -> Stmt:
        """Window mode: per tile, the taps and run blocks accumulate micro-kernel calls into
        the virtual-column scratch; the epilogue then compacts each finished panel."""
        p, blk, w = self.p, self.blk, self.win
        assert w is not None
        M, K, V = p.m.size, p.k.size, w.size
        io, jo, kb = te.Var("io"), te.Var("jo"), te.Var("kb")
        tap_vars = [te.Var("tap") for _ in w.taps]
        a_buf = self.bufs[id(self.s.inputs[self.s.a_const])]  # type: ignore[index]
        b_buf = self.bufs[id(p.b.tensor)]
        base = self._window_base(w, bvars)
        tap_off: te.Expr = _c(0)
        tap_flat: te.Expr = _c(0)
        for tv, (_, e, coef) in zip(tap_vars, w.taps, strict=True):
            tap_off = tap_off + tv * coef
            tap_flat = tap_flat * e + tv
        nk = math.ceil(w.run_extent / self.kc) if self.kc < w.run_extent else 1
        kc = min(self.kc, w.run_extent)
        c0 = kb * kc

        def call() -> Stmt:
            a_off = io * (K * blk.mr) + (tap_flat * w.run_extent + c0) * blk.mr
            b_off = base + c0 * w.run_stride + tap_off + jo * blk.nr
            c_off = (bflat * M + io * blk.mr) * self.ld + jo * blk.nr
            return Call(blk.routine, [
                BufPtr(a_buf, simplify_index(a_off)), _c(1), _c(blk.mr),
                BufPtr(b_buf, simplify_index(b_off)), _c(w.run_stride),
                BufPtr(self.acc, simplify_index(c_off)), _c(self.ld),
                te.minimum(_c(kc), _c(w.run_extent) - c0),
                te.minimum(_c(blk.mr), _c(M) - io * blk.mr),
                te.minimum(_c(blk.nr), _c(V) - jo * blk.nr),
                te.minimum(kb + tap_flat, _c(1)), _c(0), *self._fused_args(None, _c(0), _c(0))])

        def over_k(body: Stmt) -> Stmt:
            for tv, (_, e, _) in reversed(list(zip(tap_vars, w.taps, strict=True))):
                body = For(tv, _c(e), "serial", body)
            return For(kb, _c(nk), "serial", body)

        if par == "n":
            body = Seq([over_k(For(io, _c(self.mt), "serial", call())),
                        self._window_epilogue(bvars, bflat, _c(0), _c(M), jo * blk.nr,
                                              te.minimum(_c(V), jo * blk.nr + blk.nr))])
            return self._fused_loop(bflat, jo, p.batch.size, self.nt, kind, body)
        body = Seq([For(jo, _c(self.nt), "serial", over_k(call())),
                    self._window_epilogue(bvars, bflat, io * blk.mr,
                                          te.minimum(_c(blk.mr), _c(M) - io * blk.mr),
                                          _c(0), _c(V))])
        return self._fused_loop(bflat, io, p.batch.size, self.mt, kind, body)

    def _window_base(self, w: Window, bvars: dict[te.Var, te.Expr]) -> te.Expr:
        """Where a window reads for the batch `bvars` at output pixel 0 and tap 0."""
        zero = {v: _c(0) for v in self.p.n.vars + self.p.k.vars}
        return te.substitute(w.flat, {**zero, **bvars})

    def _window_epilogue(self, bvars: dict[te.Var, te.Expr], bflat: te.Expr, m0: te.Expr,
                         mlen: te.Expr, v0: te.Expr, v1: te.Expr) -> Stmt:
        """out = epilogue(scratch + init) for rows [m0, m0+mlen) and the output pixels whose
        virtual columns lie in [v0, v1): one loop over output rows, one over the row."""
        p, w = self.p, self.win
        assert w is not None
        M, N = p.m.size, p.n.size
        i, r, j = te.Var("ei"), te.Var("er"), te.Var("ej")
        nvars = [v for v, _ in p.n.nonunit]
        n_vmap: dict[te.Var, te.Expr] = {v: _c(0) for v in p.n.vars}
        n_vmap[nvars[-1]] = j
        if len(nvars) == 2:
            n_vmap[nvars[0]] = r
        mi = m0 + i
        acc = BufLoad(self.acc, simplify_index((bflat * M + mi) * self.ld + r * w.row + j))
        out_index = simplify_index((bflat * M + mi) * N + r * w.out_row + j)
        value = self._epilogue_value(bvars, mi, n_vmap, acc)
        lo = te.maximum(_c(0), v0 - r * w.row)
        hi = te.minimum(_c(w.out_row), v1 - r * w.row)
        return For(i, mlen, "serial", For(
            r, (v1 + w.row - 1) // w.row, "serial",
            For(j, hi, "vectorize", Store(self.out, out_index, value), start=lo),
            start=v0 // w.row))

    def _pixels_main(self, kind: str) -> Stmt:
        """Pixel mode: the convolution micro-kernel (targets/cpu/microkernels.py, _ConvWriter)
        with output pixels as its rows, read in place from the (padded) input, and output
        channels as its vector columns, read from the weights packed as [channel tile][tap,
        input channel][NR]. Tiles run over the output pixels of an image numbered across
        rows, so no lane is wasted on rows shorter than a vector multiple (7x7, 14x14
        layers), and strided rows need no gather (the strides are the micro-kernel's row
        offsets). Each tile is stored transposed straight into the output, after the fused
        epilogue (bias, ReLU/Clip, residual: GemmSpace._clamped_bias) in registers; any other
        epilogue runs in place over each finished block of tiles. With kc >= K one call per
        tile keeps the whole reduction, taps included, in registers; otherwise one call per
        tap and channel block reuses that tap's weights from L1 across the block's tiles."""
        p, blk, w = self.p, self.blk, self.pw
        assert w is not None
        M, K, nb = p.m.size, p.k.size, p.batch.size
        P, pixel_offset = self._output_plane()
        tiling = self.tiling
        g, tpr, gb, m_full = tiling.g, tiling.tpr, tiling.gb, tiling.m_full
        ngroups, nblk = tiling.groups, tiling.blocks
        nt = self.ct
        f, gi, ti = te.Var("pf"), te.Var("pg"), te.Var("pt")
        bflat = f // (nt * nblk)
        if M * K * 4 <= self.s.machine.l2 // 2:
            # all the weights stay in L2: the channel tiles of one block of pixels run back
            # to back, reusing its input lines from L1/L2 instead of re-reading the input
            jo, blk_i = f % nt, f // nt % nblk
        else:  # each channel tile's weights once through the cache, all blocks in turn
            jo, blk_i = f // nblk % nt, f % nblk
        bvars = p.batch.unflatten(bflat)
        w_buf = self.bufs[id(self.s.inputs[self.s.a_const])]  # type: ignore[index]
        x_buf = self.bufs[id(p.b.tensor if self.cl is None else self.cl.copy)]
        base = self._window_base(w, bvars)
        taps = [(e, coef) for _, e, coef in w.taps]
        taps = [(1, 0)] * (2 - len(taps)) + taps
        groups_here = te.minimum(_c(gb), _c(ngroups) - blk_i * gb)
        w_off = jo * (K * blk.nr)
        geometry = [_c(w.out_row), _c(w.row), _c(w.col_stride), _c(w.run_stride)]
        n_valid = te.minimum(_c(blk.nr), _c(M) - jo * blk.nr)
        fused = self.s.fused_epilogue  # else: _pixels_epilogue
        kc = min(self.kc, w.run_extent)
        nk = math.ceil(w.run_extent / kc)
        ntaps = taps[0][0] * taps[1][0]
        kb, t1, t2 = te.Var("kb"), te.Var("t1"), te.Var("t2")

        def call(rows: int, gi: te.Expr, ti: te.Expr) -> Stmt:
            """The micro-kernel of `rows` rows on tile (gi, ti) of the block: every tile is
            whole (the short last tile of a row or image has its own, shorter kernel)."""
            oh0 = (blk_i * gb + gi) * g
            ow0 = ti * blk.mr
            x_tile = base + oh0 * w.row + ow0 * w.col_stride
            out_off = (bflat * M + jo * blk.nr) * P + pixel_offset(oh0, ow0)
            # a tile within one output row whose pixels lie less than a line apart
            near = g == 1 and (rows - 1) * w.col_stride < self.s.line_floats
            routine = conv_routine(GemmBlock(rows, blk.nv, blk.lanes), near)
            valid = [_c(rows), _c(rows), n_valid]
            finish = self._fused_args(fused, jo * blk.nr, out_off)
            if self.kc >= K:
                return Call(routine, [
                    BufPtr(x_buf, simplify_index(x_tile)), *geometry,
                    _c(taps[0][0]), _c(taps[0][1]), _c(taps[1][0]), _c(taps[1][1]),
                    BufPtr(w_buf, simplify_index(w_off)), _c(blk.nr),
                    _c(w.run_extent * blk.nr),
                    BufPtr(self.out, simplify_index(out_off)), _c(P), _c(w.run_extent), *valid,
                    BufPtr(self.out, _c(0)), _c(1), _c(1), *finish])
            tap = t1 * taps[1][0] + t2
            c0 = kb * kc
            step = kb * ntaps + tap
            return Call(routine, [
                BufPtr(x_buf, simplify_index(x_tile + t1 * taps[0][1] + t2 * taps[1][1]
                                             + c0 * w.run_stride)), *geometry,
                _c(1), _c(0), _c(1), _c(0),
                BufPtr(w_buf, simplify_index(w_off + (tap * w.run_extent + c0) * blk.nr)),
                _c(blk.nr), _c(0),
                BufPtr(self.out, simplify_index(out_off)), _c(P),
                te.minimum(_c(kc), _c(w.run_extent) - c0), *valid,
                BufPtr(self.part, simplify_index(((f * gb + gi) * tpr + ti)
                                                 * (blk.mr * blk.nr))),
                te.select(te.Binary("eq", step, _c(0)), _c(1), _c(0)),
                te.select(te.Binary("eq", step, _c(nk * ntaps - 1)), _c(1), _c(0)), *finish])

        tiles: Stmt
        if not tiling.tail:
            tiles = For(gi, groups_here, "serial", For(ti, _c(tpr), "serial",
                                                       call(m_full, gi, ti)))
        elif g == 1:  # each row's last tile is short
            tiles = For(gi, groups_here, "serial", Seq([
                For(ti, _c(tpr - 1), "serial", call(m_full, gi, ti)),
                call(tiling.tail, gi, _c(tpr - 1))]))
        else:  # the image's last group is short: it ends the last block
            last = te.select(te.Binary("eq", blk_i, _c(nblk - 1)), _c(1), _c(0))
            tiles = Seq([For(gi, groups_here - last, "serial", call(m_full, gi, _c(0))),
                         For(ti, last, "serial", call(tiling.tail, groups_here - 1, _c(0)))])
        nest = tiles if self.kc >= K else For(kb, _c(nk), "serial", For(
            t1, _c(taps[0][0]), "serial", For(t2, _c(taps[1][0]), "serial", tiles)))
        body: list[Stmt] = [nest]
        if fused is None:
            body.append(self._pixels_epilogue(bvars, bflat, jo, blk_i * (gb * g * w.out_row),
                                              gb * g * w.out_row))
        return For(f, _c(nb * nt * nblk), kind if nb * nt * nblk > 1 else "serial", Seq(body))

    def _channels_last_copy(self) -> list[Stmt]:
        """Pixel mode's padded input written channels-last (GemmSpace._channels_last): the
        padding rows and columns zeroed, the inside copied by L x L blocks that the
        transposing routine turns from channel rows into pixel rows."""
        cl = self.cl
        assert cl is not None
        top, left = cl.top, cl.left
        nb, hp, wp, c = cl.copy.shape
        h, w = cl.source.shape[2:]
        lanes = self.s.target.vector_lanes_f32
        dst, xb = self.bufs[id(cl.copy)], self.bufs[id(cl.source)]
        b, r, cb, wb = (te.Var(n) for n in ("cb_n", "cb_r", "cb_c", "cb_w"))

        def zeros(row: te.Expr, col0: int, cols: int) -> Stmt:
            return _zero_pixels(dst, b, row, col0, cols, (hp, wp, c))

        parts: list[Stmt] = []
        if top:
            parts.append(For(r, _c(top), "serial", zeros(r, 0, wp)))
        if hp - top - h > 0:
            parts.append(For(r, _c(hp), "serial", zeros(r, 0, wp), start=_c(top + h)))
        inside: list[Stmt] = []
        if left:
            inside.append(zeros(r, 0, left))
        if wp - left - w > 0:
            inside.append(zeros(r, left + w, wp - left - w))
        src_off = ((b * c + cb * lanes) * h + r - top) * w + wb * lanes
        dst_off = ((b * hp + r) * wp + left + wb * lanes) * c + cb * lanes
        inside.append(For(cb, _c(c // lanes), "serial", For(wb, _c(-(-w // lanes)), "serial", Call(
            transpose_routine(lanes), [BufPtr(xb, simplify_index(src_off)), _c(h * w),
                                       BufPtr(dst, simplify_index(dst_off)), _c(c),
                                       te.minimum(_c(lanes), _c(w) - wb * lanes)]))))
        if nb == 1:  # the rows' loop is the kernel's stage, parallel when large
            kind = "parallel" if c * h * w >= PARALLEL_COPY_MIN else "serial"
            parts.append(For(r, _c(top + h), kind, Seq(inside), start=_c(top)))
            return [bind(x, {b: _c(0)}) for x in parts]
        parts.append(For(r, _c(top + h), "serial", Seq(inside), start=_c(top)))
        return [For(b, _c(nb), "serial", Seq(parts))]

    def _output_plane(self) -> tuple[int, Callable[[te.Expr, te.Expr], te.Expr]]:
        """The output's elements per channel plane, and the offset of output pixel (row,
        column) in its plane: rows of the output row length, or of the padded row pitch
        past the padding's top and left (GemmPattern.out_begin)."""
        w = self.pw
        assert w is not None
        if self.out is not self.padded:
            return w.rows * w.out_row, lambda oh, ow: oh * w.out_row + ow
        hp, wp, top, left = self._padded_plane()
        return hp * wp, lambda oh, ow: (oh + top) * wp + ow + left

    def _padded_plane(self) -> tuple[int, int, int, int]:
        """The padded output's plane (rows, row pitch) and where the unpadded image starts
        in it (rows above, columns left)."""
        assert self.p.out_begin is not None and self.padded is not None
        hp, wp = self.padded.shape[-2:]
        top, left = self.p.out_begin[-2:]
        return hp, wp, top, left

    def _padded_index(self, bflat: te.Expr, mi: te.Expr, oh: te.Expr, ow: te.Expr) -> te.Expr:
        """Where output channel `mi`, pixel (oh, ow) of batch `bflat` lies in the padded
        output."""
        hp, wp, top, left = self._padded_plane()
        return simplify_index(((bflat * self.p.m.size + mi) * hp + oh + top) * wp + ow + left)

    def _copy_into_padded(self) -> Stmt:
        """The unpadded results (of every schedule but pixel mode's tiles that store into the
        padded output) copied inside the padding, one image row at a time."""
        p = self.p
        h, w = p.n.extents
        pl, r, x = te.Var("cp"), te.Var("cr"), te.Var("cx")
        value = BufLoad(self.out, simplify_index((pl * h + r) * w + x))
        return For(pl, _c(p.batch.size * p.m.size), "serial", For(r, _c(h), "serial", For(
            x, _c(w), "vectorize", Store(self.padded, self._padded_index(_c(0), pl, r, x),
                                         value))))  # type: ignore[arg-type]

    def _zero_border(self) -> Stmt:
        """Zeros into the padding of every output plane (the tiles store only inside it):
        the rows above and below whole, the columns left and right of the rows between."""
        p = self.p
        planes = p.batch.size * p.m.size
        hp, wp, top, left = self._padded_plane()
        h, w = p.n.extents
        pl, r = te.Var("zp"), te.Var("zr")
        padded = self.padded
        assert padded is not None

        def fill(row0: int, rows: int, col0: int, cols: int) -> list[Stmt]:
            if rows <= 0 or cols <= 0:
                return []
            return [For(r, _c(rows), "serial",
                        _zero_pixels(padded, pl, r + row0, col0, cols, (hp, wp, 1)))]

        parts = fill(0, top, 0, wp) + fill(top + h, hp - top - h, 0, wp) + \
            fill(top, h, 0, left) + fill(top, h, left + w, wp - left - w)
        return For(pl, _c(planes), "serial", Seq(parts))

    def _fused_args(self, fe: FusedEpilogue | None, channel: te.Expr,
                    out_off: te.Expr) -> list[BufPtr | te.Expr]:
        """The micro-kernels' epilogue arguments: bias (at output channel `channel`), its
        flag, the clamps, the residual (at the tile's output offset `out_off`) and its flag;
        all off for None (pointers then name the output, never read)."""
        if fe is None:
            return epilogue_args(self.out)
        return epilogue_args(
            self.out,
            BufPtr(self.bufs[id(fe.bias)], channel) if fe.bias is not None else None,
            fe.lo, fe.hi,
            BufPtr(self.bufs[id(fe.residual)], simplify_index(out_off))
            if fe.residual is not None else None)

    def _pixels_epilogue(self, bvars: dict[te.Var, te.Expr], bflat: te.Expr, jo: te.Expr,
                         pix0: te.Expr, pixels: int) -> Stmt:
        """Pixel mode's epilogue when it is not fused: in place over channel tile `jo` and
        the block's output pixels [pix0, pix0 + pixels)."""
        p, blk, w = self.p, self.blk, self.pw
        assert w is not None
        M, P = p.m.size, w.rows * w.out_row
        i, j = te.Var("ei"), te.Var("ej")
        nvars = [v for v, _ in p.n.nonunit]
        n_vmap: dict[te.Var, te.Expr] = {v: _c(0) for v in p.n.vars}
        pix = pix0 + j
        if len(nvars) == 2:
            n_vmap[nvars[0]] = pix // w.out_row
            n_vmap[nvars[1]] = pix % w.out_row
        else:
            n_vmap[nvars[0]] = pix
        mi = jo * blk.nr + i
        out_index = simplify_index((bflat * M + mi) * P + pix)
        value = self._epilogue_value(bvars, mi, n_vmap, BufLoad(self.out, out_index))
        if value is None:
            return Seq([])
        return For(i, te.minimum(_c(blk.nr), _c(M) - jo * blk.nr), "serial", For(
            j, te.minimum(_c(pixels), _c(P) - pix0), "vectorize",
            Store(self.out, out_index, value)))

    def _fused_loop(self, bflat: te.Var, t: te.Var, nb: int, nt: int, kind: str,
                    body: Stmt) -> Stmt:
        """for (bflat, t) in nb x nt, as one loop (parallel when worth it)."""
        if nb == 1:
            return For(t, _c(nt), kind if nt > 1 else "serial",
                       bind(body, {bflat: _c(0)}))
        f = te.Var("bt")
        return For(f, _c(nb * nt), kind, bind(body, {bflat: f // nt, t: f % nt}))

    def _epilogue(self, bvars: dict[te.Var, te.Expr], bflat: te.Expr, m0: te.Expr,
                  mlen: te.Expr, n0: te.Expr, nlen: te.Expr) -> Stmt:
        """out = epilogue(acc + init) over rows [m0, m0+mlen) x cols [n0, n0+nlen), in place."""
        p = self.p
        M, N = p.m.size, p.n.size
        i, j = te.Var("ei"), te.Var("ej")
        mi, nj = m0 + i, n0 + j
        out_index = (bflat * M + mi) * N + nj
        acc = BufLoad(self.acc, simplify_index((bflat * M + mi) * self.ld + nj))
        value = self._epilogue_value(bvars, mi, p.n.unflatten(nj), acc)
        if value is None:
            return Seq([])
        return For(i, mlen, "serial",
                   For(j, nlen, "vectorize", Store(self.out, simplify_index(out_index), value)))

    def _epilogue_value(self, bvars: dict[te.Var, te.Expr], mi: te.Expr,
                        n_vmap: dict[te.Var, te.Expr], acc: te.Expr,
                        ) -> te.Expr | None:
        """epilogue(acc + init) at output row `mi` and N axes `n_vmap`; None when it is the
        identity on the accumulator."""
        p = self.p
        vmap = p.axis_values({**bvars, **p.m.unflatten(mi), **n_vmap})
        init = p.init
        has_init = not (isinstance(init, te.Const) and float(init.value) == 0.0)
        conv = _Converter(self.bufs)
        if has_init:
            acc = acc + simplify_loads(conv(te.substitute(init, vmap)))
        if p.epilogue is None:
            return acc if has_init or self.acc is not self.out else None
        e = p.epilogue
        body = te.expand_inline(e.op.body)  # type: ignore[union-attr]
        body = _replace_loads(body, p.product, acc)
        # the epilogue's axes correspond one to one to the product's (same shape)
        axes = {ea.var: vmap[pa.var] for ea, pa in zip(
            e.op.axes, p.product.op.axes, strict=True)}  # type: ignore[union-attr]
        return simplify_loads(conv(te.substitute(body, axes)))


@dataclass
class FusedEpilogue:
    """clamp(acc + bias[channel] + residual, lo, hi); None parts are absent."""

    bias: te.Tensor | None
    residual: te.Tensor | None
    lo: float | None
    hi: float | None


def _clamps(e: te.Expr, t: te.Tensor) -> tuple[float | None, float | None, te.Expr] | None:
    """(lo, hi, x) when `e` is x clamped as ReLU and Clip lower it:
    select(e > hi, hi, select(x < lo, lo, x)), either select optional, NaN passing."""
    lo = hi = None
    while not (isinstance(e, te.Load) and e.tensor is t or isinstance(e, te.Binary)):
        if not (isinstance(e, te.Select) and isinstance(e.cond, te.Binary)
                and e.cond.op in ("lt", "gt") and isinstance(e.cond.b, te.Const)
                and isinstance(e.t, te.Const) and float(e.t.value) == float(e.cond.b.value)
                and repr(e.cond.a) == repr(e.f)):
            return None
        if e.cond.op == "gt" and hi is None and lo is None:
            hi = float(e.t.value)
        elif e.cond.op == "lt" and lo is None:
            lo = float(e.t.value)
        else:
            return None
        e = e.f
    return lo, hi, e


@dataclass(frozen=True)
class PixelTiling:
    """Pixel mode's tiling of an image's output rows. Rows at least MR long are cut into
    tiles of MR pixels; shorter rows are grouped so that a tile covers whole rows."""

    g: int  # output rows per tile
    tpr: int  # tiles per group of g rows
    gb: int  # groups per block (the tiles that share one parallel iteration)
    m_full: int  # pixels in a full tile
    groups: int  # groups of rows in an image
    blocks: int  # blocks in an image
    tail: int  # pixels in the short last tile of each row (g == 1) or of the image; 0: none

    @property
    def tiles(self) -> int:
        return self.groups * self.tpr

    @property
    def tails(self) -> int:
        """Short tiles in an image (each computed by a micro-kernel of `tail` rows)."""
        return 0 if not self.tail else self.groups if self.g == 1 else 1

    @staticmethod
    def of(w: Window, mr: int) -> PixelTiling:
        g = max(1, mr // w.out_row)
        tpr = math.ceil(w.out_row / mr) if g == 1 else 1
        groups = math.ceil(w.rows / g)
        gb = min(max(1, math.ceil(PIXELS_PER_BLOCK / (g * w.out_row))), groups)
        m_full = min(mr, g * w.out_row)
        if g == 1:
            tail = w.out_row - (tpr - 1) * mr
            tail = tail if tail < m_full else 0
        else:  # 7x7 with 14 rows: the last tile holds one output row of seven pixels
            tail = w.rows % g * w.out_row
        return PixelTiling(g, tpr, gb, m_full, groups, math.ceil(groups / gb), tail)


def _unclamped(ix: te.Expr) -> te.Expr:
    """`e` for an index `min(max(e, 0), hi)`, `max(e, 0)` or `min(e, hi)` (a padding copy
    clamps the positions its condition throws away), else the index itself."""
    if isinstance(ix, te.Binary) and ix.op == "min" and isinstance(ix.b, te.Const):
        ix = ix.a
    if isinstance(ix, te.Binary) and ix.op == "max" and isinstance(ix.b, te.Const) \
            and ix.b.value == 0:
        ix = ix.a
    return ix


def _fma_rate(blk: GemmBlock, m: Machine) -> float:
    """Multiply-adds per second the micro-kernel sustains on cache-resident operands: the
    core's peak times the block's measured efficiency (`aotc calibrate`), else lowered when
    the block loads too much per FMA."""
    peak = m.hz * m.fma_per_cycle * blk.lanes
    measured = m.efficiency_of(f"{blk.mr}x{blk.nv}")
    if measured is not None:
        return peak * measured
    return peak * min(1.0, blk.intensity / EFF_INTENSITY) * EFF_MAX


def _flat_index(load: te.Load) -> te.Expr:
    """The row-major element offset a load reads, in the load's own index variables."""
    t = load.tensor
    strides = Buffer("_", t.dtype, t.shape, "input").strides
    flat: te.Expr = _c(0)
    for ix, st in zip(load.indices, strides, strict=True):
        flat = flat + ix * st
    return flat


def _unit_stride(index: te.Expr, v: te.Var) -> bool:
    """Whether `index` steps by one element per step of `v` (a contiguous run)."""
    step = simplify_index(te.substitute(index, {v: v + 1}) - index)
    return isinstance(step, te.Const) and step.value == 1


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _replace_loads(e: te.Expr, t: te.Tensor, by: te.Expr) -> te.Expr:
    """`e` with every load of `t` replaced by the (already lowered) value `by`."""
    if isinstance(e, te.Load) and e.tensor is t:
        return by
    if isinstance(e, BufLoad):
        return e
    return te.map_children(e, lambda c: _replace_loads(c, t, by))


