"""The integer GEMM schedule space and its builder: both operands in words of the instruction's
k group (`IntDot`), the constant one packed at compile time, runtime ones packed by the kernel;
an MR x NR micro-kernel tile per (M tile, N panel) into scratch, then the epilogue over it.

Loop nest (F = batch x N panels x `split`, parallel):

    pack the rows (runtime rows only): [batch][M tile][kg][MR] words
    for f < F:
        pack N panel f's columns (runtime columns only): [kg][NR] words
        for the M tiles of split f % split:
            tile = micro-kernel(rows, columns, kg)
            out = epilogue(tile + correction + init)     # over the tile's valid part

With a u8 x s8 instruction the activations are stored as `x + off` and the product gains
`-(z + off) * sum_k w` per weight row or column: the correction, computed with the packed
weights and stored after them. With an s16 instruction the activations are stored as `x - z`
and nothing needs correcting, so two runtime operands (an attention product) use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.affine import simplify_index
from lowering.default_schedule import default_schedule
from lowering.intrinsics import IntDot, IntGemmBlock, int_gemm_blocks
from lowering.loop_ir import Buffer, BufLoad, BufPtr, Call, For, Kernel, Seq, Stmt, Store
from lowering.lower import _Converter, lower_stage
from lowering.machine import Target
from lowering.search.space import BuiltKernel, Config, Knob, ScheduleSpace
from lowering.templates.gemm.cost import PARALLEL_MIN_MACS
from lowering.templates.gemm.pattern import Group, i64, replace_loads, tile_walk
from lowering.templates.int_gemm.pattern import IntGemmPattern, Operand, analyze, eval_const


def activation_offset(x_dtype: str, element: str) -> int | None:
    """What is added to an activation x to store it as `element` (None: stored as x - z)."""
    if element == "int16":
        return None
    signed = element == "int8"
    if signed == (x_dtype == "int8"):
        return 0
    return -128 if signed else 128


class IntGemmTemplate:
    """Entry in `lowering.search.select.TEMPLATES`."""

    @staticmethod
    def match(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
              consts: Sequence[np.ndarray | None], target: Target) -> IntGemmSpace | None:
        dots = target.int_dots
        if not dots:
            return None
        known = {id(t): c for t, c in zip(inputs, consts, strict=True)
                 if t is not None and c is not None}
        pat = analyze(outputs, known)
        if pat is None:
            return None
        for dot in dots:
            space = IntGemmSpace.of(inputs, outputs, consts, target, pat, dot, known)
            if space is not None:
                return space
        return None


class IntGemmSpace(ScheduleSpace):
    kind = "int_gemm"

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target, pat: IntGemmPattern,
                 dot: IntDot, weights: tuple[int, np.ndarray] | None) -> None:
        super().__init__(inputs, outputs, consts, target)
        self.pat, self.dot = pat, dot
        # (input position, its int32 value over (own, k)) of the constant operand
        self.weights = weights
        self.rows_const = pat.rows.source is None
        self.blocks = int_gemm_blocks(target, dot, rows_are_activations=not self.rows_const)
        mt_max = math.ceil(pat.m.size / self.blocks[-1].mr)
        self.knobs = [
            Knob("block", tuple(b.name for b in self.blocks)),
            # M tiles split over this many parallel iterations per N panel (few panels)
            Knob("split", tuple(s for s in (1, 2, 4, 8) if s == 1 or s <= mt_max)),
        ]

    @staticmethod
    def of(inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
           consts: Sequence[np.ndarray | None], target: Target, pat: IntGemmPattern,
           dot: IntDot, known: dict[int, np.ndarray]) -> IntGemmSpace | None:
        """The space on instruction `dot`, or None when the operands' values do not fit its
        operand types."""
        runtime = [op for op in (pat.rows, pat.cols) if op.source is not None]
        if not runtime:
            return None  # all constant: folded elsewhere
        offs = [activation_offset(op.source.dtype, dot.element) for op in runtime]  # type: ignore[union-attr]
        if len(runtime) == 2:
            return IntGemmSpace(inputs, outputs, consts, target, pat, dot, None) \
                if offs == [None, None] else None
        const_op = pat.rows if pat.rows.source is None else pat.cols
        own = pat.m if const_op is pat.rows else pat.n
        values = _constant_values(const_op, own, pat.k, known)
        if values is None:
            return None
        lo, hi = te.int_range(dot.weight)
        if values.size and (values.min() < lo or values.max() > hi):
            return None
        loads = [i for i, t in enumerate(inputs) if t is not None and consts[i] is not None
                 and consts[i].size > 1 and any(x is t for x in te.tensors_read(const_op.value))]
        if len(loads) != 1:
            return None
        return IntGemmSpace(inputs, outputs, consts, target, pat, dot, (loads[0], values))

    # geometry ---------------------------------------------------------------------------------
    def block(self, config: Config) -> IntGemmBlock:
        return self.blocks[[b.name for b in self.blocks].index(str(config["block"]))]

    @property
    def kg(self) -> int:
        return math.ceil(self.pat.k.size / self.dot.group)

    def correction(self, runtime: Operand) -> int:
        """c: activations are stored as x - z + c (0 for an s16 instruction)."""
        assert runtime.source is not None
        off = activation_offset(runtime.source.dtype, self.dot.element)
        return 0 if off is None else runtime.zero + off

    def flops(self) -> float:
        return 2.0 * self.pat.macs

    def default_config(self) -> Config:
        """The cost model's best: its blocks' rates differ by a few per cent per layer, less
        than the margin by which the model may leave a default, so the first block would
        otherwise serve every layer."""
        return self.model_best_config()

    def cost(self, config: Config) -> float:
        """Dot instructions at the machine's FMA issue rate, padded tiles included, or the
        column panels' stream from L2 where a panel outgrows L1, whichever is slower; plus
        the packing of runtime operands (one pass, an element per cycle-ish, per split)."""
        m = self.target.machine
        blk = self.block(config)
        p = self.pat
        mt, nt = math.ceil(p.m.size / blk.mr), math.ceil(p.n.size / blk.nr)
        dots = p.batch.size * mt * nt * self.kg * blk.mr * blk.nv
        # the k loop's loads: NV column vectors and MR broadcasts per MR x NV dots
        issue = max(1.0, (blk.mr + blk.nv) / (m.loads_per_cycle * blk.mr * blk.nv / m.fma_per_cycle))
        seconds = dots * issue / (m.fma_per_cycle * m.hz)
        # every M tile re-reads its N panel's column words: from L1 while the panel fits
        # there, else streamed from L2 at the rate that level delivers
        panel = self.kg * blk.nr * 4
        if panel > m.l1:
            seconds = max(seconds, p.batch.size * nt * mt * panel / m.l2_bandwidth)
        split = int(config["split"])  # type: ignore[call-overload]
        packed = 0.0
        if p.cols.source is not None:
            packed += p.batch.size * nt * split * self.kg * blk.nr * self.dot.group
        if p.rows.source is not None:
            packed += p.batch.size * mt * self.kg * blk.mr * self.dot.group
        packed += p.batch.size * p.m.size * p.n.size  # the epilogue
        return seconds + packed / (4 * m.hz)

    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        return _Builder(self, config, name).build()


def _constant_values(op: Operand, own: Group, k: Group, known: dict[int, np.ndarray]
                     ) -> np.ndarray | None:
    """The constant operand's int32 values as an [own, K] array (both row-major flattened)."""
    n_own = len(own.vars)
    env = {}
    for d, (v, e) in enumerate(zip([*own.vars, *k.vars], [*own.extents, *k.extents],
                                   strict=True)):
        shape = [1] * (n_own + len(k.vars))
        shape[d] = e
        env[v] = np.arange(e).reshape(shape)
    vals = eval_const(op.value, env, known)
    if vals is None:
        return None
    full = np.broadcast_to(vals, tuple([*own.extents, *k.extents]))
    return full.reshape(own.size, k.size)


