"""Building a GEMM configuration into a kernel: buffers, compile-time packing of constant
operands, the packing stages, and the loop nest around the micro-kernel calls of each operand
mode and loop order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from lowering import te
from lowering.affine import evaluate, normalize, simplify_index
from lowering.default_schedule import default_schedule
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
from lowering.lower import _Converter, lower_stage
from lowering.search.space import BuiltKernel, Config
from lowering.templates.gemm.conv_modes import ConvModes, zero_pixels
from lowering.templates.gemm.cost import accumulates_line_pitched
from lowering.templates.gemm.pattern import (
    FusedEpilogue,
    Group,
    i64,
    replace_loads,
    round_up,
    tile_walk,
    unit_stride,
)
from lowering.tensorize import epilogue_args

if TYPE_CHECKING:
    from lowering.templates.gemm.space import GemmSpace

def _tiles(run: te.Expr, count: int, r: int) -> te.Expr:
    """How many tiles of `r` cover `run` elements: `count` (the tiles at the bound) when
    `run` is a constant, else the run-time quotient rounded up."""
    if isinstance(run, te.Const):
        return i64(count)
    return run if r == 1 else (run + i64(r - 1)) // i64(r)


def _times(n: int, e: te.Expr) -> te.Expr:
    """n * e, folded when e is a constant."""
    return i64(n * int(e.value)) if isinstance(e, te.Const) else e * i64(n)


class _Builder(ConvModes):
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
            clamped = te.minimum(col, i64(width - 1))
            return te.select(te.Binary("lt", col, i64(width)), t[(*idx[:-1], clamped)],
                             te.Const(0.0, t.dtype))

        split = te.compute((stride, *t.shape[:-1], round_up(width, stride) // stride), body,
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
        # the sizes the loops run to: M, N and K, or where a group runs to a run-time dimension
        # (GemmSpace.dynamic) that dimension's share of it; buffers stay laid out for the bound
        self.m_run, self.n_run, self.k_run = (g.run_size for g in (p.m, p.n, p.k))
        self.mt_run = _tiles(self.m_run, self.mt, blk.mr)
        self.nt_run = _tiles(self.n_run, self.nt, blk.nr)
        # a grouped convolution's weights: one packed A per group
        self.groups = dict(zip(p.batch.vars, p.batch.extents, strict=True))[p.group] \
            if p.group is not None else 1
        # pixel mode: output-channel tiles of NR (its vectors hold channels, its rows pixels)
        self.ct = math.ceil(M / blk.nr)
        for i, t in enumerate(s.inputs):
            shape = t.shape
            if self.a_mode == "const" and i == s.a_const and self.b_mode == "pixels":
                assert self.pw is not None
                shape = (self.groups * self.ct, K, blk.nr)
                self.transforms[i] = self._const_packer(p.a, p.m, blk.nr, self.ct,
                                                        self.pw.k_group, grouped=True)
            elif self.a_mode == "const" and i == s.a_const:
                shape = (self.groups * self.mt, K, blk.mr)
                k_group = s.window.k_group if self.b_mode == "window" else None  # type: ignore[union-attr]
                self.transforms[i] = self._const_packer(p.a, p.m, blk.mr, self.mt, k_group,
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
        self.split = self._stride_split() if self.b_mode == "pack" and not s.dynamic else None
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
            self.tiling = s.pixel_tiling(self.cfg)
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
            self.ld = round_up(self.win.size, line)
            self.acc = self._add("float32", (nb, M, self.ld), "scratch")
        elif (accumulates_line_pitched(N, blk.nr, str(self.cfg["parallel"]), line)
              and self.b_mode != "pixels"):  # pixel mode stores its tiles into the output
            self.ld = round_up(N, line)
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
            return BufPtr(buf, simplify_index(tile * (K * r) + k0 * r)), i64(1), i64(r)
        if mode == "pack":
            assert packed is not None
            return BufPtr(packed, (bidx * self.mt_or_nt(which) + tile) * (K * r) + k0 * r), \
                i64(1), i64(r)
        flat = self.s._flat(load, own, tile * r, k0)
        flat = te.substitute(flat, bvars)
        own_stride, k_stride = self.s.direct_strides[id(load)]  # found by _direct_ok
        buf = self.bufs[id(load.tensor)]
        return BufPtr(buf, simplify_index(flat)), i64(own_stride), i64(k_stride)

    def _source(self, load: te.Load, vmap: dict[te.Var, te.Expr]) -> te.Expr:
        """The packed operand's value at the loop variables of `vmap`, as buffer loads."""
        return simplify_loads(_Converter(self.bufs, self._inline)(te.substitute(load, vmap)))

    def mt_or_nt(self, which: str) -> int:
        return self.mt if which == "a" else self.nt

    def _pack_stage(self, which: str, bvar: te.Var, bvars: dict[te.Var, te.Expr],
                    tile: te.Expr) -> Stmt:
        """Copy one operand tile into its micro-panel: panel[b][tile][k][r], zero past the
        edge. The copy loops run over the operand's own axes (not the flattened index), so
        the innermost loop walks a contiguous row of the source: im2col without divisions."""
        p, blk = self.p, self.blk
        K = p.k.size
        load, own, r, buf, run = (p.a, p.m, blk.mr, self.ap, self.m_run) if which == "a" else \
            (p.b if self.split is None else self.split[1], p.n, blk.nr, self.bp, self.n_run)
        assert buf is not None
        t0 = tile * r
        valid = te.minimum(i64(r), run - t0)
        vmap: dict[te.Var, te.Expr] = dict(bvars)
        # reduce axes: one loop each; their flat index is affine
        kloops: list[tuple[te.Var, int]] = []
        kflat: te.Expr = i64(0)
        for v, e in zip(p.k.vars, p.k.extents, strict=True):
            kflat = kflat * e
            if e == 1:
                vmap[v] = i64(0)
                continue
            lv = te.Var("pk")
            vmap[v] = lv
            kloops.append((lv, te.run_extent(e)))
            kflat = kflat + lv
        # own axes: the last one innermost over its part of the tile, the others flattened
        axes = own.nonunit
        for v, e in zip(own.vars, own.extents, strict=True):
            if e == 1:
                vmap[v] = i64(0)
        inner = te.Var("pr")
        if len(axes) > 1:
            # the own axes as one run when the operand holds them contiguously (a 1x1
            # convolution's pixels): one copy per k row, not one per image row it spans
            flat = {**vmap, **Group([v for v, _ in axes], [e for _, e in axes]).unflatten(
                t0 + inner)}
            if not divides(Store(buf, i64(0), self._source(load, flat)), inner):
                vmap, axes = flat, []
        walk = tile_walk(axes, inner, t0, valid)
        vmap.update(walk.vmap)
        dst_r, lo, hi, wrap = walk.dst, walk.lo, walk.hi, walk.wrap
        value = self._source(load, vmap)
        panel = (bvar * self.mt_or_nt(which) + tile) * K
        dst = simplify_index((panel + kflat) * r + dst_r)
        # LLVM cannot vectorize a copy shorter than a vector whose length is no power of two
        # without a masked tail (6x2's 6-row A panels on AVX2), and says so on stderr when
        # asked to: such a copy stays a plain loop (the same scalar code, no warning)
        lanes = self.s.target.vector_lanes_f32
        short = r < lanes and r & (r - 1) and not self.s.target.masked_vectors
        body: Stmt = For(inner, hi, "serial" if short else "vectorize", Store(buf, dst, value),
                         start=lo)
        if wrap is None and isinstance(value, BufLoad) and unit_stride(value.index, inner):
            # the next tile's run of this row, one tile ahead: each k row is a stream of its
            # own (a plane apart), more streams than the hardware prefetchers follow
            ahead = [Prefetch(value.buf, simplify_index(te.substitute(
                value.index, {inner: i64(r + line * self.s.line_floats)})))
                for line in range(math.ceil(r / self.s.line_floats))]
            body = Seq([*ahead, body])
        if wrap is not None:
            body = For(wrap[0], wrap[2], "serial", body, start=wrap[1])
        for lv, e in reversed(kloops):
            body = For(lv, e, "serial", body)
        if own.size % r or own.dynamic:
            kz, rz = te.Var("zk"), te.Var("zr")
            zero = For(kz, i64(K), "serial", For(rz, i64(r), "serial", Store(
                buf, (panel + kz) * r + rz, te.Const(0.0, "float32")), start=valid))
            body = Seq([body, zero])
        return body

    def _main(self) -> list[Stmt]:
        p, blk = self.p, self.blk
        M, K = p.m.size, p.k.size
        nb = p.batch.size
        par = str(self.cfg["parallel"])
        outer_kind = "parallel" if self.s.parallel_threads() > 1 else "serial"
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
            m_valid = te.minimum(i64(blk.mr), self.m_run - io_ * blk.mr)
            n_valid = te.minimum(i64(blk.nr), self.n_run - jo_ * blk.nr)
            last = i64(1) if nk == 1 else \
                te.select(te.Binary("eq", kb, nk_run - i64(1) if self.s.dynamic else i64(nk - 1)),
                          i64(1), i64(0))
            return Call(blk.routine, [a_ptr, a_rs, a_ks, b_ptr, b_ks, BufPtr(self.acc, c_off),
                                      i64(self.ld), klen, m_valid, n_valid, acc,
                                      last if fused else i64(0),
                                      *self._fused_args(fused, self._channel(bvars, io_ * blk.mr),
                                                        c_off, jo_ * blk.nr)])

        nk_run = _tiles(self.k_run, nk, self.kc)

        def k_blocks(body_of) -> Stmt:
            """body_of(k0, klen, accumulate) over the K blocks."""
            if self.kc >= K:
                return body_of(i64(0), self.k_run, i64(0))
            k0 = kb * self.kc
            return For(kb, nk_run, "serial", body_of(
                k0, te.minimum(i64(self.kc), self.k_run - k0), te.minimum(kb, i64(1))))

        # packing of runtime operands that the main loop does not pack itself
        if self.a_mode == "pack":
            t = te.Var("pio")
            stages.append(self._fused_loop(bflat, t, nb, self.mt_run, outer_kind,
                                           self._pack_stage("a", bflat, bvars, t)))
        if self.b_mode == "pack" and par == "m":
            t = te.Var("pjo")
            stages.append(self._fused_loop(bflat, t, nb, self.nt_run, outer_kind,
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
                io, self.mt_run, "serial", tile_call(io, jo, k0, kl, acc))))
            if fused is None:
                body.append(self._epilogue(bvars, bflat, i64(0), self.m_run, jo * blk.nr,
                                           te.minimum(i64(blk.nr), self.n_run - jo * blk.nr)))
            stages.append(self._fused_loop(bflat, jo, nb, self.nt_run, outer_kind, Seq(body)))
        elif par == "blocked":
            # GotoBLAS's order: chunks of N panels (parallel) > K blocks > M blocks > N panels
            # > M tiles (GemmSpace.blocking)
            tiles, panels = self.s.blocking(blk, self.kc)
            jc, mb = te.Var("jc"), te.Var("mb")
            j0, i0 = jc * panels, mb * tiles
            jn = te.minimum(i64(panels), self.nt_run - j0)
            i_n = te.minimum(i64(tiles), self.mt_run - i0)
            body = []
            if self.b_mode == "pack":
                body.append(For(jo, jn, "serial", self._pack_stage("b", bflat, bvars, j0 + jo)))
            body.append(k_blocks(lambda k0, kl, acc: For(
                mb, _tiles(self.mt_run, math.ceil(self.mt / tiles), tiles), "serial", For(
                    jo, jn, "serial", For(
                        io, i_n, "serial", tile_call(i0 + io, j0 + jo, k0, kl, acc))))))
            if fused is None:
                n0 = j0 * blk.nr
                body.append(self._epilogue(bvars, bflat, i64(0), self.m_run, n0,
                                           te.minimum(i64(panels * blk.nr), self.n_run - n0)))
            stages.append(self._fused_loop(
                bflat, jc, nb, _tiles(self.nt_run, math.ceil(self.nt / panels), panels),
                outer_kind, Seq(body)))
        else:
            # M tiles outermost within chunks of N panels that stay in L2 across them
            # (GemmSpace.chunk_panels); one chunk when all of B fits
            cp = self.s.chunk_panels(blk)
            chunks = math.ceil(self.nt / cp)
            f = te.Var("mc")
            ch, io_ = (f // self.mt_run, f % self.mt_run) if chunks > 1 else (i64(0), f)
            j0 = ch * cp
            jn = te.minimum(i64(cp), self.nt_run - j0)
            body = [k_blocks(lambda k0, kl, acc: For(
                jo, jn, "serial", tile_call(io_, j0 + jo, k0, kl, acc)))]
            if fused is None:
                n0 = j0 * blk.nr
                body.append(self._epilogue(bvars, bflat, io_ * blk.mr,
                                           te.minimum(i64(blk.mr), self.m_run - io_ * blk.mr),
                                           n0, te.minimum(i64(cp * blk.nr), self.n_run - n0)))
            stages.append(self._fused_loop(bflat, f, nb, _times(chunks, self.mt_run),
                                           outer_kind, Seq(body)))
        return stages

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
        return For(pl, i64(p.batch.size * p.m.size), "serial", For(r, i64(h), "serial", For(
            x, i64(w), "vectorize", Store(self.padded, self._padded_index(i64(0), pl, r, x),
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
            return [For(r, i64(rows), "serial",
                        zero_pixels(padded, pl, r + row0, col0, cols, (hp, wp, 1)))]

        parts = fill(0, top, 0, wp) + fill(top + h, hp - top - h, 0, wp) + \
            fill(top, h, 0, left) + fill(top, h, left + w, wp - left - w)
        return For(pl, i64(planes), "serial", Seq(parts))

    def _channel(self, bvars: dict[te.Var, te.Expr], first: te.Expr) -> te.Expr:
        """Output channel `first` of the batch's group (past the group's channels before it
        in a grouped convolution)."""
        if self.p.group is None:
            return first
        return simplify_index(bvars[self.p.group] * self.p.m.size + first)

    def _fused_args(self, fe: FusedEpilogue | None, channel: te.Expr, out_off: te.Expr,
                    column: te.Expr | None = None) -> list[BufPtr | te.Expr]:
        """The micro-kernels' epilogue arguments: bias (at output channel `channel`, or at
        the tile's first column `column` for a bias per column), its flag, the clamps, the
        residual (at the tile's output offset `out_off`) and its flag; all off for None
        (pointers then name the output, never read)."""
        if fe is None:
            return epilogue_args(self.out)
        at = channel
        if fe.bias_on_columns:
            assert column is not None
            at = column
        return epilogue_args(
            self.out,
            BufPtr(self.bufs[id(fe.bias)], at) if fe.bias is not None else None,
            fe.lo, fe.hi,
            BufPtr(self.bufs[id(fe.residual)], simplify_index(out_off))
            if fe.residual is not None else None, fe.bias_on_columns)

    def _fused_loop(self, bflat: te.Var, t: te.Var, nb: int, nt: te.Expr, kind: str,
                    body: Stmt) -> Stmt:
        """for (bflat, t) in nb x nt, as one loop (parallel when worth it); nt may be a
        run-time count."""
        if nb == 1:
            one = isinstance(nt, te.Const) and int(nt.value) <= 1
            return For(t, nt, "serial" if one else kind, bind(body, {bflat: i64(0)}))
        f = te.Var("bt")
        return For(f, _times(nb, nt), kind, bind(body, {bflat: f // nt, t: f % nt}))

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
        body = replace_loads(body, p.product, acc)
        # the epilogue's axes correspond one to one to the product's (same shape)
        axes = {ea.var: vmap[pa.var] for ea, pa in zip(
            e.op.axes, p.product.op.axes, strict=True)}  # type: ignore[union-attr]
        return simplify_loads(conv(te.substitute(body, axes)))
