"""The GEMM schedule space: the knobs a matched pattern offers (register block, K block, operand
modes, loop order, pixel mode's input layout), what it reads of the pattern for them, and the
configuration the cost model ranks best.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.affine import normalize, simplify_index
from lowering.intrinsics import GemmBlock, gemm_blocks
from lowering.machine import Machine, Target
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.templates.gemm.build import _Builder
from lowering.templates.gemm.cost import KC_OPTIONS, GemmCost, accumulates_line_pitched
from lowering.templates.gemm.pattern import (
    WINDOW_MAX_WASTE,
    ChannelsLastCopy,
    FusedEpilogue,
    GemmPattern,
    Group,
    PixelTiling,
    Window,
    analyze,
    clamps_of,
    depends_on,
    flat_index,
    i64,
    loads_of,
    unit_stride,
    unpadded_of,
)

# the smallest (padded) input plane, in floats, whose strided windows may be copied
# channels-last (see GemmSpace._channels_last)
CHANNELS_LAST_MIN_PLANE = 2048


class GemmTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    runs_to_dims = True  # its loops over M, N and K stop at run-time sizes (Group.run_size)

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


class GemmSpace(GemmCost, ScheduleSpace):
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
        # "pixels": the convolution with the roles swapped, see _Builder._pixels_main; a
        # grouped convolution's too, a group's output channels in its vectors (RegNetY's 8
        # per group: one AVX2 vector), read in place where the packing copied every window
        self.pixels = self._conv_reading(pat.b) if self.a_const is not None and \
            self.b_const is None else None
        if self.pixels is not None and len(self.pixels.taps) <= 2:
            b_modes.append("pixels")
        # pixel mode may copy a padded input channels-last (see _channels_last; not a grouped
        # convolution's, whose windows read part of the channels)
        self.pixels_cl = self._channels_last() if "pixels" in b_modes and pat.group is None \
            else None
        self.fused_epilogue = self._clamped_bias()
        if pat.out_begin is not None and not (len(pat.n.vars) == 2 and min(pat.n.extents) > 1):
            b_modes = []  # a padded output is written per image row (see _Builder.padded)
        # run-time dimensions: the nest is built for the bound and its loops over M, N and K
        # stop at the run-time sizes (Group.run_size), so each group may have one only as its
        # outermost axis, and the batch none; convolution windows and padded outputs keep
        # their static sizes
        self.dynamic = any(g.dynamic for g in (pat.batch, pat.m, pat.n, pat.k))
        if self.dynamic:
            runs = [g.run_size for g in (pat.m, pat.n, pat.k)]
            if pat.batch.dynamic or None in runs or pat.out_begin is not None or \
                    pat.group is not None:
                b_modes = []
            b_modes = [m for m in b_modes if m in ("const", "direct", "pack")]
            self.window = self.pixels = self.pixels_cl = None
        # B's columns one contiguous run (a 1x1 convolution's pixels): its packing is a plain
        # vector copy per k row (see _Builder._pack_stage)
        col = te.Var("col")
        self.b_contiguous = unit_stride(simplify_index(te.substitute(
            flat_index(pat.b), pat.n.unflatten(col))), col)
        # B's pixels every so many elements along an output row (a strided convolution): its
        # packing gathers them
        f = normalize(flat_index(pat.b))
        last = pat.n.nonunit[-1][0] if pat.n.nonunit else None
        self.b_gathers = last is not None and f is not None and \
            f.depends_only_linearly(last) and abs(f.coefficient(last)) > 1
        K = pat.k.size
        self.knobs = [
            Knob("block", tuple(b.name for b in self.blocks)),
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
        units = {v: i64(0) for v, e in zip(k.vars, k.extents, strict=True) if e == 1}
        vmap = {**units, **own.unflatten(own_flat), **(k_group or k).unflatten(k_flat)}
        return te.substitute(flat_index(load), vmap)

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
        flat = flat_index(load)
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
        unpadded = unpadded_of(t, sources[0], identity=True)
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
        return p.a.tensor is not t and not loads_of(p.init, t)

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
        """The epilogue as clamp(acc + bias + residual, lo, hi), each part optional (a bare
        convolution, bias, ReLU, Clip, a ResNet block's Add + ReLU, a linear layer's bias):
        the micro-kernels apply it to a finished tile in registers instead of a pass over the
        output. The bias is per output channel (the reduction's initial value; the
        convolution kernel's columns, the GEMM kernel's rows), or, where there is no pixel
        mode, per column of the GEMM kernel (a MatMul's + bias[n] in the epilogue). None for
        anything else."""
        p = self.pat
        bias = None
        if not (isinstance(p.init, te.Const) and float(p.init.value) == 0.0):
            mvars = [v for v, _ in p.m.nonunit]
            init = p.init
            # bias[channel]: the M axis, or a grouped convolution's split channel axis
            channel = mvars[0] if len(mvars) == 1 and not p.split else \
                next(iter(p.split.values())) if len(p.split) == 1 else None
            if not (isinstance(init, te.Load) and init.tensor.op is None and len(mvars) == 1
                    and len(init.indices) == 1 and init.indices[0] is channel
                    and init.tensor.dtype == "float32"):
                return None
            bias = init.tensor
        if p.epilogue is None:
            return FusedEpilogue(bias, None, None, None)
        clamps = clamps_of(te.expand_inline(p.epilogue.op.body), p.product)  # type: ignore[union-attr]
        if clamps is None:
            return None
        lo, hi, inner = clamps
        # acc + the other terms: a residual (an input read at the output's own index) and,
        # with no bias yet, a bias per column (an input [N] read at the output's N index)
        axes = [ax.var for ax in p.epilogue.op.axes]  # type: ignore[union-attr]
        column = self._column_axis(axes)
        terms = te.add_terms(inner)
        if sum(isinstance(x, te.Load) and x.tensor is p.product for x in terms) != 1:
            return None
        residual, on_columns = None, False
        for x in terms:
            if isinstance(x, te.Load) and x.tensor is p.product:
                continue
            if not (isinstance(x, te.Load) and x.tensor.op is None
                    and x.tensor.dtype == "float32"):
                return None
            if residual is None and x.tensor.shape == p.product.shape and \
                    all(i is v for i, v in zip(x.indices, axes, strict=True)):
                residual = x.tensor
            elif bias is None and column is not None and len(x.indices) == 1 and \
                    x.indices[0] is column and x.tensor.shape == (p.n.size,):
                bias, on_columns = x.tensor, True
            else:
                return None
        if on_columns and residual is not None:
            # read in the micro-kernel's last call, a MatMul's residual rows (a column strip
            # of each) miss the cache there: slower than the pass (RESULTS.md, 2026-11-29)
            return None
        return FusedEpilogue(bias, residual, lo, hi, on_columns)

    def _column_axis(self, axes: list[te.Var]) -> te.Var | None:
        """Of the epilogue's `axes`, the one along N when N is one axis of the product and
        there is no pixel mode (whose vectors hold output channels, not columns)."""
        p = self.pat
        if self.pixels is not None or len(p.n.nonunit) != 1 or p.product.op is None:
            return None
        n = p.n.nonunit[0][0]
        dims = [d for d, ax in enumerate(p.product.op.axes) if ax.var is n]
        return axes[dims[0]] if len(dims) == 1 else None

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
        return self.model_best_config()

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
        operands |= depends_on(self.pat.a.tensor) | depends_on(self.pat.b.tensor)
        if res.shape != out.shape or res.dtype != out.dtype or res in operands:
            return None
        return next((i for i, t in enumerate(self.inputs) if t is res), None)

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
        return not accumulates_line_pitched(self.pat.n.size, self.block(config).nr,
                                             str(config["parallel"]), self.line_floats)

    # build ------------------------------------------------------------------------------------
    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        return _Builder(self, config, name).build()
