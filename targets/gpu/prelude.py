"""What a GPU module's source starts with, per dialect (OpenCL C, CUDA C): the only text in
which the two renderings of a kernel differ (targets/gpu/render.py writes the bodies once).

Macros and typedefs for the address spaces, the entry-point keyword, thread indices, type
names and bit casts; helpers written once in the common subset (floor division, float16 and
bfloat16 words); float4 for register tiles; and, only for the instructions a module calls,
the routines of matrix instructions (`mma_source`) and integer dot products (`dot_source`),
each the real instruction where the dialect has it and the described computation elsewhere.
"""

from __future__ import annotations

from typing import NamedTuple

from lowering.intrinsics import (
    GPU_INT_DOTS,
    MMA_INSTRUCTIONS,
    MMA_PREFIX,
    GpuIntDot,
    MmaInstruction,
    mma_roundings,
)

DIALECTS = ("opencl", "cuda")

_TYPEDEFS = {
    "opencl": ("typedef long i64; typedef ulong u64; typedef int i32; typedef uint u32;\n"
               "typedef short i16; typedef ushort u16; typedef char i8; typedef uchar u8;\n"
               "typedef float f32;\n"),
    "cuda": ("typedef long long i64; typedef unsigned long long u64; typedef int i32;\n"
             "typedef unsigned int u32; typedef short i16; typedef unsigned short u16;\n"
             "typedef signed char i8; typedef unsigned char u8; typedef float f32;\n"),
}
_MACROS = {
    "opencl": ("#define AOTC_KERNEL __kernel void\n"
               "#define AOTC_GLOBAL __global\n"
               "#define AOTC_FN static inline\n"
               "#define AOTC_LOCAL __local\n"
               "#define AOTC_BARRIER barrier(CLK_LOCAL_MEM_FENCE)\n"
               "#define AOTC_BLOCK_ID ((i64)get_group_id(0))\n"
               "#define AOTC_THREAD_ID ((i64)get_local_id(0))\n"
               "#define AOTC_F32_FROM_BITS(u) as_float((u32)(u))\n"
               "#define AOTC_F32_TO_BITS(x) as_uint(x)\n"
               "#define AOTC_F64_FROM_BITS(u) as_double((u64)(u))\n"),
    "cuda": ("#define AOTC_KERNEL extern \"C\" __global__ void\n"
             "#define AOTC_GLOBAL\n"
             "#define AOTC_FN static __device__ __forceinline__\n"
             "#define AOTC_LOCAL __shared__\n"
             "#define AOTC_BARRIER __syncthreads()\n"
             "#define AOTC_BLOCK_ID ((i64)blockIdx.x)\n"
             "#define AOTC_THREAD_ID ((i64)threadIdx.x)\n"
             "#define AOTC_F32_FROM_BITS(u) __uint_as_float((u32)(u))\n"
             "#define AOTC_F32_TO_BITS(x) __float_as_uint(x)\n"
             "#define AOTC_F64_FROM_BITS(u) __longlong_as_double((long long)(u))\n"),
}

