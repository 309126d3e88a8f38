"""The depthwise template's kernels: one builder, a method per form."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from lowering import loop_ir, te
from lowering.default_schedule import PARALLEL_MIN_WORK
from lowering.loop_ir import Buffer, BufLoad, For, Kernel, Seq, Stmt, Store
from lowering.lower import combine, flat_index
from lowering.templates.depthwise.forms import (
    exact_in_float,
    plane_epilogue,
    row_run_form,
    split_axis,
    valid_run,
)
from lowering.templates.depthwise.pattern import c64

if TYPE_CHECKING:
    from lowering.templates.depthwise.space import DepthwiseSpace

# planes per parallel iteration of the padded-plane form (they share one scratch slot)
PLANES_PER_CHUNK = 8
# products per FMA chain of a float convolution's window (chained_sum): 3x3 in two chains,
# 5x5 in five
TAPS_PER_CHAIN = 5


class _Builder:
    def __init__(self, space: DepthwiseSpace, rows: int, name: str, dear: bool = False) -> None:
        self.pat = space.pat
        self.rows = rows
        self.name = name
        self.dear = dear  # enough estimated time to share among the cores (worth_parallel)
        self.plane_epilogue = plane_epilogue(space.pat)
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
                      [For(plane, c64(nb * kb), self._loop_kind(nb * kb), body)])

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
        sums are exact in it (exact_in_float), else in the values' own type."""
        value = self.pat.x_value
        if value is None:
            return self._identity()
        return te.const(0, "float32" if exact_in_float(self.pat) else value.dtype)

    def _copied(self, load: te.Expr) -> te.Expr:
        """What the plane forms' copies hold for the input element `load`."""
        value = self.pat.x_value
        if value is None:
            return load
        v = self._lower(replace_load(value, self.pat.x, load))
        return te.cast("float32", v) if exact_in_float(self.pat) else v

    def _h_run(self, first: int, end: int, taps: tuple[int, ...],
               w_runs: list[tuple[int, int, tuple[int, ...]]], rows: int | None = None) -> Stmt:
        """Output rows [first, end) that read filter rows `taps`, `rows` (default: the
        configured number) per interior iteration."""
        oh = te.Var("oh")
        count = end - first
        block = (self.rows if rows is None else rows) if len(taps) == self.pat.h.taps else 1
        if block <= 1 or count < block:
            return For(oh, c64(end), "serial", self._row_block([oh], taps, w_runs), start=c64(first))
        ob = te.Var("ohb")
        blocks, rest = divmod(count, block)
        ohs = [c64(first) + ob * block + i for i in range(block)]
        out: list[Stmt] = [For(ob, c64(blocks), "serial", self._row_block(ohs, taps, w_runs))]
        if rest:
            out.append(For(oh, c64(end), "serial", self._row_block([oh], taps, w_runs),
                           start=c64(first + blocks * block)))
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
            return loop_ir.simplify_indices(For(ow, c64(self.pat.w.out), "vectorize",
                                                Seq(stores), interleave=1))
        loops: list[Stmt] = []
        for first, end, taps_w in w_runs:
            ow = te.Var("ow")
            stores = [self._store(oh, ow, taps_h, taps_w) for oh in ohs]
            vector, masked = row_run_form(self.pat, first, end, taps_w, self.masked_tail)
            loops.append(For(ow, c64(end), "vectorize" if vector else "serial", Seq(stores),
                             start=c64(first), masked_tail=masked))
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
                    xv = self._lower(replace_load(pat.x_value, pat.x, xv))
                taps.append((r0, r1, xv))
        return self._output(env, oh, ow, self._window(env, taps))

    def _window(self, env: dict[te.Var, te.Expr],
                taps: list[tuple[int, int, te.Expr]]) -> te.Expr:
        """The initial value, then each tap's value (r0, r1, x) in order: a weighted sum for a
        convolution, the window's sum or maximum for a pool. NaN-aware maxima (llvm.maximumnum,
        -0 below +0) are exactly associative, so they combine as a balanced tree, which gives
        the chain's result in less than half its latency (a 3x3 pool with its initial value:
        4 dependent steps instead of 9). A float convolution's weighted sum runs as
        independent chains of FMAs (chained_sum, a scheduled reduction's reassociation);
        integer windows and pools' sums keep the reduction's own order (= the default
        schedule's)."""
        pat = self.pat
        acc = self._lower(te.substitute(pat.init, env))
        if pat.weight is not None:
            products = []
            for r0, r1, xv in taps:
                wenv = {**env, pat.r[0]: c64(r0), pat.r[1]: c64(r1)}
                w = self._lower(te.substitute(pat.weight, wenv))
                if xv.dtype != w.dtype:  # an integer window's exact float32 values
                    w = te.cast(xv.dtype, w)
                products.append(xv * w)
            if pat.integer or products[0].dtype != acc.dtype:
                window = functools.reduce(lambda a, b: a + b, products)
                return acc + (window if window.dtype == acc.dtype else
                              te.cast(acc.dtype, window))
            return chained_sum(acc, products)
        leaves = [acc] + [xv for _, _, xv in taps]
        if pat.combiner == "max":
            return balanced(pat.combiner, leaves)
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
        body = replace_load(body, pat.conv, acc)
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
        oh, ow = v // c64(pat.w.out), v % c64(pat.w.out)
        index = flat_index(ob, [self.env[pat.n], self.env[pat.k], oh, ow])
        value = self._apply_epilogue(self.env, oh, ow, BufLoad(ob, index))
        return [loop_ir.simplify_indices(For(v, c64(pat.h.out * pat.w.out), "vectorize",
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
            self.env = {pat.n: c64(index // kb), pat.k: c64(index % kb)}
            return Seq([self._h_run(a, b, taps, w_runs, rows=1) for a, b, taps in h_runs]
                       + self._epilogue_pass())

        first, last = edge(0), edge(planes - 1)
        plane, v = te.Var("q"), te.Var("v")
        self.env = {pat.n: plane // kb, pat.k: plane % kb}
        env = self.env
        oh, ow = v // c64(ow_n), v % c64(ow_n)
        base = plane * (oh_n * ow_n)  # input and output planes have the same size
        taps = []
        for r0 in range(pat.h.taps):
            dh = r0 * pat.h.dilation + pat.h.offset - pat.h.shift
            for r1 in range(pat.w.taps):
                dw = r1 * pat.w.dilation + pat.w.offset - pat.w.shift
                conds = []
                if dh < 0:
                    conds.append(te.Binary("ge", oh, c64(-dh)))
                if dh > 0:
                    conds.append(te.Binary("lt", oh, c64(oh_n - dh)))
                if dw < 0:
                    conds.append(te.Binary("ge", ow, c64(-dw)))
                if dw > 0:
                    conds.append(te.Binary("lt", ow, c64(ow_n - dw)))
                xv: te.Expr = BufLoad(xb, base + v + (dh * ow_n + dw))
                if conds:
                    xv = te.select(functools.reduce(lambda a, b: te.Binary("and", a, b), conds),
                                   xv, ident)
                taps.append((r0, r1, xv))
        body = Seq([loop_ir.simplify_indices(For(v, c64(oh_n * ow_n), "vectorize", self._output(
            env, oh, ow, self._window(env, taps)), unroll_full=True))] + self._epilogue_pass())
        return Kernel(self.name, self.buffers,
                      [first, For(plane, c64(planes - 1), self._loop_kind(planes - 2), body,
                                  start=c64(1)), last])

    def row_vectors_kernel(self) -> Kernel:
        """Narrow pools whose every column sees every column tap (narrow_pool_form): each
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
                      [For(plane, c64(nb * kb), self._loop_kind(nb * kb), body)])

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
        (offs_h, lh, hq), (offs_w, lw, wq) = split_axis(pat.h, hx), split_axis(pat.w, wx)
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
        stages: list[Stmt] = [For(e, c64(size), "vectorize", Store(pad, p0 + e, ident))]
        cols = wx // sw
        for a in range(min(sh, hx)):
            row = i * sh + a
            at = (i + lh) * wq + lw

            def src(col: te.Expr, row: te.Expr = row) -> te.Expr:
                return self._copied(BufLoad(xb, flat_index(xb, [env[pat.n], chan, row, col])))

            copy: list[Stmt] = []
            if cols:
                copy.append(For(c, c64(cols), "vectorize", Seq([
                    Store(pad, sub(a, b) + at + c, src(c * sw + b)) for b in range(sw)])))
            copy += [Store(pad, sub(a, b) + at + cols, src(c64(cols * sw + b)))
                     for b in range(wx % sw)]
            stages.append(For(i, c64(-(-(hx - a) // sh)), "serial", Seq(copy)))
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
        5-wide interior run between two scalar borders. Stride 1 only (padded_plane_ok).
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
        (h0, h1), (w0, w1) = valid_run(pat.h.valid), valid_run(pat.w.valid)
        ph, pw, v = te.Var("ph"), te.Var("pw"), te.Var("v")
        # the padded copy: rows of padding, then input rows with padding at both ends (the
        # code generator splits the row loop where the condition changes)
        fill = For(pw, c64(wp), "vectorize", Store(pad, p0 + ph * wp + pw, ident))
        inside = te.Binary("and", te.Binary("ge", pw, c64(w0)), te.Binary("lt", pw, c64(w1)))
        src = BufLoad(xb, flat_index(xb, [env[pat.n], chan, ph - pat.h.shift,
                                          te.minimum(te.maximum(pw - pat.w.shift, c64(0)),
                                                     c64(pat.x.shape[3] - 1))]))
        src = self._copied(src)
        copy = For(pw, c64(wp), "vectorize", Store(pad, p0 + ph * wp + pw,
                                                  te.select(inside, src, ident)))
        stages: list[Stmt] = []
        if h0 > 0:
            stages.append(For(ph, c64(h0), "serial", fill))
        stages.append(For(ph, c64(h1), "serial", copy, start=c64(h0)))
        if h1 < hp:
            stages.append(For(ph, c64(hp), "serial", fill, start=c64(h1)))
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
            For(v, c64(virtual), "vectorize", Store(virt, v0 + v, self._window(env, taps))),
            For(oh, c64(pat.h.out), "serial", For(
                ow, c64(pat.w.out), "vectorize",
                self._output(env, oh, ow, BufLoad(virt, v0 + oh * pitch + ow)), interleave=1))]
        stages += self._epilogue_pass()
        count = te.minimum(c64(PLANES_PER_CHUNK), c64(planes) - ch * PLANES_PER_CHUNK)
        if planes % PLANES_PER_CHUNK == 0:
            count = c64(PLANES_PER_CHUNK)
        chunks = -(-planes // PLANES_PER_CHUNK)
        return Kernel(self.name, self.buffers,
                      [For(ch, c64(chunks), self._loop_kind(chunks),
                           For(j, count, "serial", Seq(stages)))])

    def _lower(self, e: te.Expr) -> te.Expr:
        if isinstance(e, te.Load):
            buf = self.buf[id(e.tensor)]
            return BufLoad(buf, flat_index(buf, [self._lower(i) for i in e.indices]))
        if isinstance(e, (te.Binary, te.Unary, te.Select, te.Cast)):
            return te.map_children(e, self._lower)
        # a variable, a constant, or an already-lowered subexpression (the window sum
        # inside an epilogue)
        return e



def chained_sum(init: te.Expr, products: list[te.Expr]) -> te.Expr:
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
    return balanced("sum", chains)


def balanced(combiner: str, leaves: list[te.Expr]) -> te.Expr:
    """The leaves combined pairwise, level by level."""
    while len(leaves) > 1:
        pairs = [combine(combiner, leaves[i], leaves[i + 1])
                 for i in range(0, len(leaves) - 1, 2)]
        leaves = pairs + leaves[len(pairs) * 2:]  # an odd one out joins the next level
    return leaves[0]


def replace_load(e: te.Expr, t: te.Tensor, by: te.Expr) -> te.Expr:
    """`e` (a TE expression) with every load of `t` replaced by the loop-IR value `by`."""
    if isinstance(e, te.Load):
        return by if e.tensor is t else te.Load(e.tensor, [replace_load(i, t, by)
                                                           for i in e.indices])
    if isinstance(e, (te.Binary, te.Unary, te.Select, te.Cast)):
        return te.map_children(e, lambda x: replace_load(x, t, by))
    return e
