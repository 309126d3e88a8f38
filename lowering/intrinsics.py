"""The intrinsics lowering tensorizes onto, described as data: the register-blocked GEMM and
convolution micro-kernels and the block-transposing copy, their names, shapes and calling
conventions. Templates and the tensorize primitive choose an intrinsic and emit a
`loop_ir.Call` to its routine by name; each target implements the routines (the CPU target in
`targets/cpu/microkernels.py`, which writes them in LLVM IR for its vector width). Nothing here
depends on a target beyond its vector unit (`lowering.machine.Target`).

The GEMM micro-kernel is the register-blocked outer product

    C[r, j] (+)= sum_k A[r, k] * B[k, j]      r < MR, j < NR = NV vectors of the target

with the MR x NV accumulators held in vector registers for the whole k loop. Its arguments, all
int64 strides counted in elements:
    a, a_rs, a_ks   A[r, k] at a + r*a_rs + k*a_ks (packed A: a_rs = 1, a_ks = MR)
    b, b_ks         B[k, 0:NR] contiguous at b + k*b_ks (packed B: b_ks = NR)
    c, ldc          C[r, 0:NR] at c + r*ldc
    k               reduction length
    m_valid, n_valid  the part of the MR x NR tile that exists (edge tiles); rows past m_valid
                    read row m_valid-1 of A and are not stored; columns past n_valid are masked
    accumulate      1: add into C; 0: overwrite C
    finish, then the fused epilogue's parameters (EPILOGUE_ARGS): on the call that finishes
                    the reduction, clamp(C + bias[row] + residual, lo, hi)
The convolution micro-kernel (`conv_routine`) adds tap loops around the k loop and reads its
rows as output pixels of a convolution input; the transposing copy (`transpose_routine`) moves
a lanes x lanes block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lowering.machine import Target

# the fused epilogue's arguments after `finish`, in order (see tensorize.epilogue_args)
EPILOGUE_ARGS = ("bias", "has_bias", "has_lo", "lo", "has_hi", "hi", "res", "has_res")

GEMM_PREFIX = "aotc_gemm_f32_"
CONV_PREFIX = "aotc_conv_f32_"
_CONV_NAME = re.compile(r"^aotc_conv_f32_(\d+)x(\d+)v(\d+)(n?)$")
TRANSPOSE_PREFIX = "aotc_transpose_f32_v"
_TRANSPOSE_NAME = re.compile(r"^aotc_transpose_f32_v(\d+)$")
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


def gemm_blocks(target: Target, limit: int = 6) -> list[GemmBlock]:
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


def parse_conv_routine(name: str) -> tuple[GemmBlock, bool] | None:
    """The block of a convolution micro-kernel's name, and whether it is the `near` variant."""
    m = _CONV_NAME.match(name)
    if not m:
        return None
    return GemmBlock(int(m.group(1)), int(m.group(2)), int(m.group(3))), bool(m.group(4))


def conv_routine(blk: GemmBlock, near: bool = False) -> str:
    """Name of the convolution micro-kernel with register block `blk` (see _ConvWriter); `near`:
    its callers' tiles read pixels less than a line apart from first to last, so the input
    prefetch covers them from the first and last row alone."""
    return f"{CONV_PREFIX}{blk.mr}x{blk.nv}v{blk.lanes}" + ("n" if near else "")


def parse_transpose_routine(name: str) -> int | None:
    """The vector lanes of a transposing copy's name."""
    m = _TRANSPOSE_NAME.match(name)
    return int(m.group(1)) if m else None


def transpose_routine(lanes: int) -> str:
    """Name of the block-transposing copy for `lanes`-float vectors (see _TransposeWriter)."""
    return f"{TRANSPOSE_PREFIX}{lanes}"
