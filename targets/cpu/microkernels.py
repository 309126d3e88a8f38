"""The CPU target's implementation of lowering's intrinsics (`lowering/intrinsics.py`: their
shapes, names and calling conventions): the routines that tensorized loop nests call
(loop_ir.Call), written in LLVM IR.

Two families share one register-block shape. The convolution kernel (`_ConvWriter`, below)
adds tap loops around the k loop, reads its rows as output pixels of a convolution input and
stores the tile transposed after a fused epilogue. The GEMM kernel holds the MR x NV
accumulators in vector registers for the whole k loop: per k it loads NV vectors of one B row
and broadcasts MR elements of A into fused multiply-adds. It is written with explicit vector
types, so the same text serves AVX-512 (16 lanes), AVX2 (8) and NEON (4).

The routines are `internal alwaysinline`: at a call site whose strides are constants, LLVM folds
the address arithmetic into the loads.
"""

from __future__ import annotations

from collections.abc import Sequence

from lowering.intrinsics import (
    GemmBlock,
    conv_routine,
    parse_conv_routine,
    parse_gemm_routine,
    parse_int_gemm_routine,
    parse_transpose_routine,
    transpose_routine,
)
from targets.cpu.int_microkernels import IntGemmWriter
from targets.cpu.target import CpuTarget

# How many k steps ahead the micro-kernel prefetches B rows.
PREFETCH_ROWS = 8
# How many k steps ahead the convolution micro-kernel prefetches its weight panel (one
# prefetch per cache line of a step's NR weights). Measured on ResNet-50's pixel-mode layers,
# whose panels stream from L2/L3: 7x7 and 14x14 layers 0.69-0.84x the time without (16 steps
# gained less on 2048->512), others unchanged.
PREFETCH_WEIGHT_STEPS = 32
# How many k steps ahead the convolution micro-kernel prefetches its input pixels (ResNet-50's
# pixel-mode layers at 56x56 and 14x14: 4 steps measured equal, none 1.35-1.47x slower, 16 or
# 32 steps 1.07-1.34x slower).
PREFETCH_PIXEL_STEPS = 8
LINE_FLOATS = 16  # floats per 64-byte cache line


def routine_ir(name: str, target: CpuTarget) -> tuple[str, list[str]]:
    """LLVM IR text defining routine `name`, and the declarations it needs."""
    int_blk = parse_int_gemm_routine(name)
    if int_blk is not None:
        if int_blk.dot not in target.int_dots:
            raise KeyError(f"{name} needs {int_blk.dot.name}, which {target.name} lacks")
        return IntGemmWriter(int_blk).text()
    lanes = parse_transpose_routine(name)
    if lanes is not None:
        if lanes != target.vector_lanes_f32:
            raise KeyError(f"{name} is for {lanes}-lane vectors; {target.name} has "
                           f"{target.vector_lanes_f32}")
        return _TransposeWriter(GemmBlock(lanes, 1, lanes)).text()
    conv = parse_conv_routine(name)
    blk = parse_gemm_routine(name) if conv is None else conv[0]
    if blk is None:
        raise KeyError(f"no micro-kernel named {name}")
    if blk.lanes != target.vector_lanes_f32:
        raise KeyError(f"{name} is for {blk.lanes}-lane vectors; {target.name} has "
                       f"{target.vector_lanes_f32}")
    return _ConvWriter(blk, conv[1]).text() if conv is not None else _GemmWriter(blk).text()


# The fused epilogue's parameters, shared by both micro-kernels (the template passes them
# through GemmSpace._fused_args, the tensorize primitive through tensorize.epilogue_args).
EPILOGUE_PARAMS = ("ptr %bias, i64 %has_bias, i64 %has_lo, float %lo, i64 %has_hi, float %hi, "
                   "ptr %res, i64 %has_res")