# Helpers written once in the common subset (after the dialect's macros).
_HELPERS = """\
/* floor division and modulo of signed integers (Python's, which index arithmetic needs) */
#define AOTC_FLOOR_DIVMOD(T) \\
AOTC_FN T aotc_floordiv_##T(T a, T b) { T q = a / b; return (a % b != 0 && ((a % b < 0) != (b < 0))) ? q - 1 : q; } \\
AOTC_FN T aotc_mod_##T(T a, T b) { T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
AOTC_FLOOR_DIVMOD(i64)
AOTC_FLOOR_DIVMOD(i32)
AOTC_FLOOR_DIVMOD(i16)
AOTC_FLOOR_DIVMOD(i8)
/* float16 and bfloat16 words <-> float32, rounded to nearest even (NaN stays NaN) */
AOTC_FN f32 aotc_f16_to_f32(u16 h) {
  u32 sign = ((u32)h & 0x8000u) << 16, e = ((u32)h >> 10) & 0x1fu, m = (u32)h & 0x3ffu;
  if (e == 0x1fu) return AOTC_F32_FROM_BITS(sign | 0x7f800000u | (m << 13));
  if (e == 0) { f32 v = (f32)m * 5.9604644775390625e-8f; return sign ? -v : v; }
  return AOTC_F32_FROM_BITS(sign | ((e + 112u) << 23) | (m << 13));
}
AOTC_FN u16 aotc_f32_to_f16(f32 x) {
  u32 b = AOTC_F32_TO_BITS(x), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (u16)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (u16)(sign | 0x7c00u);          /* rounds past 65504 */
  if (a < 0x38800000u) {                                        /* a subnormal half */
    u32 m = (a & 0x7fffffu) | 0x800000u, sh = 126u - (a >> 23);
    if (sh > 24u) return (u16)sign;
    u32 q = m >> sh, rest = m & ((1u << sh) - 1u), mid = 1u << (sh - 1u);
    q += (rest > mid || (rest == mid && (q & 1u))) ? 1u : 0u;
    return (u16)(sign | q);
  }
  u32 r = a - 0x38000000u;                                      /* rebias 127 -> 15 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (u16)(sign | (r >> 13));
}
AOTC_FN f32 aotc_bf16_to_f32(u16 h) { return AOTC_F32_FROM_BITS((u32)h << 16); }
AOTC_FN u16 aotc_f32_to_bf16(f32 x) {
  u32 b = AOTC_F32_TO_BITS(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
  return (u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
"""


# float4 register tiles (`_StageWriter.accumulate_vector`): OpenCL's float4 with its
# arithmetic and vload4/vstore4 (no alignment beyond a float's); CUDA's float4 has no
# arithmetic, so the prelude defines it, and loads and stores element by element, since a
# float4 access needs 16-byte alignment that a tile's first column does not have
_VECTORS = {
    "opencl": ("typedef float4 f32x4;\n"
               "#define AOTC_F32X4(x) ((f32x4)(x))\n"
               "#define aotc_vload4(p) vload4(0, p)\n"
               "#define aotc_vstore4(v, p) vstore4(v, 0, p)\n"),
    "cuda": ("typedef float4 f32x4;\n"
             "#define AOTC_F32X4(x) make_float4(x, x, x, x)\n"
             "AOTC_FN f32x4 operator+(f32x4 a, f32x4 b) "
             "{ return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }\n"
             "AOTC_FN f32x4 operator-(f32x4 a, f32x4 b) "
             "{ return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w); }\n"
             "AOTC_FN f32x4 operator*(f32x4 a, f32x4 b) "
             "{ return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }\n"
             "AOTC_FN f32x4 aotc_vload4(const f32* p) "
             "{ return make_float4(p[0], p[1], p[2], p[3]); }\n"
             "AOTC_FN void aotc_vstore4(f32x4 v, f32* p) "
             "{ p[0] = v.x; p[1] = v.y; p[2] = v.z; p[3] = v.w; }\n"),
}


