"""The CPU target's integer GEMM micro-kernels (`lowering/intrinsics.py`: `IntDot`,
`IntGemmBlock`), written in LLVM IR.

Per k group the kernel loads NV vectors of column words and broadcasts one row word per row;
each of the MR x NV int32 accumulators gains the instruction's dot of the two (no rounding, no
saturation). The tile is stored whole (the caller's scratch, MR x NR int32 row-major); the
requantizing epilogue runs in loop IR after it. Which operand of a u8 x s8 instruction a side
feeds follows `rows_are_activations`: the activations always take the unsigned one.
"""

from __future__ import annotations

from lowering.intrinsics import IntGemmBlock

# the LLVM intrinsic (and its declaration) behind each instruction
_X86_DOTS = {
    "vnni512": ("llvm.x86.avx512.vpdpbusd.512", 16),
    "vnni256": ("llvm.x86.avx512.vpdpbusd.256", 8),
}
_X86_PAIRS = {
    "pmaddwd512": ("llvm.x86.avx512.pmaddw.d.512", 16),
    "pmaddwd256": ("llvm.x86.avx2.pmadd.wd", 8),
}


class IntGemmWriter:
    def __init__(self, blk: IntGemmBlock) -> None:
        self.b = blk
        self.L = blk.dot.lanes
        self.vt = f"<{self.L} x i32>"
        self.lines: list[str] = []
        self.n = 0
        self.decls: list[str] = []

    def t(self) -> str:
        self.n += 1
        return f"%v{self.n}"

    def emit(self, s: str) -> None:
        self.lines.append("  " + s)

    def _cast(self, x: str, to: str) -> str:
        y = self.t()
        self.emit(f"{y} = bitcast {self.vt} {x} to {to}")
        return y

    def dot(self, acc: str, col: str, row: str) -> str:
        """acc + the instruction's dot of a column vector and a broadcast row word."""
        name, vt, L = self.b.dot.name, self.vt, self.L
        # the activations feed the unsigned operand of a u8 x s8 instruction
        act, wgt = (row, col) if self.b.rows_are_activations else (col, row)
        out = self.t()
        if name in _X86_DOTS:
            fn = _X86_DOTS[name][0]
            self.emit(f"{out} = call {vt} @{fn}({vt} {acc}, {vt} {act}, {vt} {wgt})")
            self.decls.append(f"declare {vt} @{fn}({vt}, {vt}, {vt})")
        elif name in _X86_PAIRS:
            fn = _X86_PAIRS[name][0]
            ht = f"<{2 * L} x i16>"
            a, b = self._cast(act, ht), self._cast(wgt, ht)
            p = self.t()
            self.emit(f"{p} = call {vt} @{fn}({ht} {a}, {ht} {b})")
            self.emit(f"{out} = add {vt} {acc}, {p}")
            self.decls.append(f"declare {vt} @{fn}({ht}, {ht})")
        elif name == "sdot":
            bt = f"<{4 * L} x i8>"
            a, b = self._cast(act, bt), self._cast(wgt, bt)
            fn = f"llvm.aarch64.neon.sdot.v{L}i32.v{4 * L}i8"
            self.emit(f"{out} = call {vt} @{fn}({vt} {acc}, {bt} {a}, {bt} {b})")
            self.decls.append(f"declare {vt} @{fn}({vt}, {bt}, {bt})")
        elif name == "smull":
            # s16 pairs widened and multiplied, the even and odd products added (LLVM selects
            # the widening multiply-accumulate and pairwise add)
            ht, wt = f"<{2 * L} x i16>", f"<{2 * L} x i32>"
            a, b = self._cast(act, ht), self._cast(wgt, ht)
            aw, bw, p = self.t(), self.t(), self.t()
            self.emit(f"{aw} = sext {ht} {a} to {wt}")
            self.emit(f"{bw} = sext {ht} {b} to {wt}")
            self.emit(f"{p} = mul {wt} {aw}, {bw}")
            even = ", ".join(f"i32 {2 * i}" for i in range(L))
            odd = ", ".join(f"i32 {2 * i + 1}" for i in range(L))
            e, o, s = self.t(), self.t(), self.t()
            self.emit(f"{e} = shufflevector {wt} {p}, {wt} poison, <{L} x i32> <{even}>")
            self.emit(f"{o} = shufflevector {wt} {p}, {wt} poison, <{L} x i32> <{odd}>")
            self.emit(f"{s} = add {vt} {e}, {o}")
            self.emit(f"{out} = add {vt} {acc}, {s}")
        else:
            raise KeyError(f"no integer dot instruction {name}")
        return out

    def text(self) -> tuple[str, list[str]]:
        b, vt, L = self.b, self.vt, self.L
        head = (f"define internal void @{b.routine}(ptr %rows, ptr %cols, ptr %c, i64 %kg) "
                "alwaysinline nounwind")
        self.lines.append("entry:")
        self.emit("br label %loop")
        self.lines.append("loop:")
        self.emit("%k = phi i64 [ 0, %entry ], [ %k.next, %loop ]")
        acc = [[f"%acc.{r}.{v}" for v in range(b.nv)] for r in range(b.mr)]
        new = [[""] * b.nv for _ in range(b.mr)]
        phi_at = len(self.lines)
        cbase, rbase = self.t(), self.t()
        self.emit(f"{cbase} = mul i64 %k, {b.nr}")
        self.emit(f"{rbase} = mul i64 %k, {b.mr}")
        cols = []
        for v in range(b.nv):
            off, p, x = self.t(), self.t(), self.t()
            self.emit(f"{off} = add i64 {cbase}, {v * L}")
            self.emit(f"{p} = getelementptr i32, ptr %cols, i64 {off}")
            self.emit(f"{x} = load {vt}, ptr {p}, align 4")
            cols.append(x)
        for r in range(b.mr):
            off, p, w, s0, s = self.t(), self.t(), self.t(), self.t(), self.t()
            self.emit(f"{off} = add i64 {rbase}, {r}")
            self.emit(f"{p} = getelementptr i32, ptr %rows, i64 {off}")
            self.emit(f"{w} = load i32, ptr {p}, align 4")
            self.emit(f"{s0} = insertelement {vt} poison, i32 {w}, i64 0")
            self.emit(f"{s} = shufflevector {vt} {s0}, {vt} poison, <{L} x i32> zeroinitializer")
            for v in range(b.nv):
                new[r][v] = self.dot(acc[r][v], cols[v], s)
        phis = [f"  {acc[r][v]} = phi {vt} [ zeroinitializer, %entry ], [ {new[r][v]}, %loop ]"
                for r in range(b.mr) for v in range(b.nv)]
        self.lines[phi_at:phi_at] = phis
        self.emit("%k.next = add i64 %k, 1")
        self.emit("%done = icmp eq i64 %k.next, %kg")
        self.emit("br i1 %done, label %exit, label %loop")
        self.lines.append("exit:")
        for r in range(b.mr):
            for v in range(b.nv):
                p = self.t()
                self.emit(f"{p} = getelementptr i32, ptr %c, i64 {r * b.nr + v * L}")
                self.emit(f"store {vt} {new[r][v]}, ptr {p}, align 4")
        self.emit("ret void")
        return head + " {\n" + "\n".join(self.lines) + "\n}\n", sorted(set(self.decls))