class _Builder:
    def __init__(self, space: IntGemmSpace, config: Config, name: str) -> None:
        self.s, self.p = space, space.pat
        self.blk = space.block(config)
        self.split = int(config["split"])  # type: ignore[call-overload]
        self.name = name
        self.buffers: list[Buffer] = []
        self.bufs: dict[int, Buffer] = {}

    def _add(self, dtype: str, shape: tuple[int, ...], role: str) -> Buffer:
        b = Buffer(f"{role[0]}{len(self.buffers)}", dtype, shape, role)
        self.buffers.append(b)
        return b

    def build(self) -> BuiltKernel:
        s, p, blk, g = self.s, self.p, self.blk, self.s.dot.group
        kg = s.kg
        self.mt, self.nt = math.ceil(p.m.size / blk.mr), math.ceil(p.n.size / blk.nr)
        transforms = {}
        self.wbuf: Buffer | None = None
        self.corr_at = 0
        for i, t in enumerate(s.inputs):
            if t is None:
                continue
            if s.weights is not None and i == s.weights[0]:
                words, self.corr_at = self._packed_weights(s.weights[1])
                buf = self._add("int32", (words.size,), "input")
                transforms[i] = (lambda _arr, w=words: w)
                self.wbuf = buf
            else:
                buf = self._add(t.dtype, t.shape, "input")
            self.bufs[id(t)] = buf
        out_t = s.outputs[0]
        self.out = self._add(out_t.dtype, out_t.shape, "output")
        self.bufs[id(out_t)] = self.out
        nb = p.batch.size
        self.slots = nb * self.nt * self.split
        elem = s.dot.element
        self.rpack = self._add(elem, (nb * self.mt * kg * blk.mr * g,), "scratch") \
            if p.rows.source is not None else None
        self.cpack = self._add(elem, (self.slots * kg * blk.nr * g,), "scratch") \
            if p.cols.source is not None else None
        self.tile = self._add("int32", (self.slots * blk.mr * blk.nr,), "scratch")
        stages: list[Stmt] = []
        self.encoded: dict[int, te.Tensor] = {}
        for op in (p.rows, p.cols):
            nest = self._encoded_stage(op)
            if nest is not None:
                stages.append(nest)
        parallel = "parallel" if p.macs >= PARALLEL_MIN_MACS else "serial"
        if self.rpack is not None:
            f = te.Var("rf")
            b, t = (f // self.mt, f % self.mt) if nb > 1 else (i64(0), f)
            stages.append(For(f, i64(nb * self.mt), parallel,
                              self._pack(p.rows, p.m, blk.mr, self.rpack, b, t, b * self.mt + t)))
        stages.append(self._main(parallel))
        return BuiltKernel(Kernel(self.name, self.buffers, stages), transforms)

    def _packed_weights(self, values: np.ndarray) -> tuple[np.ndarray, int]:
        """The constant operand as int32 words [tile][kg][R] (R: MR rows or NR columns), then
        the correction per row or column; returns the words and the correction's offset."""
        s, p, blk, g = self.s, self.p, self.blk, self.s.dot.group
        own, r = (p.m, blk.mr) if s.rows_const else (p.n, blk.nr)
        tiles = math.ceil(own.size / r)
        K = p.k.size
        padded = np.zeros((tiles * r, s.kg * g), dtype=np.int64)
        padded[:own.size, :K] = values
        runtime = p.cols if s.rows_const else p.rows
        corr = -s.correction(runtime) * values.sum(axis=1)
        elems = padded.reshape(tiles, r, s.kg, g).transpose(0, 2, 1, 3)  # [tile][kg][r][g]
        narrow = elems.astype(s.dot.weight).copy()
        words = narrow.view(np.int32).reshape(-1)
        return np.concatenate([words, corr.astype(np.int32)]), words.size

    def _encoded_stage(self, op: Operand) -> Stmt | None:
        """For an operand read through a padding stage: that stage stored shifted into the
        instruction's element type (a scratch tensor the packing then reads), and its nest."""
        if op.stage is None:
            return None
        padded = op.stage.tensor
        assert padded.op is not None
        c = self.s.correction(op)
        body = te.expand_inline(padded.op.body)

        def encode(*idx: te.Var) -> te.Expr:
            v = te.substitute(body, {ax.var: i for ax, i in zip(padded.op.axes, idx,
                                                                 strict=True)})
            return te.cast(self.s.dot.element, v + te.Const(c, "int32") if c else v)

        enc = te.compute(padded.shape, encode, "encoded")
        self.bufs[id(enc)] = self._add(enc.dtype, enc.shape, "scratch")
        self.encoded[id(op)] = enc
        return lower_stage(default_schedule(enc, self.s.target.vector_lanes_f32), self.bufs)

    def _value(self, op: Operand, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        """The runtime operand stored as the instruction's element type, as loop IR."""
        enc = self.encoded.get(id(op))
        if enc is not None:
            assert op.stage is not None
            return _Converter(self.bufs)(te.substitute(enc[tuple(op.stage.indices)], vmap))
        c = self.s.correction(op)
        v = te.substitute(op.value, vmap)
        if c:
            v = v + te.Const(c, "int32")
        return _Converter(self.bufs)(te.cast(self.s.dot.element, v))

    def _pack(self, op: Operand, own: Group, r: int, buf: Buffer, b: te.Expr, tile: te.Expr,
              slot: te.Expr) -> Stmt:
        """Panel `tile` of runtime operand `op` (batch index `b`) into slot `slot` of `buf`:
        [kg][r][group] elements. The loops walk the operand's own axes (an image's output rows,
        then along a row: contiguous reads, no divisions) and the group's k values side by
        side (an interleaved store); k past the end is clamped (it meets zero weights), and
        columns past the operand's edge are left as they are (their sums are never read)."""
        p, g, kg = self.p, self.s.dot.group, self.s.kg
        K = p.k.size
        k = te.Var("pk")
        t0 = tile * r
        valid = te.minimum(i64(r), i64(own.size) - t0)
        vmap: dict[te.Var, te.Expr] = dict(p.batch.unflatten(b))
        for v, e in zip(own.vars, own.extents, strict=True):
            if e == 1:
                vmap[v] = i64(0)
        inner = te.Var("pr")
        walk = tile_walk(own.nonunit, inner, t0, valid)
        vmap.update(walk.vmap)
        stores = []
        for q in range(g):
            kvals = p.k.unflatten(te.minimum(k * g + q, i64(K - 1)))
            dst = simplify_index(((slot * kg + k) * r + walk.dst) * g + q)
            stores.append(Store(buf, dst, self._value(op, {**vmap, **kvals})))
        body: Stmt = For(inner, walk.hi, "vectorize", Seq(stores), start=walk.lo)
        if walk.wrap is not None:
            body = For(walk.wrap[0], walk.wrap[2], "serial", body, start=walk.wrap[1])
        return For(k, i64(kg), "serial", body)

    def _main(self, parallel: str) -> Stmt:
        s, p, blk, g = self.s, self.p, self.blk, self.s.dot.group
        kg, nb, nt, split = s.kg, p.batch.size, self.nt, self.split
        f = te.Var("f")
        b = f // (nt * split) if nb > 1 else i64(0)
        j = (f // split) % nt
        part = f % split if split > 1 else i64(0)
        per = math.ceil(self.mt / split)
        body: list[Stmt] = []
        if self.cpack is not None:
            body.append(self._pack(p.cols, p.n, blk.nr, self.cpack, b, j, f))
        it = te.Var("it")
        tile_at = part * per + it
        if self.rpack is not None:
            rows = BufPtr(self.rpack, simplify_index(((b * self.mt + tile_at) * kg) * blk.mr * g))
        else:
            assert self.wbuf is not None
            rows = BufPtr(self.wbuf, simplify_index(tile_at * kg * blk.mr))
        if self.cpack is not None:
            cols = BufPtr(self.cpack, simplify_index(f * kg * blk.nr * g))
        else:
            assert self.wbuf is not None
            cols = BufPtr(self.wbuf, simplify_index(j * kg * blk.nr))
        tile0 = f * (blk.mr * blk.nr)
        call = Call(blk.routine, [rows, cols, BufPtr(self.tile, simplify_index(tile0)), i64(kg)])
        count = te.minimum(i64(per), i64(self.mt) - part * per) if split > 1 else i64(self.mt)
        body.append(For(it, count, "serial", Seq([call, self._epilogue(b, tile_at, j, tile0)])))
        return For(f, i64(self.slots), parallel, Seq(body))

    def _epilogue(self, b: te.Expr, tile_at: te.Expr, j: te.Expr, tile0: te.Expr) -> Stmt:
        """out = epilogue(tile + correction + init) over the tile's valid rows and columns."""
        p, blk, s = self.p, self.blk, self.s
        M, N = p.m.size, p.n.size
        r, c = te.Var("er"), te.Var("ec")
        mi, nj = tile_at * blk.mr + r, j * blk.nr + c
        acc: te.Expr = BufLoad(self.tile, simplify_index(tile0 + r * blk.nr + c))
        if self.wbuf is not None and s.correction(p.cols if s.rows_const else p.rows):
            at = mi if s.rows_const else nj
            acc = acc + BufLoad(self.wbuf, simplify_index(i64(self.corr_at) + at))
        vmap = {**p.batch.unflatten(b), **p.m.unflatten(mi), **p.n.unflatten(nj)}
        conv = _Converter(self.bufs)
        init = p.init
        if not (isinstance(init, te.Const) and init.value == 0):
            acc = acc + conv(te.substitute(init, vmap))
        value = acc
        if p.epilogue is not None:
            e = p.epilogue
            body = replace_loads(te.expand_inline(e.op.body), p.product, acc)  # type: ignore[union-attr]
            axes = {ea.var: vmap[pa.var] for ea, pa in zip(
                e.op.axes, p.product.op.axes, strict=True)}  # type: ignore[union-attr]
            value = conv(te.substitute(body, axes))
        index = simplify_index((b * M + mi) * N + nj)
        rows = te.minimum(i64(blk.mr), i64(M) - tile_at * blk.mr)
        cols = te.minimum(i64(blk.nr), i64(N) - j * blk.nr)
        return For(r, rows, "serial", For(c, cols, "vectorize", Store(self.out, index, value)))