class _GemmWriter:
    def __init__(self, blk: GemmBlock) -> None:
        self.b = blk
        self.vt = f"<{blk.lanes} x float>"
        self.mt = f"<{blk.lanes} x i1>"
        self.lines: list[str] = []
        self.n = 0
        self.arow: list[str] = []

    def t(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def emit(self, s: str) -> None:
        self.lines.append("  " + s)

    def label(self, s: str) -> None:
        self.lines.append(f"{s}:")

    def masked_load(self, ptr: str, mask: str) -> str:
        """One vector from `ptr`, lanes off in `mask` read as 0 (and not touched in memory)."""
        x = self.t()
        self.emit(f"{x} = call {self.vt} @llvm.masked.load.v{self.b.lanes}f32.p0(ptr align 4 "
                  f"{ptr}, {self.mt} {mask}, {self.vt} zeroinitializer)")
        return x

    def splat_i64(self, x: str) -> str:
        L = self.b.lanes
        s = self.t()
        self.emit(f"{s}.i = insertelement <{L} x i64> poison, i64 {x}, i64 0")
        self.emit(f"{s} = shufflevector <{L} x i64> {s}.i, <{L} x i64> poison, "
                  f"<{L} x i32> zeroinitializer")
        return s

    def splat(self, x: str) -> str:
        """A vector of float `x` in every lane."""
        vt, L = self.vt, self.b.lanes
        s0, s = self.t(), self.t()
        self.emit(f"{s0} = insertelement {vt} poison, float {x}, i64 0")
        self.emit(f"{s} = shufflevector {vt} {s0}, {vt} poison, <{L} x i32> zeroinitializer")
        return s

    def iota(self, start: int) -> str:
        return "<" + ", ".join(f"i64 {start + i}" for i in range(self.b.lanes)) + ">"

    def column_vectors(self, ptr: str, masks: list[str]) -> list[str]:
        """A tile row's NV vectors from `ptr` (a bias per column), each under its mask."""
        out = []
        for v in range(self.b.nv):
            p = self.t()
            self.emit(f"{p} = getelementptr float, ptr {ptr}, i64 {v * self.b.lanes}")
            out.append(self.masked_load(p, masks[v]))
        return out

    def column_masks(self) -> list[str]:
        """Per vector of a tile row, the lanes below %n_valid."""
        L = self.b.lanes
        nvs = self.splat_i64("%n_valid")
        masks = []
        for v in range(self.b.nv):
            m = self.t()
            self.emit(f"{m} = icmp ult <{L} x i64> {self.iota(v * L)}, {nvs}")
            masks.append(m)
        return masks

    def declarations(self) -> list[str]:
        vt, mt = self.vt, self.mt
        sfx = f"v{self.b.lanes}f32"
        return [
            f"declare {vt} @llvm.fma.{sfx}({vt}, {vt}, {vt})",
            f"declare {vt} @llvm.masked.load.{sfx}.p0(ptr, {mt}, {vt})",
            f"declare void @llvm.masked.store.{sfx}.p0({vt}, ptr, {mt})",
            "declare i64 @llvm.smin.i64(i64, i64)",
            "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
        ]

    def text(self) -> tuple[str, list[str]]:
        b, vt, mt = self.b, self.vt, self.mt
        L = b.lanes
        sfx = f"v{L}f32"
        decls = self.declarations()
        head = (f"define internal void @{b.routine}(ptr %a, i64 %a_rs, i64 %a_ks, ptr %b, "
                "i64 %b_ks, ptr %c, i64 %ldc, i64 %k, i64 %m_valid, i64 %n_valid, "
                f"i64 %accumulate, i64 %finish, {EPILOGUE_PARAMS}) alwaysinline nounwind")
        self.label("entry")
        self.emit(f"%pf_off = mul i64 %b_ks, {PREFETCH_ROWS}")
        last = self.t()
        self.emit(f"{last} = sub i64 %m_valid, 1")
        # row pointers (rows past m_valid alias the last valid row)
        arow, crow, self.row_index = [], [], []
        for r in range(b.mr):
            rr = self.t()
            self.emit(f"{rr} = call i64 @llvm.smin.i64(i64 {r}, i64 {last})")
            self.row_index.append(rr)
            ao, co = self.t(), self.t()
            self.emit(f"{ao} = mul i64 {rr}, %a_rs")
            self.emit(f"{co} = mul i64 {rr}, %ldc")
            ap, cp = self.t(), self.t()
            self.emit(f"{ap} = getelementptr float, ptr %a, i64 {ao}")
            self.emit(f"{cp} = getelementptr float, ptr %c, i64 {co}")
            arow.append(ap)
            crow.append(cp)
        self.arow = arow
        masks = self.column_masks()
        # C column pointers per row and vector
        cptr = [[None] * b.nv for _ in range(b.mr)]
        for r in range(b.mr):
            for v in range(b.nv):
                p = self.t()
                self.emit(f"{p} = getelementptr float, ptr {crow[r]}, i64 {v * L}")
                cptr[r][v] = p
        acc_flag = self.t()
        self.emit(f"{acc_flag} = icmp ne i64 %accumulate, 0")
        self.emit(f"br i1 {acc_flag}, label %load_c, label %zero_c")
        self.label("load_c")
        loaded = [[""] * b.nv for _ in range(b.mr)]
        for r in range(b.mr):
            for v in range(b.nv):
                loaded[r][v] = self.masked_load(cptr[r][v], masks[v])
        self.emit("br label %start")
        self.label("zero_c")
        self.emit("br label %start")
        self.label("start")
        zeros = [["zeroinitializer"] * b.nv for _ in range(b.mr)]
        init = self._phis(loaded, "load_c", zeros, "zero_c")
        full = self.t()
        self.emit(f"{full} = icmp eq i64 %n_valid, {b.nr}")
        self.emit(f"br i1 {full}, label %full.head, label %tail.head")
        res_full = self._k_loop("full", init, masks=None)
        res_tail = self._k_loop("tail", init, masks=masks)
        self.label("store")
        res = self._phis(res_full, "full.exit", res_tail, "tail.exit")
        res, residual = self._fused_epilogue(res, masks)
        # a whole tile is stored with plain stores: AVX2's masked store (vmaskmovps) is
        # microcoded on AMD cores and NEON has none (LLVM scalarizes it)
        rows = self.t()
        self.emit(f"{rows} = icmp eq i64 %m_valid, {b.mr}")
        whole = self.t()
        self.emit(f"{whole} = and i1 {full}, {rows}")
        self.emit(f"br i1 {whole}, label %store.whole, label %store.part")
        self.label("store.whole")
        ones = "<" + ", ".join(["i1 true"] * L) + ">"
        for r in range(b.mr):
            for v in range(b.nv):
                y = residual(r, v, ones)
                self.emit(f"store {vt} {y}, ptr {cptr[r][v]}, align 4")
        self.emit("ret void")
        self.label("store.part")
        for r in range(b.mr):
            rv = self.t()
            self.emit(f"{rv} = icmp slt i64 {r}, %m_valid")
            for v in range(b.nv):
                m = self.t()
                self.emit(f"{m} = select i1 {rv}, {mt} {masks[v]}, {mt} zeroinitializer")
                y = residual(r, v, m)
                self.emit(f"call void @llvm.masked.store.{sfx}.p0({vt} {y}, ptr align 4 "
                          f"{cptr[r][v]}, {mt} {m})")
        self.emit("ret void")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n", decls

    def _fused_epilogue(self, res: list[list[str]], masks: list[str]):
        """On the call that finishes the reduction (%finish): + bias[row] (has_bias 1: rows
        are output channels) or + bias[column] (has_bias 2: a linear layer's bias, a vector
        per column vector, read under the columns' masks), then per stored vector + the
        residual (laid out like C, read under the store's mask) and the clamps. Returns the
        tile and the per-vector finisher."""
        b, vt = self.b, self.vt
        L = b.lanes
        self.emit("%fin = icmp ne i64 %finish, 0")
        for name in ("res", "lo", "hi"):
            on = self.t()
            self.emit(f"{on} = icmp ne i64 %has_{name}, 0")
            self.emit(f"%f{name} = and i1 %fin, {on}")
        for name, value in (("bias", 1), ("biasc", 2)):
            on = self.t()
            self.emit(f"{on} = icmp eq i64 %has_bias, {value}")
            self.emit(f"%f{name} = and i1 %fin, {on}")

        def load_bias() -> list[str]:  # one splat per row; rows past m_valid repeat the last
            out = []
            for rr in self.row_index:
                p, x = self.t(), self.t()
                self.emit(f"{p} = getelementptr float, ptr %bias, i64 {rr}")
                self.emit(f"{x} = load float, ptr {p}, align 4")
                out.append(self.splat(x))
            return out

        bias = self._load_or_zero("bias", "%fbias", load_bias)
        column_bias = self._load_or_zero("biasc", "%fbiasc",
                                         lambda: self.column_vectors("%bias", masks))
        out = [[""] * b.nv for _ in range(b.mr)]
        for r in range(b.mr):
            for v in range(b.nv):
                a, x, a2, x2 = self.t(), self.t(), self.t(), self.t()
                self.emit(f"{a} = fadd {vt} {res[r][v]}, {bias[r]}")
                self.emit(f"{x} = select i1 %fbias, {vt} {a}, {vt} {res[r][v]}")
                self.emit(f"{a2} = fadd {vt} {x}, {column_bias[v]}")
                self.emit(f"{x2} = select i1 %fbiasc, {vt} {a2}, {vt} {x}")
                out[r][v] = x2
        bounds = self._bounds({"lo": "%flo", "hi": "%fhi"})

        def finish(r: int, v: int, mask: str) -> str:
            off, rp, rq = self.t(), self.t(), self.t()
            self.emit(f"{off} = mul i64 %ldc, {r}")
            self.emit(f"{rp} = getelementptr float, ptr %res, i64 {off}")
            self.emit(f"{rq} = getelementptr float, ptr {rp}, i64 {v * L}")
            return self._clamp(self._add_residual(out[r][v], rq, mask, "%fres"), bounds)

        return out, finish

    def _bounds(self, flags: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
        """(comparison, splat bound, i1 flag) for lo and hi; the flags are %has_lo/%has_hi
        unless given."""
        out = []
        for name, cmp in (("lo", "olt"), ("hi", "ogt")):
            s = self.splat(f"%{name}")
            if flags is None:
                flag = self.t()
                self.emit(f"{flag} = icmp ne i64 %has_{name}, 0")
            else:
                flag = flags[name]
            out.append((cmp, s, flag))
        return out

    def _add_residual(self, x: str, ptr: str, mask: str, flag: str) -> str:
        """x + the residual vector at ptr (read under `mask`, not at all without `flag`)."""
        mt, vt = self.mt, self.vt
        rm, a, y = self.t(), self.t(), self.t()
        self.emit(f"{rm} = select i1 {flag}, {mt} {mask}, {mt} zeroinitializer")
        r = self.masked_load(ptr, rm)
        self.emit(f"{a} = fadd {vt} {x}, {r}")
        self.emit(f"{y} = select i1 {flag}, {vt} {a}, {vt} {x}")
        return y

    def _clamp(self, x: str, bounds: list[tuple[str, str, str]]) -> str:
        """lo where x < lo (has_lo), then hi where x > hi (has_hi): ReLU and Clip, NaN
        passing through as in the element-wise operators."""
        vt, L = self.vt, self.b.lanes
        for cmp, s, flag in bounds:
            c, c2, y = self.t(), self.t(), self.t()
            self.emit(f"{c} = fcmp {cmp} {vt} {x}, {s}")
            self.emit(f"{c2} = select i1 {flag}, <{L} x i1> {c}, <{L} x i1> zeroinitializer")
            self.emit(f"{y} = select <{L} x i1> {c2}, {vt} {s}, {vt} {x}")
            x = y
        return x

    def _load_or_zero(self, tag: str, cond: str, load) -> list[str]:
        """Vectors that `load()` emits when `cond` holds, zeros otherwise (a branch, so
        nothing is read when it does not)."""
        self.emit(f"br i1 {cond}, label %{tag}.load, label %{tag}.none")
        self.label(f"{tag}.load")
        loaded = load()
        self.emit(f"br label %{tag}.done")
        self.label(f"{tag}.none")
        self.emit(f"br label %{tag}.done")
        self.label(f"{tag}.done")
        out = []
        for x in loaded:
            y = self.t()
            self.emit(f"{y} = phi {self.vt} [ {x}, %{tag}.load ], "
                      f"[ zeroinitializer, %{tag}.none ]")
            out.append(y)
        return out

    def _transpose(self, rows: list[str]) -> list[str]:
        """out[e][i] = rows[i][e] for an L x L block: log2 L butterfly rounds, each pairing
        rows s apart and swapping their s-wide blocks of lanes."""
        L, vt = self.b.lanes, self.vt
        x = list(rows)
        s = 1
        while s < L:
            lo = ", ".join(f"i32 {e if not e & s else L + e - s}" for e in range(L))
            hi = ", ".join(f"i32 {e + s if not e & s else L + e}" for e in range(L))
            new = list(x)
            for i in range(L):
                if i & s:
                    continue
                a, c = self.t(), self.t()
                self.emit(f"{a} = shufflevector {vt} {x[i]}, {vt} {x[i + s]}, <{L} x i32> <{lo}>")
                self.emit(f"{c} = shufflevector {vt} {x[i]}, {vt} {x[i + s]}, <{L} x i32> <{hi}>")
                new[i], new[i + s] = a, c
            x = new
            s *= 2
        return x

    def _fma_step(self, kk: str, bk: str, rows: list[str], masks: list[str] | None,
                  acc: list[list[str]], name, prefetch_rows: Sequence[int] = ()
                  ) -> list[list[str]]:
        """One k step: the NV vectors of B's row at `bk` (masked loads on tail tiles), and per
        row r the A element at rows[r] + kk*a_ks broadcast into NV fused multiply-adds onto
        acc[r][v]; the new accumulators are named name(r, v). On whole tiles A's column is
        prefetched %pf_off ahead from each row of `prefetch_rows` (see _ConvWriter)."""
        b, vt = self.b, self.vt
        L = b.lanes
        bvec = []
        for v in range(b.nv):
            p = self.t()
            self.emit(f"{p} = getelementptr float, ptr {bk}, i64 {v * L}")
            if masks is None:
                x = self.t()
                self.emit(f"{x} = load {vt}, ptr {p}, align 4")
            else:
                x = self.masked_load(p, masks[v])
            bvec.append(x)
        aoff = self.t()
        self.emit(f"{aoff} = mul i64 {kk}, %a_ks")
        for r in prefetch_rows if masks is None else ():
            q = self.t()
            self.emit(f"{q} = getelementptr float, ptr {rows[r]}, i64 {aoff}")
            self.prefetch(q)
        new = [[""] * b.nv for _ in range(b.mr)]
        for r in range(b.mr):
            p, x = self.t(), self.t()
            self.emit(f"{p} = getelementptr float, ptr {rows[r]}, i64 {aoff}")
            self.emit(f"{x} = load float, ptr {p}, align 4")
            sp = self.splat(x)
            for v in range(b.nv):
                new[r][v] = name(r, v)
                self.emit(f"{new[r][v]} = call {vt} @llvm.fma.v{L}f32({vt} {sp}, "
                          f"{vt} {bvec[v]}, {vt} {acc[r][v]})")
        return new

    def prefetch(self, ptr: str, ahead: str = "%pf_off") -> None:
        """Prefetch (for reading, into all cache levels) `ahead` floats (by default
        PREFETCH_ROWS steps) past `ptr`."""
        q = self.t()
        self.emit(f"{q} = getelementptr float, ptr {ptr}, i64 {ahead}")
        self.emit(f"call void @llvm.prefetch.p0(ptr {q}, i32 0, i32 3, i32 1)")

    def _phis(self, a: list[list[str]], a_block: str, b: list[list[str]], b_block: str
              ) -> list[list[str]]:
        """One phi per accumulator: a[r][v] coming from block a_block, b[r][v] from b_block."""
        out = [[""] * self.b.nv for _ in range(self.b.mr)]
        for r in range(self.b.mr):
            for v in range(self.b.nv):
                x = self.t()
                self.emit(f"{x} = phi {self.vt} [ {a[r][v]}, %{a_block} ], "
                          f"[ {b[r][v]}, %{b_block} ]")
                out[r][v] = x
        return out

    def _k_loop(self, tag: str, init: list[list[str]], masks: list[str] | None) -> list[list[str]]:
        """for k: acc[r][v] = fma(splat(A[r,k]), B[k, v], acc[r][v]); returns the exit values."""
        b, vt = self.b, self.vt
        head, body, exit_ = f"{tag}.head", f"{tag}.body", f"{tag}.exit"
        kk, knext = f"%{tag}.k", f"%{tag}.knext"
        acc = [[f"%{tag}.acc{r}_{v}" for v in range(b.nv)] for r in range(b.mr)]
        self.label(head)
        self.emit(f"{kk} = phi i64 [ 0, %start ], [ {knext}, %{body} ]")
        for r in range(b.mr):
            for v in range(b.nv):
                self.emit(f"{acc[r][v]} = phi {vt} [ {init[r][v]}, %start ], "
                          f"[ %{tag}.new{r}_{v}, %{body} ]")
        cont = self.t()
        self.emit(f"{cont} = icmp slt i64 {kk}, %k")
        self.emit(f"br i1 {cont}, label %{body}, label %{exit_}")
        self.label(body)
        boff = self.t()
        self.emit(f"{boff} = mul i64 {kk}, %b_ks")
        bk = self.t()
        self.emit(f"{bk} = getelementptr float, ptr %b, i64 {boff}")
        if masks is None and PREFETCH_ROWS:
            # B rows PREFETCH_ROWS ahead: rows far apart (window or direct operands) defeat
            # the hardware prefetchers, and a prefetch costs only a load-port slot here
            for line in range((b.nr * 4 + 63) // 64 + 1):
                q = self.t()
                self.emit(f"{q} = getelementptr i8, ptr {bk}, i64 {line * 64}")
                self.prefetch(q)
        # the new accumulators carry fixed names: the phis above refer to them
        self._fma_step(kk, bk, self.arow, masks, acc, lambda r, v: f"%{tag}.new{r}_{v}")
        self.emit(f"{knext} = add nsw i64 {kk}, 1")
        self.emit(f"br label %{head}")
        self.label(exit_)
        self.emit("br label %store")
        return acc


class _ConvWriter(_GemmWriter):
    """The convolution micro-kernel: an MR x NR output tile's reduction over T1 x T2 taps
    and K input channels in registers, stored transposed.

        C[j, r] (+)= sum_{t1 < T1, t2 < T2, k < K} A[x(r) + t1*s1 + t2*s2 + k*a_ks]
                                                    * B[(t1*T2 + t2)*b_ts + k*b_ks + j]
        x(r) = (r / ow)*a_rp + (r % ow)*a_rs

    for r < m_valid and j < n_valid. The rows are consecutive output pixels, numbered across
    output rows of `ow` pixels (a tile of short rows spans several) and read in place from
    the input: a_rp and a_rs are the input offsets of an output row and of a pixel along it
    (the convolution's strides), a_ks the input's channel pitch and (s1, s2) the taps'
    offsets. A full tile has m_full rows (rows past it repeat the last one); at call sites
    where ow, a_rp, a_rs and m_full are constants, every row's offset folds to a constant,
    so all rows share one base register. The columns are output channels: B is the packed
    weight panel, NR floats a step even where n_valid < NR (the panel is zero there, so
    those lanes are computed and never stored). A reduction split over
    several calls keeps its partial tile in `acc` ([MR][NR], untransposed): `first` starts
    from zero rather than from `acc`, `last` stores the result at c + j*ldc + r, i.e.
    straight into NCHW output rows (consecutive pixels are consecutive there), each L x L
    block transposed in registers (log2 L rounds of two-source shuffles), rather than back
    into `acc`. Arguments:
        (ptr a, i64 ow, i64 a_rp, i64 a_rs, i64 a_ks, i64 t1, i64 s1, i64 t2, i64 s2,
         ptr b, i64 b_ks, i64 b_ts, ptr c, i64 ldc, i64 k, i64 m_full, i64 m_valid,
         i64 n_valid, ptr acc, i64 first, i64 last, ptr bias, i64 has_bias, i64 has_lo,
         float lo, i64 has_hi, float hi, ptr res, i64 has_res)
    The last call also applies the fused epilogue: + bias[j] before the transposition, then
    + res[j*ldc + r] (a residual laid out like C) and the clamps (see _clamp) on the
    transposed vectors, right before each store.
    """

    def __init__(self, blk: GemmBlock, near: bool = False) -> None:
        super().__init__(blk)
        self.near = near  # see conv_routine
        # Rows a plane apart per k step defeat the hardware prefetchers, so each step
        # prefetches its input column PREFETCH_PIXEL_STEPS ahead: the first, middle and last
        # row cover the lines it spans at strides up to 2; rows less than a line apart (near)
        # are covered by the first and last (a third prefetch per step measured 2-9 % on such
        # layers, its load-port slot and uop).
        rows = {0, blk.mr - 1} if near else {0, blk.mr // 2, blk.mr - 1}
        self.prefetch_rows = sorted(rows) if PREFETCH_PIXEL_STEPS else []

    def text(self) -> tuple[str, list[str]]:
        b, vt, mt = self.b, self.vt, self.mt
        L = b.lanes
        sfx = f"v{L}f32"
        decls = self.declarations()
        head = (f"define internal void @{conv_routine(b, self.near)}(ptr %a, i64 %ow, "
                "i64 %a_rp, i64 %a_rs, i64 %a_ks, "
                "i64 %t1, i64 %s1, i64 %t2, i64 %s2, ptr %b, i64 %b_ks, i64 %b_ts, ptr %c, "
                "i64 %ldc, i64 %k, i64 %m_full, i64 %m_valid, i64 %n_valid, ptr %acc, i64 %first, "
                f"i64 %last, {EPILOGUE_PARAMS}) alwaysinline nounwind")
        self.label("entry")
        self.emit(f"%pf_off = mul i64 %a_ks, {PREFETCH_PIXEL_STEPS}")
        self.emit(f"%pfb_off = mul i64 %b_ks, {PREFETCH_WEIGHT_STEPS}")
        masks = self.column_masks()
        # the partial tile: zeros, or loaded from acc
        first = self.t()
        self.emit(f"{first} = icmp eq i64 %first, 0")

        def acc_slot(r: int, v: int) -> str:  # the partial tile: [MR][NR] floats at %acc
            p = self.t()
            self.emit(f"{p} = getelementptr float, ptr %acc, i64 {r * b.nr + v * L}")
            return p

        def load_acc() -> list[str]:
            out = []
            for r in range(b.mr):
                for v in range(b.nv):
                    x = self.t()
                    self.emit(f"{x} = load {vt}, ptr {acc_slot(r, v)}, align 4")
                    out.append(x)
            return out

        init = self._load_or_zero("init", first, load_acc)
        # two versions of the loops: all rows (constant row offsets) or fewer. The weight
        # panel is zero past the last channel (its packing pads each tile to NR), so a
        # partial channel tile loads whole vectors too: only its stores take masks (AVX2's
        # masked loads kept their masks in registers the tile needed, spilling accumulators)
        full_rows = self.t()
        self.emit(f"{full_rows} = icmp eq i64 %m_valid, %m_full")
        self.emit(f"br i1 {full_rows}, label %full.pre, label %fullp.pre")
        ends = []
        for tag in ("full", "fullp"):
            self.label(f"{tag}.pre")
            arow = self._rows("%m_full" if tag == "full" else "%m_valid")
            out, end = self._loop(f"{tag}.t1", "%t1", f"{tag}.pre", init,
                                  lambda i1, acc, tag=tag, arow=arow: self._loop(
                                      f"{tag}.t2", "%t2", None, acc,
                                      lambda i2, acc2: self._tap(tag, i1, i2, acc2, arow))[0])
            self.emit("br label %store")
            ends.append((out, end))
        self.label("store")
        res = []
        for i in range(b.mr * b.nv):
            x = self.t()
            self.emit(f"{x} = phi {vt} " + ", ".join(f"[ {out[i]}, %{end} ]"
                                                      for out, end in ends))
            res.append(x)
        last_call = self.t()
        self.emit(f"{last_call} = icmp ne i64 %last, 0")
        self.emit(f"br i1 {last_call}, label %out, label %keep")
        self.label("keep")
        for r in range(b.mr):
            for v in range(b.nv):
                self.emit(f"store {vt} {res[r * b.nv + v]}, ptr {acc_slot(r, v)}, align 4")
        self.emit("ret void")
        self.label("out")
        res = self._add_bias(res, masks)
        bounds = self._bounds()
        self.emit("%fr = icmp ne i64 %has_res, 0")
        # a whole tile's full groups of L pixels are stored with plain stores (AVX2's masked
        # store is microcoded on AMD cores; NEON scalarizes it); the rest under masks
        whole_m, whole_n, whole = self.t(), self.t(), self.t()
        self.emit(f"{whole_m} = icmp eq i64 %m_valid, {b.mr}")
        self.emit(f"{whole_n} = icmp eq i64 %n_valid, {b.nr}")
        self.emit(f"{whole} = and i1 {whole_m}, {whole_n}")
        self.emit(f"br i1 {whole}, label %out.whole, label %out.part")
        ones = "<" + ", ".join(["i1 true"] * L) + ">"
        for part in ("whole", "part"):
            self.label(f"out.{part}")
            mvs = self.splat_i64("%m_valid")
            for rc in range(0, b.mr, L):
                plain = part == "whole" and rc + L <= b.mr
                pix_mask = self.t()
                self.emit(f"{pix_mask} = icmp ult <{L} x i64> {self.iota(rc)}, {mvs}")
                for v in range(b.nv):
                    rows = [res[(rc + i) * b.nv + v] if rc + i < b.mr else "zeroinitializer"
                            for i in range(L)]
                    cols = self._transpose(rows)
                    for e in range(L):
                        ch = v * L + e
                        m, off, p = self.t(), self.t(), self.t()
                        if plain:
                            m = ones
                        else:
                            on = self.t()
                            self.emit(f"{on} = icmp slt i64 {ch}, %n_valid")
                            self.emit(f"{m} = select i1 {on}, {mt} {pix_mask}, "
                                      f"{mt} zeroinitializer")
                        self.emit(f"{off} = mul i64 %ldc, {ch}")
                        self.emit(f"{p} = getelementptr float, ptr %c, i64 {off}")
                        q = self.t()
                        self.emit(f"{q} = getelementptr float, ptr {p}, i64 {rc}")
                        # the residual: read under the store's mask, none at all without one
                        rp, rq = self.t(), self.t()
                        self.emit(f"{rp} = getelementptr float, ptr %res, i64 {off}")
                        self.emit(f"{rq} = getelementptr float, ptr {rp}, i64 {rc}")
                        y = self._clamp(self._add_residual(cols[e], rq, m, "%fr"), bounds)
                        if plain:
                            self.emit(f"store {vt} {y}, ptr {q}, align 4")
                        else:
                            self.emit(f"call void @llvm.masked.store.{sfx}.p0({vt} {y}, "
                                      f"ptr align 4 {q}, {mt} {m})")
            self.emit("ret void")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n", decls

    def _add_bias(self, res: list[str], masks: list[str]) -> list[str]:
        """+ bias[j] (has_bias) on the finished tile, columns being output channels."""
        b, vt = self.b, self.vt
        self.emit("%fb = icmp ne i64 %has_bias, 0")
        bias = self._load_or_zero("bias", "%fb", lambda: self.column_vectors("%bias", masks))
        out = []
        for r in range(b.mr):
            for v in range(b.nv):
                a, x = self.t(), self.t()
                self.emit(f"{a} = fadd {vt} {res[r * b.nv + v]}, {bias[v]}")
                self.emit(f"{x} = select i1 %fb, {vt} {a}, {vt} {res[r * b.nv + v]}")
                out.append(x)
        return out

    def _rows(self, rows: str) -> list[str]:
        """Row pointers x(min(r, rows - 1)) for r < MR."""
        last = self.t()
        self.emit(f"{last} = sub i64 {rows}, 1")
        arow = []
        for r in range(self.b.mr):
            rr, oh, ow, o1, o2, ao, ap = (self.t() for _ in range(7))
            self.emit(f"{rr} = call i64 @llvm.smin.i64(i64 {r}, i64 {last})")
            self.emit(f"{oh} = udiv i64 {rr}, %ow")
            self.emit(f"{ow} = urem i64 {rr}, %ow")
            self.emit(f"{o1} = mul i64 {oh}, %a_rp")
            self.emit(f"{o2} = mul i64 {ow}, %a_rs")
            self.emit(f"{ao} = add i64 {o1}, {o2}")
            self.emit(f"{ap} = getelementptr float, ptr %a, i64 {ao}")
            arow.append(ap)
        return arow

    def _loop(self, tag: str, count: str, pred: str | None, init: list[str], body
              ) -> tuple[list[str], str]:
        """A counted loop carrying vector values: `body(i, values)` emits the body (it may
        open blocks of its own) and returns the new values. Returns the values at exit and
        the exit block. `pred` is the block that branches in (None: the current block, which
        is closed here)."""
        vt = self.vt
        if pred is None:
            pred = f"{tag}.pre"
            self.emit(f"br label %{pred}")
            self.label(pred)
        self.emit(f"br label %{tag}.head")
        self.label(f"{tag}.head")
        i = f"%{tag}.i"
        self.emit(f"{i} = phi i64 [ 0, %{pred} ], [ {i}.next, %{tag}.latch ]")
        phis = [f"%{tag}.c{n}" for n in range(len(init))]
        slot = len(self.lines)
        self.lines += [""] * len(init)  # the phis, filled in once the body's values are known
        cont = self.t()
        self.emit(f"{cont} = icmp slt i64 {i}, {count}")
        self.emit(f"br i1 {cont}, label %{tag}.body, label %{tag}.exit")
        self.label(f"{tag}.body")
        new = body(i, phis)
        self.emit(f"br label %{tag}.latch")
        self.label(f"{tag}.latch")
        self.emit(f"{i}.next = add nsw i64 {i}, 1")
        self.emit(f"br label %{tag}.head")
        for n, (p, x0, x1) in enumerate(zip(phis, init, new, strict=True)):
            self.lines[slot + n] = f"  {p} = phi {vt} [ {x0}, %{pred} ], [ {x1}, %{tag}.latch ]"
        self.label(f"{tag}.exit")
        return phis, f"{tag}.exit"

    def _tap(self, tag: str, i1: str, i2: str, acc: list[str], arow: list[str]) -> list[str]:
        """The k loop of one tap (t1, t2): A rows shifted by the tap's offset, B from the tap's
        part of the panel. Returns the accumulators after it."""
        b = self.b
        o1, o2, off, tflat, tf2, boff, bt = (self.t() for _ in range(7))
        self.emit(f"{o1} = mul i64 {i1}, %s1")
        self.emit(f"{o2} = mul i64 {i2}, %s2")
        self.emit(f"{off} = add i64 {o1}, {o2}")
        self.emit(f"{tflat} = mul i64 {i1}, %t2")
        self.emit(f"{tf2} = add i64 {tflat}, {i2}")
        self.emit(f"{boff} = mul i64 {tf2}, %b_ts")
        self.emit(f"{bt} = getelementptr float, ptr %b, i64 {boff}")
        rows = []
        for r in range(b.mr):
            p = self.t()
            self.emit(f"{p} = getelementptr float, ptr {arow[r]}, i64 {off}")
            rows.append(p)

        def step(kk: str, cur: list[str]) -> list[str]:
            bo, bk = self.t(), self.t()
            self.emit(f"{bo} = mul i64 {kk}, %b_ks")
            self.emit(f"{bk} = getelementptr float, ptr {bt}, i64 {bo}")
            if PREFETCH_WEIGHT_STEPS:  # each line of the step's weights
                for v in range(0, b.nv, max(1, LINE_FLOATS // b.lanes)):
                    q = self.t()
                    self.emit(f"{q} = getelementptr float, ptr {bk}, i64 {v * b.lanes}")
                    self.prefetch(q, "%pfb_off")
            grid = [cur[r * b.nv:(r + 1) * b.nv] for r in range(b.mr)]
            new = self._fma_step(kk, bk, rows, None, grid, lambda r, v: self.t(),
                                 self.prefetch_rows)
            return [x for row in new for x in row]

        return self._loop(f"{tag}.k{tflat[2:]}", "%k", None, acc, step)[0]


class _TransposeWriter(_GemmWriter):
    """The block-transposing copy: an L x L block from L rows `src_stride` floats apart, of
    which the first `cols` floats each, into `cols` rows `dst_stride` floats apart of L
    floats each: dst[j*dst_stride + i] = src[i*src_stride + j] for i < L, j < cols. Loads,
    log2 L rounds of shuffles (the convolution kernel's transposition) and stores, where a
    scalar loop nest would gather one float per load. Arguments:
        (ptr src, i64 src_stride, ptr dst, i64 dst_stride, i64 cols)"""

    def text(self) -> tuple[str, list[str]]:
        b, vt, mt = self.b, self.vt, self.mt
        L = b.lanes
        head = (f"define internal void @{transpose_routine(L)}(ptr %src, i64 %src_stride, "
                "ptr %dst, i64 %dst_stride, i64 %cols) alwaysinline nounwind")
        self.label("entry")
        cols = self.splat_i64("%cols")
        mask = self.t()
        self.emit(f"{mask} = icmp ult <{L} x i64> {self.iota(0)}, {cols}")
        rows = []
        for i in range(L):
            off, p = self.t(), self.t()
            self.emit(f"{off} = mul i64 %src_stride, {i}")
            self.emit(f"{p} = getelementptr float, ptr %src, i64 {off}")
            rows.append(self.masked_load(p, mask))
        for j, col in enumerate(self._transpose(rows)):
            on, m, off, p = self.t(), self.t(), self.t(), self.t()
            self.emit(f"{on} = icmp slt i64 {j}, %cols")
            self.emit(f"{m} = select i1 {on}, {mt} <{', '.join(['i1 true'] * L)}>, "
                      f"{mt} zeroinitializer")
            self.emit(f"{off} = mul i64 %dst_stride, {j}")
            self.emit(f"{p} = getelementptr float, ptr %dst, i64 {off}")
            self.emit(f"call void @llvm.masked.store.v{L}f32.p0({vt} {col}, ptr align 4 {p}, "
                      f"{mt} {m})")
        self.emit("ret void")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n", self.declarations()
