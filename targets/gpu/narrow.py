"""The 8- and 4-bit floats in the GPU kernels' C: a byte to the float32 it stands for, and
back, the same functions and semantics as the CPU's LLVM IR (targets/cpu/narrow_ir.py, which
documents them: `decode`, ONNX's `cast` with its defaults, and `store`, which keeps an E5M2
infinity), written once in the common subset of OpenCL C and CUDA C (the dialect's macros:
AOTC_FN, AOTC_F32_FROM_BITS, AOTC_F32_TO_BITS). A module holds the functions its kernels call
(`render.RenderedKernel.helpers`), after the prelude, so both dialects share their text.
"""

from __future__ import annotations

from targets.cpu.narrow_ir import E8M0, KINDS, MiniFloat, function_name

_F32_INF = 0x7F800000
_QNAN = "AOTC_F32_FROM_BITS(0x7fc00000u)"
_NEG_QNAN = "AOTC_F32_FROM_BITS(0xffc00000u)"


def _flit(v: float) -> str:
    return f"{v.hex()}f"


def helper_name(op: str, dtype: str) -> str:
    """The C function of narrow_ir's `op` ("decode", "cast", "store") for `dtype`."""
    return function_name(op, dtype)


def helper_source(name: str) -> str:
    """The definition of `helper_name(op, dtype)`."""
    op, dtype = name.removeprefix("aotc_").split("_", 1)
    if dtype == E8M0:
        body = _e8m0_decode() if op == "decode" else _e8m0_cast()
    else:
        kind = KINDS[dtype]
        body = _decode(kind) if op == "decode" else _encode(kind, keep_inf=op == "store")
    head = f"AOTC_FN f32 {name}(u8 b)" if op == "decode" else f"AOTC_FN u8 {name}(f32 x)"
    return head + " {\n" + "".join(f"  {line}\n" for line in body) + "}\n"


def _encode(k: MiniFloat, keep_inf: bool) -> list[str]:
    shift = 23 - k.man  # float32 mantissa bits dropped
    sign_bit = k.exp + k.man
    lines = [
        "const u32 u = AOTC_F32_TO_BITS(x), a = u & 0x7fffffffu, s = u >> 31;",
        # a normal result: rounded to `man` mantissa bits, nearest even, then rebiased
        f"const u32 normal = ((a + ((a >> {shift}) & 1u) + {(1 << (shift - 1)) - 1}u) >> "
        f"{shift}) - {(127 - k.bias) << k.man}u;",
        # a subnormal one: |x| in units of the smallest subnormal, rounded by adding 2^23
        f"const u32 sub = AOTC_F32_TO_BITS(AOTC_F32_FROM_BITS(a) * "
        f"{_flit(2.0 ** (k.bias - 1 + k.man))} + {_flit(2.0 ** 23)}) - 0x4b000000u;",
        f"i32 code = (i32)(a < {(128 - k.bias) << 23}u ? sub : normal);",
        f"if (code > {k.max_code}) code = {k.max_code};  /* past the largest finite */",
    ]
    if keep_inf and k.inf_code is not None:
        lines.append(f"if (a == 0x{_F32_INF:x}u) code = {k.inf_code};")
    if k.fnuz:  # no negative zero; one NaN
        lines.append(f"const u32 sign = code == 0 ? 0u : s << {sign_bit};")
        nan = f"{1 << sign_bit}u"
    else:
        lines.append(f"const u32 sign = s << {sign_bit};")
        nan = (f"(sign ^ {1 << sign_bit}u)" if k.nan_code is None  # E2M1: no NaN
               else f"(sign | {k.nan_code}u)")
    lines.append(f"return (u8)(a > 0x{_F32_INF:x}u ? {nan} : ((u32)code | sign));")
    return lines


def _decode(k: MiniFloat) -> list[str]:
    sign_bit = 1 << (k.exp + k.man)
    lines = [
        f"const u32 w = (u32)b, mag = w & {sign_bit - 1}u;",
        f"f32 v = mag < {1 << k.man}u ? (f32)mag * {_flit(2.0 ** (1 - k.bias - k.man))} : "
        f"AOTC_F32_FROM_BITS((mag + {(127 - k.bias) << k.man}u) << {23 - k.man});",
        f"const int neg = (w & {sign_bit}u) != 0;",
        "if (neg) v = -v;",
    ]
    if k.inf_code is not None:
        lines.append(f"if (mag == {k.inf_code}u) v = AOTC_F32_FROM_BITS(neg ? 0xff800000u : "
                     "0x7f800000u);")
    if k.fnuz:
        lines.append(f"if (w == {sign_bit}u) v = {_NEG_QNAN};")
    elif k.nan_code is not None:
        first = k.nan_code if k.inf_code is None else k.inf_code + 1
        lines.append(f"if (mag >= {first}u) v = neg ? {_NEG_QNAN} : {_QNAN};")
    lines.append("return v;")
    return lines


def _e8m0_decode() -> list[str]:
    return ["const u32 w = (u32)b;",
            "return AOTC_F32_FROM_BITS(w == 255u ? 0x7fc00000u : w == 0u ? 0x00400000u : "
            "w << 23);  /* code 0 is 2^-127, a float32 subnormal */"]


def _e8m0_cast() -> list[str]:
    return [
        "const u32 u = AOTC_F32_TO_BITS(x);",
        "if ((u & 0x7fffffffu) > 0x7f800000u) return (u8)255;",
        "if (!(x > 0.0f)) return (u8)0;",
        # a positive subnormal is scaled into the normal range first (exactly), its exponent
        # lowered back after rounding up
        "const int tiny = u < 0x00800000u;",
        f"const u32 ub = AOTC_F32_TO_BITS(tiny ? x * {_flit(2.0 ** 64)} : x);",
        "i32 code = (i32)(ub >> 23) + ((ub & 0x7fffffu) != 0u ? 1 : 0) - (tiny ? 64 : 0);",
        "code = code < 0 ? 0 : code > 254 ? 254 : code;",
        "return (u8)code;",
    ]
