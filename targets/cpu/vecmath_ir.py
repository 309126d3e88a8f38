"""Straight-line LLVM IR for the vector math functions: one builder, every value an SSA
temporary, float or double arithmetic, integer bit operations and the few intrinsics that are
one instruction on every target (see vecmath.py for why nothing else)."""

from __future__ import annotations

import math
import struct


def flit(v: float) -> str:
    """LLVM literal of ``v`` rounded to float (LLVM writes float constants as double hex)."""
    f = struct.unpack("<f", struct.pack("<f", v))[0]
    return f"0x{struct.unpack('<Q', struct.pack('<d', f))[0]:016X}"


def dlit(v: float) -> str:
    return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


INF = math.inf
NAN = "0x7FF8000000000000"  # quiet NaN (float or double)


class Fn:
    """Straight-line IR builder for one function body (all values are SSA temporaries)."""

    def __init__(self, scale_instruction: bool = False) -> None:
        self.lines: list[str] = []
        self.n = 0
        self.scale_instruction = scale_instruction  # see math_ir

    def emit(self, rhs: str) -> str:
        self.n += 1
        name = f"%t{self.n}"
        self.lines.append(f"  {name} = {rhs}")
        return name

    # -- floating point (t is "float" or "double") ------------------------------------------
    @staticmethod
    def c(v: float, t: str = "float") -> str:
        return flit(v) if t == "float" else dlit(v)

    def fadd(self, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"fadd {t} {a}, {b}")

    def fsub(self, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"fsub {t} {a}, {b}")

    def fmul(self, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"fmul {t} {a}, {b}")

    def fdiv(self, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"fdiv {t} {a}, {b}")

    def fneg(self, a: str, t: str = "float") -> str:
        return self.emit(f"fneg {t} {a}")

    def fma(self, a: str, b: str, c: str, t: str = "float") -> str:
        """a*b + c, fused where the target has FMA (results never depend on it)."""
        s = "f32" if t == "float" else "f64"
        return self.emit(f"call {t} @llvm.fmuladd.{s}({t} {a}, {t} {b}, {t} {c})")

    def fabs(self, a: str, t: str = "float") -> str:
        s = "f32" if t == "float" else "f64"
        return self.emit(f"call {t} @llvm.fabs.{s}({t} {a})")

    def copysign(self, mag: str, sgn: str, t: str = "float") -> str:
        s = "f32" if t == "float" else "f64"
        return self.emit(f"call {t} @llvm.copysign.{s}({t} {mag}, {t} {sgn})")

    def sqrt(self, a: str, t: str = "float") -> str:
        """Correctly rounded square root (one instruction on every target: sqrtss/sqrtpd, fsqrt)."""
        s = "f32" if t == "float" else "f64"
        return self.emit(f"call {t} @llvm.sqrt.{s}({t} {a})")

    def fcmp(self, pred: str, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"fcmp {pred} {t} {a}, {b}")

    def select(self, cond: str, a: str, b: str, t: str = "float") -> str:
        return self.emit(f"select i1 {cond}, {t} {a}, {t} {b}")

    def clamp(self, x: str, lo: float, hi: float | None, t: str = "float") -> str:
        """Clamp to [lo, hi] (hi None: from below only); NaN passes through (ordered compares
        are false for NaN)."""
        x = self.select(self.fcmp("olt", x, self.c(lo, t), t), self.c(lo, t), x, t)
        if hi is None:
            return x
        return self.select(self.fcmp("ogt", x, self.c(hi, t), t), self.c(hi, t), x, t)

    def horner(self, x: str, coeffs: list[float], t: str = "float") -> str:
        """coeffs[0]*x^(k) + ... + coeffs[k], by Horner's rule."""
        acc = self.c(coeffs[0], t)
        for cf in coeffs[1:]:
            acc = self.fma(acc, x, self.c(cf, t), t)
        return acc

    def call(self, fn: str, t: str, *args: str) -> str:
        argl = ", ".join(f"{t} {a}" for a in args)
        return self.emit(f"call {t} @{fn}({argl})")

    # -- integers and casts ------------------------------------------------------------------
    def iop(self, op: str, a: str, b: str, t: str = "i32") -> str:
        return self.emit(f"{op} {t} {a}, {b}")

    def bitcast(self, v: str, src: str, dst: str) -> str:
        return self.emit(f"bitcast {src} {v} to {dst}")

    def cast(self, op: str, v: str, src: str, dst: str) -> str:
        return self.emit(f"{op} {src} {v} to {dst}")

    def band(self, a: str, b: str) -> str:
        return self.emit(f"and i1 {a}, {b}")

    def bor(self, a: str, b: str) -> str:
        return self.emit(f"or i1 {a}, {b}")
