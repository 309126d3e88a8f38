"""The GEMM template's cost model: seconds on one core of the target's machine
(`lowering/machine.py`) for a configuration, from the FMA work at the block's rate, the operand
traffic of the loop order from the level it stays in, packing, and partial-result passes.
"""

from __future__ import annotations

import math

from lowering.intrinsics import GemmBlock
from lowering.machine import Machine
from lowering.search.cost_model import worth_parallel
from lowering.search.space import Config
from lowering.templates.gemm.pattern import PixelTiling

# Parallel loops below this many multiply-adds cost more than they save (the integer template;
# float GEMMs and convolutions decide from their time: GemmCost.parallel_threads).
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
# Pixel mode's per-step stream from L2 runs at the machine's own rate (Machine.pixel_stream)
PIXELS_CALL_CYCLES = 40  # set-up of one tap-by-tap pixel-mode call (row pointers, branches)


class GemmCost:
    """The cost methods of `GemmSpace` (space.py), which holds the analysis they read."""

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
        compute = Mp * Np * K / _fma_rate(blk, m, m.efficiency_of(blk.name))  # per batch
        kc = int(config["kc"])  # type: ignore[call-overload]

        bw = m.bandwidth  # the rate of the smallest level a working set fits in

        # B's micro-panels per k step: NR packed floats, or the lines NR floats read in place
        # span (direct mode: rows a k pitch apart, which need not start on a line)
        b_row = self.direct_row_bytes(blk) if config["b"] == "direct" else blk.nr * 4
        a_bytes, b_bytes = Mp * K * 4, K * nt * b_row
        # an epilogue the micro-kernel does not apply to the tile in registers re-reads the
        # output: an M x NR panel ("n") or an MR x N one ("m")
        epilogue_pass = not self._fuses_epilogue(config)
        if config["parallel"] == "n":
            # jo > kb > io: a B micro-panel stays resident across the io loop; an A block is
            # reused only by the next N panel, after the whole of A went through the cache
            traffic = nt * a_bytes / bw(a_bytes) + mt * b_bytes / bw(kc * b_row)
            traffic += epilogue_pass * Mp * Np * 8 / bw(Mp * blk.nr * 4)
        elif config["parallel"] == "blocked":
            # chunk > kb > M block > jo > io: an A block is read from beyond L2 once per
            # chunk and re-read from L2 per N panel; a B micro-panel stays in L1 across the M
            # block's tiles, and a chunk of B is re-read per M block
            tiles, panels = self.blocking(blk, kc)
            kd = min(kc, K)
            traffic = math.ceil(nt / panels) * a_bytes / bw(a_bytes) + \
                nt * a_bytes / bw(tiles * blk.mr * kd * 4) + \
                mt * b_bytes / bw(kd * b_row) + \
                math.ceil(mt / tiles) * b_bytes / bw(panels * kd * b_row)
            traffic += epilogue_pass * Mp * Np * 8 / bw(Mp * blk.nr * 4)
        else:
            # io > kb > jo within chunks of N panels (chunk_panels): a chunk of B is re-read
            # per M tile from where half of the cache holds it, all of A once per chunk
            chunk = min(nt, self.chunk_panels(blk))
            traffic = mt * b_bytes / bw(2 * chunk * K * b_row) + \
                nt * a_bytes / bw(kc * blk.mr * 4)
            if chunk < nt:
                traffic += math.ceil(nt / chunk) * a_bytes / bw(a_bytes)
            traffic += epilogue_pass * Mp * Np * 8 / bw(blk.mr * chunk * blk.nr * 4)
        # first touch of each operand: B's whole rows, whichever lines its panels span
        b_dense = K * Np * 4
        traffic += (a_bytes + b_dense) / bw(a_bytes + b_dense)
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

    def direct_row_bytes(self, blk: GemmBlock) -> float:
        """Bytes of cache lines a micro-panel's NR floats of one k row occupy when B is read
        in place: the lines each tile's run spans, averaged over the N tiles and over the
        rows' offsets within a line (rows a k pitch apart, planes of 14x14 or 7x7 pixels
        start mid-line; a 24-float run spans 2 lines at best, a 16-float run 1 where it
        starts on one)."""
        p, line = self.pat, self.machine.line
        pitch = self.direct_strides[id(p.b)][1] * 4
        n = p.n.size
        spans = []
        for r in range(line // math.gcd(pitch, line) if pitch % line else 1):
            for j in range(math.ceil(n / blk.nr)):
                start = r * pitch + j * blk.nr * 4
                width = min(blk.nr, n - j * blk.nr) * 4
                spans.append((start % line + width - 1) // line + 1)
        return sum(spans) / len(spans) * line

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

    def _pixels_cost(self, config: Config) -> float:
        """Pixel mode: the FMA work of the tiles (a short one by a shorter micro-kernel),
        against the stream it reads per k step and tile from L2 — NR weights and the lines
        the tile's input pixels span — plus the partial tiles of tap-by-tap calls,
        the output's write-back and the in-place epilogue. Tap-by-tap calls (kc < K) reuse a
        chunk's weights from L1 across a block's tiles as far as the machine's
        `pixel_chunk_reuse` says."""
        p, blk, w = self.pat, self.block(config), self.pixel_window(config)
        m, line = self.machine, self.line_floats
        M, K, B = p.m.size, p.k.size, p.batch.size
        tiling = self.pixel_tiling(config)
        tiles = tiling.tiles
        nt = math.ceil(M / blk.nr)
        # whole tiles of m_full rows (all MR but in images of short rows), short ones of `tail`
        row_steps = (tiles - tiling.tails) * tiling.m_full / _pixel_rate(
            GemmBlock(tiling.m_full, blk.nv, blk.lanes), m)
        if tiling.tails:
            row_steps += tiling.tails * tiling.tail / _pixel_rate(
                GemmBlock(tiling.tail, blk.nv, blk.lanes), m)
        compute = row_steps * nt * blk.nr * K
        seg = min(blk.mr, w.out_row)
        # the lines the tile's pixels span, at most one per pixel (channels-last rows)
        lines = tiling.g * min((seg - 1) * w.col_stride + line, seg * line) / line
        # k steps closer than a line (a stem's filter width, channels-last) revisit the same
        # lines
        lines *= min(1.0, w.run_stride / line)
        kc = int(config["kc"])  # type: ignore[call-overload]
        weights = blk.nr * 4.0
        if kc < K and min(kc, w.run_extent) * blk.nr * 4 <= m.l1 // 2:
            # tap-by-tap calls: a chunk's weights come from L2 for the block's first tile
            # and, as far as the machine sustains it (Machine.pixel_chunk_reuse), from L1 for
            # the others
            weights *= 1 - m.pixel_chunk_reuse * (1 - 1 / (tiling.gb * tiling.tpr))
        traffic = tiles * nt * K * (weights + lines * m.line) / (
            m.pixel_stream * m.l2_bandwidth)
        t = max(compute, traffic) + STALL * traffic
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
        threads = self.parallel_threads()
        if config["b"] == "pixels":  # the busiest thread's share of the blocks' rows
            # (an image's last block may hold fewer groups: one thread has them all)
            tiling = self.pixel_tiling(config)
            items = p.batch.size * math.ceil(p.m.size / blk.nr)
            busiest = min(math.ceil(items * tiling.blocks / threads) * tiling.gb,
                          items * tiling.groups)
            return t * busiest / (items * tiling.groups)
        return t * math.ceil(tiles / threads) / tiles

    def parallel_threads(self) -> int:
        """The threads the kernel's parallel loop is shared by: the machine's cores, or one
        when its multiply-adds at one core's FMA peak are too little work to share
        (cost_model.worth_parallel)."""
        p, m = self.pat, self.machine
        macs = p.batch.size * p.m.size * p.n.size * p.k.size
        return m.cores if worth_parallel(macs / (m.hz * m.fma_per_cycle * m.lanes_f32),
                                         m.cores) else 1

    def pixel_tiling(self, config: Config) -> PixelTiling:
        """Pixel mode's tiling of the output rows for `config`, its blocks balanced over the
        threads of the parallel loop."""
        p, blk = self.pat, self.block(config)
        return PixelTiling.of(self.pixel_window(config), blk.mr, self.parallel_threads(),
                              p.batch.size * math.ceil(p.m.size / blk.nr))


def _fma_rate(blk: GemmBlock, m: Machine, measured: float | None) -> float:
    """Multiply-adds per second a micro-kernel sustains on cache-resident operands: the
    core's peak times the block's `measured` efficiency (`aotc calibrate`), else lowered when
    the block loads too much per FMA."""
    peak = m.hz * m.fma_per_cycle * blk.lanes
    if measured is not None:
        return peak * measured
    return peak * min(1.0, blk.intensity / EFF_INTENSITY) * EFF_MAX


def _pixel_rate(blk: GemmBlock, m: Machine) -> float:
    """`_fma_rate` of pixel mode's micro-kernel: its own measured figure, never the GEMM
    kernel's (14x2 measured 0.78 of peak as a GEMM block and 0.95-0.97 in pixel mode on a
    Zen 4 core, which had ranked pixel mode last on ResNet-50's 1x1 layers at 14x14)."""
    return _fma_rate(blk, m, m.pixel_efficiency_of(blk.name))


def _set_conflicts(stride: int, rows: int) -> bool:
    """Whether `rows` rows `stride` floats apart crowd into too few L1 sets: with 4 KiB per
    cache way, rows a multiple of 4 KiB apart share one set, and more rows than the set has
    ways (8) evict each other between k steps (measured: 6 or 7 rows per set cost nothing)."""
    period = 4096 // math.gcd(stride * 4, 4096)  # rows before the set index repeats
    return math.ceil(rows / period) > 8


def accumulates_line_pitched(n: int, nr: int, parallel: str, line_floats: int) -> bool:
    """Whether N tiles run on different threads ("n" order, several) on a row pitch that is
    not a whole number of cache lines: they then accumulate in a line-pitched scratch."""
    return bool(n % line_floats) and parallel != "m" and math.ceil(n / nr) > 1