def prelude(dialect: str, uses_f64: bool = False, mma: tuple[str, ...] = (),
            dots: tuple[str, ...] = ()) -> str:
    """What a module's source starts with in `dialect`: the only text that differs between
    the two renderings. `mma`: the matrix instructions the module calls (`mma_source`);
    `dots`: the integer dot products (`dot_source`)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown GPU dialect {dialect}; known: {DIALECTS}")
    head = "/* generated by aotc */\n"
    if dialect == "opencl" and uses_f64:
        head += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    if dialect == "cuda" and mma:
        head += "#include <mma.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
    f64 = "typedef double f64;\n"
    instrs = [MMA_INSTRUCTIONS[name] for name in sorted(mma)]
    roundings = mma_roundings(mma)
    return (head + _MACROS[dialect] + _TYPEDEFS[dialect] + f64 + _VECTORS[dialect] + _HELPERS
            + ("".join(_ROUNDING[r].opencl_source for r in roundings) if dialect == "opencl"
               else "")
            + "".join(mma_source(i, dialect) for i in instrs)
            + "".join(dot_source(GPU_INT_DOTS[name], dialect) for name in sorted(dots)))


def dot_source(instr: GpuIntDot, dialect: str) -> str:
    """The dot product's function `i32 aotc_NAME(u32 a, u32 b)` (`GpuIntDot`) in `dialect`.
    OpenCL: the Arm extension's built-in where the device compiler defines its macro (a Mali
    that has it), else a portable function of the same value (4 products summed), in one
    source: so PoCL, which lacks the extension, runs the fallback of exactly the text a Mali
    compiles to the instruction. CUDA: `__dp4a` (sm_61+), the same description's second
    implementation."""
    fn, signed = instr.routine, instr.element == "int8"
    if dialect == "cuda":
        if signed:
            return f"AOTC_FN i32 {fn}(u32 a, u32 b) {{ return {instr.cuda}((int)a, (int)b, 0); }}\n"
        return f"AOTC_FN i32 {fn}(u32 a, u32 b) {{ return (i32){instr.cuda}(a, b, 0u); }}\n"
    vec, lane = ("char4", "i8") if signed else ("uchar4", "u8")
    terms = " + ".join(f"(i32)({lane})(u8)(a >> {8 * j}) * (i32)({lane})(u8)(b >> {8 * j})"
                       for j in range(instr.group))
    ext = instr.opencl_extension
    return (f"#ifdef {ext}\n#pragma OPENCL EXTENSION {ext} : enable\n"
            f"AOTC_FN i32 {fn}(u32 a, u32 b) {{ return (i32){instr.opencl}(as_{vec}(a), "
            f"as_{vec}(b)); }}\n"
            f"#else\n/* the same value without the extension: {instr.group} products summed */\n"
            f"AOTC_FN i32 {fn}(u32 a, u32 b) {{ return {terms}; }}\n#endif\n")


_TO_F32 = {"float16": "aotc_f16_to_f32", "bfloat16": "aotc_bf16_to_f32"}
# what a routine's operand pointers point at: the 16-bit words of halves, or float32
_WORD = {"float16": "u16", "bfloat16": "u16", "float32": "f32"}


class _Rounding(NamedTuple):
    """An instruction's rounding of float32 operands (`MmaInstruction.rounds_to`): OpenCL's
    function (its source written once, before the routines) and CUDA's, which the routine
    applies to each fragment element after the load."""

    opencl: str
    opencl_source: str
    cuda: str


_ROUNDING = {"tf32": _Rounding("aotc_f32_to_tf32", """\
/* float32 -> tf32 (float32's exponent, 10 mantissa bits), to nearest with ties away from
   zero, as CUDA's wmma::__float_to_tf32 (PTX cvt.rna.tf32.f32); infinities and NaN kept */
