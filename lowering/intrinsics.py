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
                    the reduction, clamp(C + bias + residual, lo, hi), the bias per row
                    (has_bias 1: a convolution's output channels) or per column (has_bias 2:
                    a linear layer's output features, bias[j] at bias + j)
The convolution micro-kernel (`conv_routine`) adds tap loops around the k loop and reads its
rows as output pixels of a convolution input; the transposing copy (`transpose_routine`) moves
a lanes x lanes block.

The integer GEMM micro-kernel (`IntGemmBlock.routine`) is the same outer product on an integer
dot instruction (`IntDot`): both operands are packed in int32 words of `group` k values,

    C[r, j] = sum_kg dot(rows[kg][r], cols[kg][j])     r < MR, j < NR

with rows[kg] one word per row (broadcast) and cols[kg] NR contiguous words; arguments
(rows, cols, c, kg): c receives the whole MR x NR int32 tile, row-major.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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
    def name(self) -> str:
        """The block as schedules and machine files name it: "6x4" (MR x NV)."""
        return f"{self.mr}x{self.nv}"

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


# Integer dot-product instructions ------------------------------------------------------------
INT_GEMM_PREFIX = "aotc_qgemm_"
_INT_GEMM_NAME = re.compile(r"^aotc_qgemm_([a-z0-9]+)_(\d+)x(\d+)(_xb)?$")


@dataclass(frozen=True)
class IntDot:
    """An integer dot-product instruction as the integer GEMM template sees it: each of its
    `lanes` int32 accumulators gains the sum of `group` products of its two operands'
    elements (operand types `types`, the first the one activations take), with no
    intermediate rounding or saturation. The template packs both operands in words of `group`
    consecutive k values (one int32 lane each) and picks the first instruction of
    `Target.int_dots` whose operand types hold the values; the target implements it by name.

    vnni512/vnni256: AVX-512 VNNI / AVX-VNNI `vpdpbusd` (u8 x s8, 4 per lane);
    pmaddwd512/pmaddwd256: `vpmaddwd` (s16 x s16, 2 per lane) plus an add, exact on any
    AVX-512BW / AVX2 core; sdot: AArch64 dot-product `sdot` (s8 x s8, 4 per lane);
    smull: AArch64 widening multiply-accumulate of s16 pairs, plain NEON."""

    name: str
    lanes: int
    group: int
    types: tuple[str, str]

    @property
    def element(self) -> str:
        """The activations' packed element type."""
        return self.types[0]

    @property
    def weight(self) -> str:
        return self.types[1]


INT_DOTS: dict[str, IntDot] = {d.name: d for d in (
    IntDot("vnni512", 16, 4, ("uint8", "int8")),
    IntDot("vnni256", 8, 4, ("uint8", "int8")),
    IntDot("pmaddwd512", 16, 2, ("int16", "int16")),
    IntDot("pmaddwd256", 8, 2, ("int16", "int16")),
    IntDot("sdot", 4, 4, ("int8", "int8")),
    IntDot("smull", 4, 2, ("int16", "int16")),
)}


@dataclass(frozen=True)
class IntGemmBlock:
    """A register block of the integer GEMM micro-kernel: MR broadcast rows x NV vectors of
    the instruction's lanes. `rows_are_activations`: the broadcast operand is the activations
    (a MatMul's rows) rather than the weights (a convolution's output channels); it decides
    which instruction operand each side feeds."""

    dot: IntDot
    mr: int
    nv: int
    rows_are_activations: bool = False

    @property
    def nr(self) -> int:
        return self.nv * self.dot.lanes

    @property
    def name(self) -> str:
        """The block as schedules name it: "4x2" (MR x NV)."""
        return f"{self.mr}x{self.nv}"

    @property
    def routine(self) -> str:
        return f"{INT_GEMM_PREFIX}{self.dot.name}_{self.mr}x{self.nv}" + \
            ("_xb" if self.rows_are_activations else "")


def int_gemm_blocks(target: Target, dot: IntDot, rows_are_activations: bool
                    ) -> list[IntGemmBlock]:
    """Register blocks of `dot` that fit the target's vector registers (MR*NV accumulators,
    NV column vectors, one broadcast row), most multiply-adds per loaded vector first."""
    regs = target.vector_registers
    out = []
    for nv in range(1, 5):
        mr = min(12, (regs - nv - 1) // nv)
        if mr >= 1:
            out.append(IntGemmBlock(dot, mr, nv, rows_are_activations))
    out.sort(key=lambda b: (-round(b.mr * b.nv / (b.mr + b.nv), 3), -b.nr))
    return out


def parse_int_gemm_routine(name: str) -> IntGemmBlock | None:
    m = _INT_GEMM_NAME.match(name)
    if not m or m.group(1) not in INT_DOTS:
        return None
    return IntGemmBlock(INT_DOTS[m.group(1)], int(m.group(2)), int(m.group(3)),
                        bool(m.group(4)))


# Matrix instructions of GPUs (tensor cores) ---------------------------------------------------
MMA_PREFIX = "aotc_mma_"
MMA_OPS = ("fill", "mma", "store")


@dataclass(frozen=True)
class MmaInstruction:
    """A warp-level matrix multiply-accumulate instruction, described by what it computes:

        C[i, j] += A[i, kk] * B[kk, j]      i < m, j < n, kk < k

    with A (m x k) and B (k x n) of the element type `operand` read from local memory in the
    layouts `layouts` (A's, B's: "row" = row-major, leading dimension a multiple of 8
    elements), products exact and summed into a float32 accumulator `C` that the `lanes`
    threads of a warp hold together (each lane m * n / lanes elements, opaque to the code
    around it). `loops` is that description as data: the matcher (`tensorize.match_mma`)
    maps a reduction's axes onto these loops; the GPU renderer writes the instruction per
    dialect: CUDA's real one (`cuda`: nvcuda::wmma with these fragment shapes, from
    sm_`min_sm`), OpenCL's as the loops themselves, each lane computing its elements.

    A target implements three routines per instruction (`routine(op)`), called by every
    lane of a warp with the same arguments:
        fill(acc, lane)                       C = 0
        mma(acc, a, lda, b, ldb, lane)        C += A @ B, A at a (row stride lda), B at b
        store(c, ldc, acc, lane)              c[i * ldc + j] = C[i, j] (float32, local memory)
    `rounds_to`: the narrower type the instruction rounds its operands to before the (then
    exact) products, None where they are exact already: "tf32" keeps float32's exponent and
    the top 10 of its 23 mantissa bits, rounded to nearest with ties away from zero (CUDA's
    `wmma::__float_to_tf32`, PTX `cvt.rna.tf32.f32`, which the CUDA routine applies to every
    fragment element after its load; OpenCL's loops round both operands the same way).
    `opt_in`: such rounding changes a float32 model's results, so only a user's request
    (`aotc optimize --allow-tf32`, `GpuTarget.allow_tf32`) lets the matcher use it.
    `peak_share`: the instruction's dense rate as a fraction of the machine's `mma_flops`
    (16-bit operands); tf32 runs at half of it on A100 and H100."""

    name: str
    m: int
    n: int
    k: int
    operand: str
    cuda: str  # the element type CUDA's fragments take
    min_sm: int
    accumulator: str = "float32"
    layouts: tuple[str, str] = ("row", "row")
    lanes: int = 32
    opt_in: bool = False
    rounds_to: str | None = None
    cuda_memory: str | None = None  # what CUDA's loads read, where not `cuda` (tf32: float)
    peak_share: float = 1.0

    @property
    def loops(self) -> tuple[tuple[str, int, str], ...]:
        """The instruction's loops (name, extent, spatial or reduce), outermost first."""
        return (("i", self.m, "spatial"), ("j", self.n, "spatial"), ("kk", self.k, "reduce"))

    @property
    def operand_axes(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """The loops each operand is indexed by (A's, B's), in index order for its layout."""
        a = ("i", "kk") if self.layouts[0] == "row" else ("kk", "i")
        b = ("kk", "j") if self.layouts[1] == "row" else ("j", "kk")
        return a, b

    @property
    def per_lane(self) -> int:
        """Accumulator elements each lane holds."""
        return self.m * self.n // self.lanes

    def routine(self, op: str) -> str:
        assert op in MMA_OPS
        return f"{MMA_PREFIX}{self.name}_{op}"


MMA_INSTRUCTIONS: dict[str, MmaInstruction] = {i.name: i for i in (
    MmaInstruction("wmma_f16_16x16x16", 16, 16, 16, "float16", "__half", 70),
    MmaInstruction("wmma_bf16_16x16x16", 16, 16, 16, "bfloat16", "__nv_bfloat16", 80),
    MmaInstruction("wmma_tf32_16x16x8", 16, 16, 8, "float32", "nvcuda::wmma::precision::tf32",
                   80, opt_in=True, rounds_to="tf32", cuda_memory="float", peak_share=0.5),
)}


def mma_roundings(names: Iterable[str]) -> tuple[str, ...]:
    """The types the named matrix instructions round their float32 operands to (`rounds_to`,
    e.g. "tf32"), sorted, each once; names of no known instruction (a bundle's manifest from
    another version) are passed over."""
    return tuple(sorted({r for n in names if n in MMA_INSTRUCTIONS
                         for r in (MMA_INSTRUCTIONS[n].rounds_to,) if r is not None}))


def parse_mma_routine(name: str) -> tuple[MmaInstruction, str] | None:
    """The instruction and operation ("fill", "mma", "store") of an MMA routine's name."""
    if not name.startswith(MMA_PREFIX):
        return None
    base, _, op = name[len(MMA_PREFIX):].rpartition("_")
    if base not in MMA_INSTRUCTIONS or op not in MMA_OPS:
        return None
    return MMA_INSTRUCTIONS[base], op


# Integer dot products of GPUs ------------------------------------------------------------------
@dataclass(frozen=True)
class GpuIntDot:
    """A GPU's 4-way integer dot product, described by what it computes:

        d = sum_{j < group} a_j * b_j        a_j, b_j of `types`, sign- or zero-extended

    with a and b packed in one 32-bit word each (value j in bits 8j..8j+7) and d an int32,
    exact (no saturation). `tensorize.match_int_dot` maps an integer product reduction onto
    it (the reduce axis split by `group`, operands packed into words, zero points moved into
    corrections), and the loop IR says it as the te op `name` (`te.Binary.DOT`). The GPU
    renderer writes it per dialect: OpenCL through the Arm extension `opencl_extension`'s
    built-in `opencl` (`arm_dot`; `arm_dot_acc` of the accumulate extension is the same
    product plus an add, which the compiler fuses) when the device defines the extension's
    macro, else a portable function of the same value, in the same source; CUDA through
    `cuda` (`__dp4a`, from sm_`min_sm`)."""

    name: str
    types: tuple[str, str]
    group: int = 4
    accumulator: str = "int32"
    opencl: str = "arm_dot"
    opencl_extension: str = "cl_arm_integer_dot_product_int8"
    cuda: str = "__dp4a"
    min_sm: int = 61

    @property
    def element(self) -> str:
        """The operands' element type (both the same: arm_dot has no mixed form)."""
        return self.types[0]

    @property
    def routine(self) -> str:
        """The function the GPU prelude defines for it."""
        return f"aotc_{self.name}"


GPU_INT_DOTS: dict[str, GpuIntDot] = {d.name: d for d in (
    GpuIntDot("dot4_s8", ("int8", "int8")),
    GpuIntDot("dot4_u8", ("uint8", "uint8")),
)}
