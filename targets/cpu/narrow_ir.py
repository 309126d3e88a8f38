"""The 8- and 4-bit floats in LLVM IR: a byte to the float32 it stands for, and back.

Registers hold such a value as a float32 (te.NARROW_FLOAT_DTYPES); memory holds one byte per
element, ml_dtypes' encoding. Each kind has three functions, `define internal ... alwaysinline`
and straight-line (integer bit operations, `select`, one float multiply and add), so the loop
vectorizer widens them after inlining (as vecmath's, no rounding intrinsics: those are libm
calls on x86 without SSE4.1):

- `decode`: the byte's value, exact. NaN codes decode to a quiet NaN with the code's sign (the
  FNUZ kinds' one NaN, 0x80, to a negative one), as onnxruntime and ml_dtypes give.
- `cast`: ONNX's Cast to the kind with its defaults (saturate=1, E8M0's round_mode "up"): round
  to nearest even; beyond the largest finite value, infinities included, the largest finite
  value of the sign; NaN to the kind's NaN (E4M3FN/E5M2 keep its sign; E5M2's is 0x7F as
  onnxruntime writes it, ml_dtypes writes 0x7E); FNUZ kinds have no -0.
  E2M1 has no NaN: a NaN becomes a zero of the opposite sign (ml_dtypes', hence ONNX's
  reference and its node tests'; ONNX's float4 page says 6). E8M0 (no sign, no zero) takes the
  power of two at or above |x| as onnxruntime does: NaN -> 0xFF, x <= 0 -> 2^-127 (code 0), +inf
  and overflow -> 2^127.
- `store`: what a store of a register value writes: `cast`, except that an infinity stays one
  in E5M2 (the one kind with infinities; a value in an E5M2 register is inf only when the
  conversion that made it, Cast with saturate=0, said so).
Other saturate/round_mode settings are te expressions around `cast` (lowering/convert.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from targets.cpu.vecmath_ir import flit

_ATTRS = "alwaysinline nounwind willreturn memory(none)"
_F32_INF = 0x7F800000
_QNAN = 0x7FC00000
_NEG_QNAN = 0xFFC00000


@dataclass(frozen=True)
class MiniFloat:
    """A sign, `exp` exponent bits (bias `bias`, no infinity/NaN exponent reserved unless said)
    and `man` mantissa bits; magnitudes are codes 0..`max_code` (largest finite)."""

    exp: int
    man: int
    bias: int
    max_code: int
    fnuz: bool = False  # no -0; the code 0x80 is the one NaN
    inf_code: int | None = None  # magnitude code of infinity (E5M2)
    nan_code: int | None = None  # magnitude code of NaN (or'ed with the sign), FN kinds


KINDS: dict[str, MiniFloat] = {
    "float8_e4m3fn": MiniFloat(4, 3, 7, 0x7E, nan_code=0x7F),
    "float8_e4m3fnuz": MiniFloat(4, 3, 8, 0x7F, fnuz=True),
    "float8_e5m2": MiniFloat(5, 2, 15, 0x7B, inf_code=0x7C, nan_code=0x7F),
    "float8_e5m2fnuz": MiniFloat(5, 2, 16, 0x7F, fnuz=True),
    "float4_e2m1fn": MiniFloat(2, 1, 1, 0x7),
}
E8M0 = "float8_e8m0fnu"


def function_name(op: str, dtype: str) -> str:
    """`op` is "decode", "cast" or "store"; the name of the IR function for `dtype`."""
    if op == "store" and not (dtype in KINDS and KINDS[dtype].inf_code is not None):
        op = "cast"  # the same function where no infinity is representable
    return f"aotc_{op}_{dtype}"


def function_ir(name: str) -> str:
    """The definition of `function_name(op, dtype)`."""
    op, dtype = name.removeprefix("aotc_").split("_", 1)
    if dtype == E8M0:
        body = _e8m0_decode() if op == "decode" else _e8m0_cast()
    else:
        kind = KINDS[dtype]
        body = _decode(kind) if op == "decode" else _encode(kind, keep_inf=op == "store")
    ret, arg = ("float", "i8 %b") if op == "decode" else ("i8", "float %x")
    return (f"define internal {ret} @{name}({arg}) {_ATTRS} {{\nentry:\n"
            + "\n".join(f"  {line}" for line in body) + "\n}\n")


class _Lines(list[str]):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __call__(self, rhs: str) -> str:
        self.n += 1
        self.append(f"%v{self.n} = {rhs}")
        return f"%v{self.n}"


def _encode(k: MiniFloat, keep_inf: bool) -> list[str]:
    e = _Lines()
    shift = 23 - k.man  # float32 mantissa bits dropped
    u = e("bitcast float %x to i32")
    a = e(f"and i32 {u}, 2147483647")
    s = e(f"lshr i32 {u}, 31")
    # a normal result: round the float32's bits to `man` mantissa bits, nearest even (the
    # carry may ripple into the exponent, which is right), then rebias the exponent
    odd = e(f"and i32 {e(f'lshr i32 {a}, {shift}')}, 1")
    rounded = e(f"add i32 {a}, {e(f'add i32 {odd}, {(1 << (shift - 1)) - 1}')}")
    normal = e(f"sub i32 {e(f'lshr i32 {rounded}, {shift}')}, {(127 - k.bias) << k.man}")
    # a subnormal result (|x| below the smallest normal): |x| in units of the smallest
    # subnormal, rounded to nearest even by adding 2^23 (the sum's low bits are the integer);
    # a carry into 2^man is the smallest normal's code, which is right too
    scaled = e(f"fmul float {e(f'bitcast i32 {a} to float')}, {flit(2.0 ** (k.bias - 1 + k.man))}")
    shifted = e(f"bitcast float {e(f'fadd float {scaled}, {flit(2.0 ** 23)}')} to i32")
    sub = e(f"sub i32 {shifted}, {0x4B000000}")  # the bits of 2^23
    small = e(f"icmp ult i32 {a}, {(128 - k.bias) << 23}")
    code = e(f"select i1 {small}, i32 {sub}, i32 {normal}")
    big = e(f"icmp sgt i32 {code}, {k.max_code}")  # past the largest finite, or an infinity
    code = e(f"select i1 {big}, i32 {k.max_code}, i32 {code}")
    if keep_inf and k.inf_code is not None:
        code = e(f"select i1 {e(f'icmp eq i32 {a}, {_F32_INF}')}, i32 {k.inf_code}, i32 {code}")
    nan = e(f"icmp ugt i32 {a}, {_F32_INF}")
    sign_bit = k.exp + k.man
    if k.fnuz:  # no negative zero; one NaN
        zero = e(f"icmp eq i32 {code}, 0")
        sign = e(f"select i1 {zero}, i32 0, i32 {e(f'shl i32 {s}, {sign_bit}')}")
        nan_value = str(1 << sign_bit)
    else:
        sign = e(f"shl i32 {s}, {sign_bit}")
        if k.nan_code is None:  # no NaN (E2M1): a zero of the opposite sign, as ml_dtypes
            nan_value = e(f"xor i32 {sign}, {1 << sign_bit}")
        else:
            nan_value = e(f"or i32 {sign}, {k.nan_code}")
    value = e(f"or i32 {code}, {sign}")
    out = e(f"select i1 {nan}, i32 {nan_value}, i32 {value}")
    e.append(f"ret i8 {e(f'trunc i32 {out} to i8')}")
    return e


def _decode(k: MiniFloat) -> list[str]:
    e = _Lines()
    sign_bit = 1 << (k.exp + k.man)
    w = e("zext i8 %b to i32")
    mag = e(f"and i32 {w}, {sign_bit - 1}")
    # normal: exponent and mantissa moved into a float32's fields, the exponent rebiased
    bits = e(f"shl i32 {e(f'add i32 {mag}, {(127 - k.bias) << k.man}')}, {23 - k.man}")
    normal = e(f"bitcast i32 {bits} to float")
    subnormal = e(f"fmul float {e(f'uitofp i32 {mag} to float')}, "
                  f"{flit(2.0 ** (1 - k.bias - k.man))}")
    small = e(f"icmp ult i32 {mag}, {1 << k.man}")
    value = e(f"select i1 {small}, float {subnormal}, float {normal}")
    neg = e(f"icmp ne i32 {e(f'and i32 {w}, {sign_bit}')}, 0")
    value = e(f"select i1 {neg}, float {e(f'fneg float {value}')}, float {value}")
    signed_nan = e(f"select i1 {neg}, i32 {_NEG_QNAN}, i32 {_QNAN}")
    if k.fnuz:
        nan = e(f"icmp eq i32 {w}, {sign_bit}")
        nan_bits = str(_NEG_QNAN)
    elif k.nan_code is not None:
        first_nan = k.nan_code if k.inf_code is None else k.inf_code + 1
        nan = e(f"icmp uge i32 {mag}, {first_nan}")
        nan_bits = signed_nan
    else:
        nan = None
    if k.inf_code is not None:
        inf = e(f"select i1 {neg}, float {flit(-float('inf'))}, float {flit(float('inf'))}")
        is_inf = e(f"icmp eq i32 {mag}, {k.inf_code}")
        value = e(f"select i1 {is_inf}, float {inf}, float {value}")
    if nan is not None:
        value = e(f"select i1 {nan}, float {e(f'bitcast i32 {nan_bits} to float')}, "
                  f"float {value}")
    e.append(f"ret float {value}")
    return e


def _e8m0_decode() -> list[str]:
    e = _Lines()
    w = e("zext i8 %b to i32")
    bits = e(f"select i1 {e(f'icmp eq i32 {w}, 0')}, i32 {0x00400000}, "
             f"i32 {e(f'shl i32 {w}, 23')}")  # code 0 is 2^-127, a float32 subnormal
    bits = e(f"select i1 {e(f'icmp eq i32 {w}, 255')}, i32 {_QNAN}, i32 {bits}")
    e.append(f"ret float {e(f'bitcast i32 {bits} to float')}")
    return e


def _e8m0_cast() -> list[str]:
    e = _Lines()
    u = e("bitcast float %x to i32")
    nan = e(f"icmp ugt i32 {e(f'and i32 {u}, 2147483647')}, {_F32_INF}")
    nonpositive = e("fcmp ole float %x, 0.0")
    # a positive subnormal is scaled into the normal range first (exactly), its exponent
    # lowered back after rounding
    tiny = e(f"icmp ult i32 {u}, {0x00800000}")
    y = e(f"select i1 {tiny}, float {e(f'fmul float %x, {flit(2.0 ** 64)}')}, float %x")
    ub = e(f"bitcast float {y} to i32")
    fraction = e(f"and i32 {ub}, 8388607")
    up = e(f"zext i1 {e(f'icmp ne i32 {fraction}, 0')} to i32")
    code = e(f"add i32 {e(f'lshr i32 {ub}, 23')}, {up}")  # the exponent, rounded up
    code = e(f"sub i32 {code}, {e(f'select i1 {tiny}, i32 64, i32 0')}")
    code = e(f"select i1 {e(f'icmp slt i32 {code}, 0')}, i32 0, i32 {code}")
    code = e(f"select i1 {e(f'icmp sgt i32 {code}, 254')}, i32 254, i32 {code}")  # and +inf
    code = e(f"select i1 {nonpositive}, i32 0, i32 {code}")
    code = e(f"select i1 {nan}, i32 255, i32 {code}")
    e.append(f"ret i8 {e(f'trunc i32 {code} to i8')}")
    return e
