"""The convolution modes of the GEMM builder: window mode (micro-kernel calls per filter tap on
virtual columns of the input, compacted afterwards) and pixel mode (the convolution micro-kernel,
output pixels in its rows, with its channels-last padding copy and its epilogue). `_Builder`
(build.py) inherits them; they read the buffers and configuration it set up.
"""

from __future__ import annotations

import math

from lowering import te
from lowering.affine import simplify_index
from lowering.intrinsics import GemmBlock, conv_routine, transpose_routine
from lowering.loop_ir import (
    Buffer,
    BufLoad,
    BufPtr,
    Call,
    For,
    Seq,
    Stmt,
    Store,
    bind,
)
from lowering.templates.gemm.pattern import Window, i64

# elements from which the channels-last copy runs its image rows in parallel
PARALLEL_COPY_MIN = 1 << 17


def zero_pixels(dst: Buffer, plane: te.Expr, row: te.Expr, col0: int, cols: int,
                layout: tuple[int, int, int]) -> Stmt:
    """Zeros into `cols` pixels from (`row`, `col0`) of `plane` of a padded buffer whose
    planes are (rows, row pitch, elements per pixel) = `layout`: [n, c, hp, wp] has one
    element per pixel, the channels-last copy [n, hp, wp, c] has c."""
    hp, wp, unit = layout
    z = te.Var("zx")
    n = cols * unit
    base = ((plane * hp + row) * wp + col0) * unit
    return For(z, i64(n), "vectorize" if n >= 4 else "serial",
               Store(dst, simplify_index(base + z), te.Const(0.0, "float32")))


