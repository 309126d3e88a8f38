"""Micro-kernels: target routines that tensorized loop nests call (loop_ir.Call).

The one family so far is the register-blocked outer-product GEMM kernel

    C[r, j] (+)= sum_k A[r, k] * B[k, j]      r < MR, j < NR = NV vectors of the target

with the MR x NV accumulators held in vector registers for the whole k loop: per k it loads NV
vectors of one B row and broadcasts MR elements of A into fused multiply-adds. It is written in
LLVM IR with explicit vector types, so the same text serves AVX-512 (16 lanes), AVX2 (8) and
NEON (4); the block shape is chosen per target from its register count (`gemm_blocks`).

Arguments, all int64 strides counted in elements:
    a, a_rs, a_ks   A[r, k] at a + r*a_rs + k*a_ks (packed A: a_rs = 1, a_ks = MR)
    b, b_ks         B[k, 0:NR] contiguous at b + k*b_ks (packed B: b_ks = NR)
    c, ldc          C[r, 0:NR] at c + r*ldc
    k               reduction length
    m_valid, n_valid  the part of the MR x NR tile that exists (edge tiles); rows past m_valid
                    read row m_valid-1 of A and are not stored; columns past n_valid are masked
    accumulate      1: add into C; 0: overwrite C
The routines are `internal alwaysinline`: at a call site whose strides are constants, LLVM folds
the address arithmetic into the loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from targets.cpu.target import CpuTarget

GEMM_PREFIX = "aotc_gemm_f32_"
# How many k steps ahead the micro-kernel prefetches B rows.
PREFETCH_ROWS = 8
_GEMM_NAME = re.compile(r"^aotc_gemm_f32_(\d+)x(\d+)v(\d+)$")


@dataclass(frozen=True)
class GemmBlock:
    """A register block: MR rows x NV vectors of `lanes` floats."""

    mr: int
    nv: int
    lanes: int

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def routine(self) -> str:
        return f"{GEMM_PREFIX}{self.mr}x{self.nv}v{self.lanes}"

    @property
    def intensity(self) -> float:
        """Fused multiply-adds per value loaded from cache in one k step."""
        return self.mr * self.nv / (self.mr + self.nv)


def gemm_blocks(target: CpuTarget, limit: int = 6) -> list[GemmBlock]:
    """Register blocks that fit the target's vector registers, best arithmetic intensity first.

    The accumulators take MR*NV registers, one B row NV more, and the broadcast A element one
    (LLVM broadcasts it once into a register for the NV FMAs that use it; NEON loads A into a
    register as well).
    """
    lanes = target.vector_lanes_f32
    regs = target.vector_registers
    spare = 1
    out = []
    for nv in range(1, 7):  # per width, the tallest block that fits
        mr = min(16, (regs - nv - spare) // nv)
        if mr >= 1:
            out.append(GemmBlock(mr, nv, lanes))
    out.sort(key=lambda b: (-round(b.intensity, 3), -b.nr))
    return out[:limit]


def parse_gemm_routine(name: str) -> GemmBlock | None:
    m = _GEMM_NAME.match(name)
    if not m:
        return None
    return GemmBlock(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def routine_ir(name: str, target: CpuTarget) -> tuple[str, list[str]]:
    """LLVM IR text defining routine `name`, and the declarations it needs."""
    blk = parse_gemm_routine(name)
    if blk is None:
        raise KeyError(f"no micro-kernel named {name}")
    if blk.lanes != target.vector_lanes_f32:
        raise KeyError(f"{name} is for {blk.lanes}-lane vectors; {target.name} has "
                       f"{target.vector_lanes_f32}")
    return _GemmWriter(blk).text()


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

    def text(self) -> tuple[str, list[str]]:
        b, vt, mt = self.b, self.vt, self.mt
        L = b.lanes
        sfx = f"v{L}f32"
        decls = [
            f"declare {vt} @llvm.fma.{sfx}({vt}, {vt}, {vt})",
            f"declare {vt} @llvm.masked.load.{sfx}.p0(ptr, {mt}, {vt})",
            f"declare void @llvm.masked.store.{sfx}.p0({vt}, ptr, {mt})",
            "declare i64 @llvm.smin.i64(i64, i64)",
            "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
        ]
        head = (f"define internal void @{b.routine}(ptr %a, i64 %a_rs, i64 %a_ks, ptr %b, "
                "i64 %b_ks, ptr %c, i64 %ldc, i64 %k, i64 %m_valid, i64 %n_valid, "
                "i64 %accumulate) alwaysinline nounwind")
        self.label("entry")
        self.emit(f"%pf_off = mul i64 %b_ks, {PREFETCH_ROWS}")
        last = self.t()
        self.emit(f"{last} = sub i64 %m_valid, 1")
        # row pointers (rows past m_valid alias the last valid row)
        arow, crow = [], []
        for r in range(b.mr):
            rr = self.t()
            self.emit(f"{rr} = call i64 @llvm.smin.i64(i64 {r}, i64 {last})")
            ao, co = self.t(), self.t()
            self.emit(f"{ao} = mul i64 {rr}, %a_rs")
            self.emit(f"{co} = mul i64 {rr}, %ldc")
            ap, cp = self.t(), self.t()
            self.emit(f"{ap} = getelementptr float, ptr %a, i64 {ao}")
            self.emit(f"{cp} = getelementptr float, ptr %c, i64 {co}")
            arow.append(ap)
            crow.append(cp)
        self.arow = arow
        # column masks
        nvs = self.t()
        self.emit(f"{nvs}.i = insertelement <{L} x i64> poison, i64 %n_valid, i64 0")
        self.emit(f"{nvs} = shufflevector <{L} x i64> {nvs}.i, <{L} x i64> poison, "
                  f"<{L} x i32> zeroinitializer")
        masks = []
        for v in range(b.nv):
            idx = "<" + ", ".join(f"i64 {v * L + i}" for i in range(L)) + ">"
            m = self.t()
            self.emit(f"{m} = icmp ult <{L} x i64> {idx}, {nvs}")
            masks.append(m)
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
        for r in range(b.mr):
            rv = self.t()
            self.emit(f"{rv} = icmp slt i64 {r}, %m_valid")
            for v in range(b.nv):
                m = self.t()
                self.emit(f"{m} = select i1 {rv}, {mt} {masks[v]}, {mt} zeroinitializer")
                self.emit(f"call void @llvm.masked.store.{sfx}.p0({vt} {res[r][v]}, ptr align 4 "
                          f"{cptr[r][v]}, {mt} {m})")
        self.emit("ret void")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n", decls

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
        L = b.lanes
        sfx = f"v{L}f32"
        head, body, exit_ = f"{tag}.head", f"{tag}.body", f"{tag}.exit"
        kk, knext = f"%{tag}.k", f"%{tag}.knext"
        acc = [[f"%{tag}.acc{r}_{v}" for v in range(b.nv)] for r in range(b.mr)]
        new = [[""] * b.nv for _ in range(b.mr)]
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
                q2 = self.t()
                self.emit(f"{q2} = getelementptr float, ptr {q}, i64 %pf_off")
                self.emit(f"call void @llvm.prefetch.p0(ptr {q2}, i32 0, i32 3, i32 1)")
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
        for r in range(b.mr):
            p = self.t()
            self.emit(f"{p} = getelementptr float, ptr {self.arow[r]}, i64 {aoff}")
            x = self.t()
            self.emit(f"{x} = load float, ptr {p}, align 4")
            s0, s = self.t(), self.t()
            self.emit(f"{s0} = insertelement {vt} poison, float {x}, i64 0")
            self.emit(f"{s} = shufflevector {vt} {s0}, {vt} poison, <{L} x i32> zeroinitializer")
            for v in range(b.nv):
                name = f"%{tag}.new{r}_{v}"
                self.emit(f"{name} = call {vt} @llvm.fma.{sfx}({vt} {s}, {vt} {bvec[v]}, "
                          f"{vt} {acc[r][v]})")
                new[r][v] = name
        self.emit(f"{knext} = add nsw i64 {kk}, 1")
        self.emit(f"br label %{head}")
        self.label(exit_)
        self.emit("br label %store")
        return acc