AOTC_FN f32 aotc_f32_to_tf32(f32 x) {
  u32 b = AOTC_F32_TO_BITS(x);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;
  return AOTC_F32_FROM_BITS((b + 0x1000u) & 0xffffe000u);
}
""", "nvcuda::wmma::__float_to_tf32")}


def mma_source(instr: MmaInstruction, dialect: str) -> str:
    """The instruction's type and routines (`MmaInstruction`) in `dialect`. CUDA: the real
    instruction through nvcuda::wmma (fragments of the described shape and layouts; the
    compiler owns the lane-to-element mapping, so no hand-written fragment layout can be
    wrong). OpenCL: the description's loops, lane `l` holding elements l, l + lanes, ... of
    the row-major m x n accumulator; the same calls, so the kernel around the instruction
    (tiling, staging, barriers, edges, epilogue) runs for real on any OpenCL device. An
    instruction that rounds its float32 operands (`rounds_to`, tf32) does so in both: CUDA
    converts each loaded fragment element (`__float_to_tf32`), OpenCL's loops round A's and
    B's values before the products with the same function of the bits."""
    name, m, n, k = instr.name, instr.m, instr.n, instr.k
    acc, fn = f"{MMA_PREFIX}{name}_acc", f"{MMA_PREFIX}{name}"
    word = _WORD[instr.operand]
    rnd = _ROUNDING[instr.rounds_to] if instr.rounds_to is not None else None
    if dialect == "cuda":
        w = "nvcuda::wmma::"
        frag = f"{w}fragment<{w}matrix_{{}}, {m}, {n}, {k}, {instr.cuda}, {w}{{}}_major>"
        lay, mem = instr.layouts, instr.cuda_memory or instr.cuda
        rounding = "" if rnd is None else "".join(
            f"  for (int t = 0; t < f{x}.num_elements; ++t) f{x}.x[t] = {rnd.cuda}(f{x}.x[t]);\n"
            for x in "ab")
        return (
            f"typedef {w}fragment<{w}accumulator, {m}, {n}, {k}, float> {acc};\n"
            f"AOTC_FN void {fn}_fill({acc}* c, i64 lane) "
            f"{{ (void)lane; {w}fill_fragment(*c, 0.0f); }}\n"
            f"AOTC_FN void {fn}_mma({acc}* c, const {word}* a, i64 lda, const {word}* b, "
            "i64 ldb, i64 lane) {\n"
            f"  (void)lane; {frag.format('a', lay[0])} fa; {frag.format('b', lay[1])} fb;\n"
            f"  {w}load_matrix_sync(fa, (const {mem}*)a, (unsigned)lda);\n"
            f"  {w}load_matrix_sync(fb, (const {mem}*)b, (unsigned)ldb);\n"
            + rounding +
            f"  {w}mma_sync(*c, fa, fb, *c);\n}}\n"
            f"AOTC_FN void {fn}_store(f32* out, i64 ldc, const {acc}* c, i64 lane) "
            f"{{ (void)lane; {w}store_matrix_sync(out, *c, (unsigned)ldc, {w}mem_row_major); }}\n")
    per, lanes = instr.per_lane, instr.lanes
    conv = rnd.opencl if rnd is not None else _TO_F32.get(instr.operand, "")
    a_ix = "i * lda + kk" if instr.layouts[0] == "row" else "kk * lda + i"
    b_ix = "kk * ldb + j" if instr.layouts[1] == "row" else "j * ldb + kk"
    each = (f"  for (int e = 0; e < {per}; ++e) {{\n"
            f"    const i64 x = lane + {lanes} * e, i = x / {n}, j = x % {n};\n")
    return (
        f"typedef struct {{ f32 v[{per}]; }} {acc};\n"
        f"AOTC_FN void {fn}_fill({acc}* c, i64 lane) "
        f"{{ (void)lane; for (int e = 0; e < {per}; ++e) c->v[e] = 0.0f; }}\n"
        f"/* C[i, j] += A[i, kk] * B[kk, j], i < {m}, j < {n}, kk < {k}: this lane's elements */\n"
        f"AOTC_FN void {fn}_mma({acc}* c, __local const {word}* a, i64 lda, "
        f"__local const {word}* b, i64 ldb, i64 lane) {{\n" + each +
        "    f32 s = c->v[e];\n"
        f"    for (i64 kk = 0; kk < {k}; ++kk) s += {conv}(a[{a_ix}]) * {conv}(b[{b_ix}]);\n"
        "    c->v[e] = s;\n  }\n}\n"
        f"AOTC_FN void {fn}_store(__local f32* out, i64 ldc, const {acc}* c, i64 lane) {{\n"
        + each + "    out[i * ldc + j] = c->v[e];\n  }\n}\n")
