"""The GEMM pattern: which computations the template matches (one sum of a product of two loads,
plus an element-wise epilogue), their batch, M, N and K axis groups, and what the analysis finds
in them (convolution windows, the fused epilogue's parts, pixel-mode tiling).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from lowering import te
from lowering.affine import normalize, simplify_index
from lowering.loop_ir import (
    Buffer,
    BufLoad,
)
from lowering.lower import stages_of

# Below this many multiply-adds a tensorized GEMM's packing and edge handling do not pay off.
MIN_MACS = 1 << 14


def i64(v: int) -> te.Const:
    """An int64 (index) constant."""
    return te.Const(v, "int64")


def loads_of(e: te.Expr, t: te.Tensor) -> list[te.Load]:
    out = [e] if isinstance(e, te.Load) and e.tensor is t else []
    for c in te.children(e):
        out += loads_of(c, t)
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

    @property
    def dynamic(self) -> bool:
        """Whether an axis of the group runs to a run-time dimension (`te.DynExtent`)."""
        return any(isinstance(e, te.DynExtent) for e in self.extents)

    @property
    def run_size(self) -> te.Expr | None:
        """The flattened size at run time: `size`, or for a group whose outermost axis longer
        than one runs to a run-time dimension, that dimension times the other axes' extents.
        The flat indices below it are then a prefix of the group as laid out for the bound
        (row-major), which is what lets a kernel built for the bound stop there. None when
        the run-time axis is not outermost (its valid indices would not be a prefix)."""
        axes = self.nonunit
        if not self.dynamic:
            return i64(self.size)
        if not isinstance(axes[0][1], te.DynExtent) or \
                any(isinstance(e, te.DynExtent) for _, e in axes[1:]):
            return None
        return te.run_product([e for _, e in axes])

    def unflatten(self, flat: te.Expr) -> dict[te.Var, te.Expr]:
        out: dict[te.Var, te.Expr] = {}
        rest = flat
        for v, e in reversed(list(zip(self.vars, self.extents, strict=True))):
            if e == 1:
                out[v] = i64(0)
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


def sum_product(outputs: Sequence[te.Tensor], dtype: str
                ) -> tuple[list[te.Tensor], te.Tensor, te.Reduce] | None:
    """The stages of `outputs` and the one reduction among them, a stored sum of type `dtype`
    (the product stage the GEMM templates match), or None."""
    if len(outputs) != 1:
        return None
    stages = stages_of(outputs)
    reductions = [t for t in stages if isinstance(t.op.body, te.Reduce)]  # type: ignore[union-attr]
    if len(reductions) != 1:
        return None
    p = reductions[0]
    red = p.op.body  # type: ignore[union-attr]
    assert isinstance(red, te.Reduce)
    if red.combiner != "sum" or p.dtype != dtype or p.op.inline:  # type: ignore[union-attr]
        return None
    return stages, p, red


def analyze(outputs: Sequence[te.Tensor]) -> GemmPattern | None:
    if len(outputs) != 1 or outputs[0].dtype != "float32":
        return None
    found = sum_product(outputs, "float32")
    if found is None:
        return None
    stages, p, red = found
    body = te.expand_inline(red.body)
    if not (isinstance(body, te.Binary) and body.op == "mul"
            and isinstance(body.a, te.Load) and isinstance(body.b, te.Load)):
        return None
    # stages after the product: at most the output, reading it only at its own index
    after = [t for t in stages if t is not p and p in depends_on(t)]
    epilogue = None
    out_begin = None
    if after:
        out = outputs[0]
        if after != [out] or out.op.inline:  # type: ignore[union-attr]
            return None
        if out.shape != p.shape:
            unpadded = unpadded_of(out, p)
            if unpadded is None:
                return None
            out, out_begin = unpadded
        flat_body = te.expand_inline(out.op.body)  # type: ignore[union-attr]
        if isinstance(flat_body, te.Reduce):
            return None
        axes = [ax.var for ax in out.op.axes]  # type: ignore[union-attr]
        for ld in loads_of(flat_body, p):
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


def unpadded_of(out: te.Tensor, p: te.Tensor, identity: bool = False
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
    loads = loads_of(body.t, p)
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
    probe = replace_loads(body.t, p, te.Const(0.0, p.dtype))
    if any(te.mentions(probe, v) for v in axes):
        return None  # the value depends on the position other than through the product

    def unpadded(*o: te.Var) -> te.Expr:
        return replace_loads(body.t, p, p[o])

    return te.compute(p.shape, unpadded, out.name, tag=op.tag), tuple(begin)


def depends_on(t: te.Tensor) -> set[te.Tensor]:
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


@dataclass
class FusedEpilogue:
    """clamp(acc + bias + residual, lo, hi); None parts are absent. The bias is per output
    channel (the M axis), or with `bias_on_columns` per column (the N axis: a linear layer's
    output features, which the GEMM micro-kernel holds in its vectors)."""

    bias: te.Tensor | None
    residual: te.Tensor | None
    lo: float | None
    hi: float | None
    bias_on_columns: bool = False


def clamps_of(e: te.Expr, t: te.Tensor) -> tuple[float | None, float | None, te.Expr] | None:
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
    def of(w: Window, mr: int, parts: int = 1, others: int = 1) -> PixelTiling:
        """The tiling for blocks of about PIXELS_PER_BLOCK pixels; with `parts` threads
        sharing a parallel loop over `others` (batch x channel tiles) times the blocks, blocks
        no larger, sized so the threads get equal shares of rows (a 16-row image in blocks of
        3 rows is 9 rows against 7; in blocks of 2, 8 and 8)."""
        g = max(1, mr // w.out_row)
        tpr = math.ceil(w.out_row / mr) if g == 1 else 1
        groups = math.ceil(w.rows / g)
        gb = min(max(1, math.ceil(PIXELS_PER_BLOCK / (g * w.out_row))), groups)
        if parts > 1:  # the busiest thread's groups, then the larger block
            gb = min(range(1, gb + 1), key=lambda b: (
                math.ceil(others * math.ceil(groups / b) / parts) * b, -b))
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


@dataclass
class TileWalk:
    """How a packing loop walks one tile of an operand's own axes (its flat positions
    [t0, t0 + valid)): innermost along the last axis, so a row of the source is read
    contiguously and without divisions, and, for several axes, around that over the rows the
    tile spans (`wrap`: the outer variable, its first and end value)."""

    vmap: dict[te.Var, te.Expr]  # the own axes' values in the walk's variables
    dst: te.Expr  # the position in the tile
    lo: te.Expr  # the inner loop's bounds
    hi: te.Expr
    wrap: tuple[te.Var, te.Expr, te.Expr] | None


def tile_walk(axes: Sequence[tuple[te.Var, int]], inner: te.Var, t0: te.Expr,
              valid: te.Expr) -> TileWalk:
    """The walk over a tile of the own axes `axes` (var, extent; unit axes left out) with
    inner loop variable `inner`."""
    if len(axes) <= 1:
        vmap = {axes[0][0]: t0 + inner} if axes else {}
        return TileWalk(vmap, inner, i64(0), valid, None)
    last_v, last_e = axes[-1]
    of = te.Var("po")
    vmap = Group([v for v, _ in axes[:-1]], [e for _, e in axes[:-1]]).unflatten(of)
    vmap[last_v] = inner
    return TileWalk(vmap, of * last_e + inner - t0, te.maximum(i64(0), t0 - of * last_e),
                    te.minimum(i64(last_e), t0 + valid - of * last_e),
                    (of, t0 // last_e, (t0 + valid - 1) // last_e + 1))


def flat_index(load: te.Load) -> te.Expr:
    """The row-major element offset a load reads, in the load's own index variables."""
    t = load.tensor
    strides = Buffer("_", t.dtype, t.shape, "input").strides
    flat: te.Expr = i64(0)
    for ix, st in zip(load.indices, strides, strict=True):
        flat = flat + ix * st
    return flat


def unit_stride(index: te.Expr, v: te.Var) -> bool:
    """Whether `index` steps by one element per step of `v` (a contiguous run)."""
    step = simplify_index(te.substitute(index, {v: v + 1}) - index)
    return isinstance(step, te.Const) and step.value == 1


def round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def replace_loads(e: te.Expr, t: te.Tensor, by: te.Expr) -> te.Expr:
    """`e` with every load of `t` replaced by the (already lowered) value `by`."""
    if isinstance(e, te.Load) and e.tensor is t:
        return by
    if isinstance(e, BufLoad):
        return e
    return te.map_children(e, lambda c: replace_loads(c, t, by))