class ConvModes:
    """Window and pixel mode's loop nests, for `_Builder`."""

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
        tap_off: te.Expr = i64(0)
        tap_flat: te.Expr = i64(0)
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
                BufPtr(a_buf, simplify_index(a_off)), i64(1), i64(blk.mr),
                BufPtr(b_buf, simplify_index(b_off)), i64(w.run_stride),
                BufPtr(self.acc, simplify_index(c_off)), i64(self.ld),
                te.minimum(i64(kc), i64(w.run_extent) - c0),
                te.minimum(i64(blk.mr), i64(M) - io * blk.mr),
                te.minimum(i64(blk.nr), i64(V) - jo * blk.nr),
                te.minimum(kb + tap_flat, i64(1)), i64(0), *self._fused_args(None, i64(0), i64(0))])

        def over_k(body: Stmt) -> Stmt:
            for tv, (_, e, _) in reversed(list(zip(tap_vars, w.taps, strict=True))):
                body = For(tv, i64(e), "serial", body)
            return For(kb, i64(nk), "serial", body)

        if par == "n":
            body = Seq([over_k(For(io, i64(self.mt), "serial", call())),
                        self._window_epilogue(bvars, bflat, i64(0), i64(M), jo * blk.nr,
                                              te.minimum(i64(V), jo * blk.nr + blk.nr))])
            return self._fused_loop(bflat, jo, p.batch.size, i64(self.nt), kind, body)
        body = Seq([For(jo, i64(self.nt), "serial", over_k(call())),
                    self._window_epilogue(bvars, bflat, io * blk.mr,
                                          te.minimum(i64(blk.mr), i64(M) - io * blk.mr),
                                          i64(0), i64(V))])
        return self._fused_loop(bflat, io, p.batch.size, i64(self.mt), kind, body)

    def _window_base(self, w: Window, bvars: dict[te.Var, te.Expr]) -> te.Expr:
        """Where a window reads for the batch `bvars` at output pixel 0 and tap 0."""
        zero = {v: i64(0) for v in self.p.n.vars + self.p.k.vars}
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
        n_vmap: dict[te.Var, te.Expr] = {v: i64(0) for v in p.n.vars}
        n_vmap[nvars[-1]] = j
        if len(nvars) == 2:
            n_vmap[nvars[0]] = r
        mi = m0 + i
        acc = BufLoad(self.acc, simplify_index((bflat * M + mi) * self.ld + r * w.row + j))
        out_index = simplify_index((bflat * M + mi) * N + r * w.out_row + j)
        value = self._epilogue_value(bvars, mi, n_vmap, acc)
        lo = te.maximum(i64(0), v0 - r * w.row)
        hi = te.minimum(i64(w.out_row), v1 - r * w.row)
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
        groups_here = te.minimum(i64(gb), i64(ngroups) - blk_i * gb)
        # this channel tile's packed weights ([group][tile][k][NR] for a grouped convolution)
        w_tile = jo if p.group is None else bvars[p.group] * nt + jo
        w_off = w_tile * (K * blk.nr)
        channel = self._channel(bvars, jo * blk.nr)  # the tile's first, for the bias
        geometry = [i64(w.out_row), i64(w.row), i64(w.col_stride), i64(w.run_stride)]
        n_valid = te.minimum(i64(blk.nr), i64(M) - jo * blk.nr)
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
            valid = [i64(rows), i64(rows), n_valid]
            finish = self._fused_args(fused, channel, out_off)
            if self.kc >= K:
                return Call(routine, [
                    BufPtr(x_buf, simplify_index(x_tile)), *geometry,
                    i64(taps[0][0]), i64(taps[0][1]), i64(taps[1][0]), i64(taps[1][1]),
                    BufPtr(w_buf, simplify_index(w_off)), i64(blk.nr),
                    i64(w.run_extent * blk.nr),
                    BufPtr(self.out, simplify_index(out_off)), i64(P), i64(w.run_extent), *valid,
                    BufPtr(self.out, i64(0)), i64(1), i64(1), *finish])
            tap = t1 * taps[1][0] + t2
            c0 = kb * kc
            step = kb * ntaps + tap
            return Call(routine, [
                BufPtr(x_buf, simplify_index(x_tile + t1 * taps[0][1] + t2 * taps[1][1]
                                             + c0 * w.run_stride)), *geometry,
                i64(1), i64(0), i64(1), i64(0),
                BufPtr(w_buf, simplify_index(w_off + (tap * w.run_extent + c0) * blk.nr)),
                i64(blk.nr), i64(0),
                BufPtr(self.out, simplify_index(out_off)), i64(P),
                te.minimum(i64(kc), i64(w.run_extent) - c0), *valid,
                BufPtr(self.part, simplify_index(((f * gb + gi) * tpr + ti)
                                                 * (blk.mr * blk.nr))),
                te.select(te.Binary("eq", step, i64(0)), i64(1), i64(0)),
                te.select(te.Binary("eq", step, i64(nk * ntaps - 1)), i64(1), i64(0)), *finish])

        tiles: Stmt
        if not tiling.tail:
            tiles = For(gi, groups_here, "serial", For(ti, i64(tpr), "serial",
                                                       call(m_full, gi, ti)))
        elif g == 1:  # each row's last tile is short
            tiles = For(gi, groups_here, "serial", Seq([
                For(ti, i64(tpr - 1), "serial", call(m_full, gi, ti)),
                call(tiling.tail, gi, i64(tpr - 1))]))
        else:  # the image's last group is short: it ends the last block
            last = te.select(te.Binary("eq", blk_i, i64(nblk - 1)), i64(1), i64(0))
            tiles = Seq([For(gi, groups_here - last, "serial", call(m_full, gi, i64(0))),
                         For(ti, last, "serial", call(tiling.tail, groups_here - 1, i64(0)))])
        nest = tiles if self.kc >= K else For(kb, i64(nk), "serial", For(
            t1, i64(taps[0][0]), "serial", For(t2, i64(taps[1][0]), "serial", tiles)))
        body: list[Stmt] = [nest]
        if fused is None:
            body.append(self._pixels_epilogue(bvars, bflat, jo, blk_i * (gb * g * w.out_row),
                                              gb * g * w.out_row))
        return For(f, i64(nb * nt * nblk), kind if nb * nt * nblk > 1 else "serial", Seq(body))

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
            return zero_pixels(dst, b, row, col0, cols, (hp, wp, c))

        parts: list[Stmt] = []
        if top:
            parts.append(For(r, i64(top), "serial", zeros(r, 0, wp)))
        if hp - top - h > 0:
            parts.append(For(r, i64(hp), "serial", zeros(r, 0, wp), start=i64(top + h)))
        inside: list[Stmt] = []
        if left:
            inside.append(zeros(r, 0, left))
        if wp - left - w > 0:
            inside.append(zeros(r, left + w, wp - left - w))
        src_off = ((b * c + cb * lanes) * h + r - top) * w + wb * lanes
        dst_off = ((b * hp + r) * wp + left + wb * lanes) * c + cb * lanes
        copy = Call(transpose_routine(lanes), [BufPtr(xb, simplify_index(src_off)), i64(h * w),
                                               BufPtr(dst, simplify_index(dst_off)), i64(c),
                                               te.minimum(i64(lanes), i64(w) - wb * lanes)])
        inside.append(For(cb, i64(c // lanes), "serial",
                          For(wb, i64(-(-w // lanes)), "serial", copy)))
        if nb == 1:  # the rows' loop is the kernel's stage, parallel when large
            kind = "parallel" if c * h * w >= PARALLEL_COPY_MIN else "serial"
            parts.append(For(r, i64(top + h), kind, Seq(inside), start=i64(top)))
            return [bind(x, {b: i64(0)}) for x in parts]
        parts.append(For(r, i64(top + h), "serial", Seq(inside), start=i64(top)))
        return [For(b, i64(nb), "serial", Seq(parts))]

    def _pixels_epilogue(self, bvars: dict[te.Var, te.Expr], bflat: te.Expr, jo: te.Expr,
                         pix0: te.Expr, pixels: int) -> Stmt:
        """Pixel mode's epilogue when it is not fused: in place over channel tile `jo` and
        the block's output pixels [pix0, pix0 + pixels). Where masked vectors are cheap the
        last partial vector runs under a mask: blocks balanced over the threads leave the
        loop a run-time trip count, and with a scalar remainder LLVM's vectorizer chose
        narrow vectors for a dear body (a swish at 4 lanes of 16)."""
        p, blk, w = self.p, self.blk, self.pw
        assert w is not None
        M, P = p.m.size, w.rows * w.out_row
        i, j = te.Var("ei"), te.Var("ej")
        nvars = [v for v, _ in p.n.nonunit]
        n_vmap: dict[te.Var, te.Expr] = {v: i64(0) for v in p.n.vars}
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
        return For(i, te.minimum(i64(blk.nr), i64(M) - jo * blk.nr), "serial", For(
            j, te.minimum(i64(pixels), i64(P) - pix0), "vectorize",
            Store(self.out, out_index, value), masked_tail=self.s.target.masked_vectors))
