"""Accuracy, special values and vectorization of targets/cpu/vecmath.py.

Each function is called from a loop marked for vectorization, compiled at O3 for the host CPU and
run by MCJIT on ~1e6 inputs spread over the whole float range plus the special values; results are
compared with float64 numpy (``math.erf`` for erf) in float32 ulps.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Callable
from functools import cache

import llvmlite.binding as llvm
import numpy as np
import pytest

from targets.cpu.codegen import optimized_module
from targets.cpu.target import NAMED_TARGETS, host_target, target_machine
from targets.cpu.vecmath import MATH_FUNCTIONS, math_ir

F32 = np.float32
INF = math.inf
FLT_MAX = float(np.finfo(F32).max)
FLT_TINY = float(np.finfo(F32).tiny)  # 2^-126
DENORM_MIN = 2.0**-149

_LOOP1 = """
define void @apply(ptr noalias %in, ptr noalias %out, i64 %n) {
entry:
  %c = icmp sgt i64 %n, 0
  br i1 %c, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %p = getelementptr inbounds float, ptr %in, i64 %i
  %v = load float, ptr %p, align 4
  %r = call float @FN(float %v)
  %q = getelementptr inbounds float, ptr %out, i64 %i
  store float %r, ptr %q, align 4
  %i1 = add nuw nsw i64 %i, 1
  %d = icmp eq i64 %i1, %n
  br i1 %d, label %exit, label %loop, !llvm.loop !0
exit:
  ret void
}
"""

_LOOP2 = """
define void @apply(ptr noalias %a, ptr noalias %b, ptr noalias %out, i64 %n) {
entry:
  %c = icmp sgt i64 %n, 0
  br i1 %c, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %pa = getelementptr inbounds float, ptr %a, i64 %i
  %va = load float, ptr %pa, align 4
  %pb = getelementptr inbounds float, ptr %b, i64 %i
  %vb = load float, ptr %pb, align 4
  %r = call float @FN(float %va, float %vb)
  %q = getelementptr inbounds float, ptr %out, i64 %i
  store float %r, ptr %q, align 4
  %i1 = add nuw nsw i64 %i, 1
  %d = icmp eq i64 %i1, %n
  br i1 %d, label %exit, label %loop, !llvm.loop !0
exit:
  ret void
}
"""

_LOOP_MD = """
!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.vectorize.enable", i1 true}
"""


class Compiled:
    """One O3-compiled `apply` loop around a vecmath function, callable on numpy arrays."""

    def __init__(self, name: str, cpu: str = "", features: str | None = None) -> None:
        _init_llvm()
        arity = 2 if name == "pow" else 1
        loop = (_LOOP2 if arity == 2 else _LOOP1).replace("FN", MATH_FUNCTIONS[name])
        # as the code generator emits it for this CPU (the host) or for the one named
        self.scale_instruction = not cpu and features is None and \
            host_target().scales_by_instruction
        src = math_ir([name], self.scale_instruction) + loop + _LOOP_MD
        mod = llvm.parse_assembly(src)
        mod.verify()
        target = llvm.Target.from_default_triple()
        self.tm = target.create_target_machine(
            cpu=cpu or llvm.get_host_cpu_name(),
            features=llvm.get_host_cpu_features().flatten() if features is None else features,
            opt=3,
        )
        mod.triple = self.tm.triple
        mod.data_layout = str(self.tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pb = llvm.create_pass_builder(self.tm, pto)
        pb.getModulePassManager().run(mod, pb)
        self.optimized_ir = str(mod)
        self.engine = llvm.create_mcjit_compiler(mod, self.tm)
        self.engine.finalize_object()
        addr = self.engine.get_function_address("apply")
        argt = [ctypes.c_void_p] * (arity + 1) + [ctypes.c_int64]
        self.fn = ctypes.CFUNCTYPE(None, *argt)(addr)
        self.arity = arity

    def __call__(self, *xs: np.ndarray) -> np.ndarray:
        assert len(xs) == self.arity
        arrs = [np.ascontiguousarray(x, dtype=F32) for x in xs]
        arrs = list(np.broadcast_arrays(*arrs))
        arrs = [np.ascontiguousarray(a) for a in arrs]
        out = np.empty_like(arrs[0])
        self.fn(*[a.ctypes.data for a in arrs], out.ctypes.data, out.size)
        return out


_llvm_ready = False


def _init_llvm() -> None:
    global _llvm_ready
    if not _llvm_ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _llvm_ready = True


@cache
def compiled(name: str, cpu: str = "", features: str | None = None) -> Compiled:
    return Compiled(name, cpu, features)


# ------------------------------------------------------------------------------------------
# inputs and error measures
# ------------------------------------------------------------------------------------------
def spread(lo: float, hi: float, n: int, seed: int = 0) -> np.ndarray:
    """Float32 values over [lo, hi]: log-spaced magnitudes of both signs (down to denormals
    where the range includes 0), plus uniform ones."""
    rng = np.random.default_rng(seed)
    parts = [rng.uniform(lo, hi, n // 2)]
    for sign, bound in ((1.0, hi), (-1.0, -lo)):
        if bound > 0:
            e_hi = math.log2(bound)
            e_lo = max(-149.0, e_hi - 200.0)
            parts.append(sign * np.exp2(rng.uniform(e_lo, e_hi, n // 4)))
    x = np.concatenate(parts).astype(F32)
    return x[(x >= F32(lo)) & (x <= F32(hi))]


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 ulp at ref (ref in float64); 0 where both are the
    same infinity or NaN, inf where only one is."""
    got64 = got.astype(np.float64)
    with np.errstate(over="ignore"):
        ref32 = ref.astype(F32)  # rounds; overflow -> inf
    ulp = np.spacing(np.maximum(np.abs(ref32), F32(DENORM_MIN)).astype(F32)).astype(np.float64)
    ulp = np.maximum(ulp, DENORM_MIN)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got64 - ref) / ulp
    nonfinite = ~np.isfinite(ref32.astype(np.float64)) | ~np.isfinite(got64)
    same = (got64 == ref32.astype(np.float64)) | (np.isnan(got64) & np.isnan(ref))
    err = np.where(nonfinite, np.where(same, 0.0, np.inf), err)
    return err


def rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Max relative error over results in the normal float range."""
    m = np.isfinite(ref) & (np.abs(ref) >= FLT_TINY) & (np.abs(ref) <= FLT_MAX)
    return float(np.max(np.abs(got[m].astype(np.float64) - ref[m]) / np.abs(ref[m])))


def check(
    name: str,
    x: np.ndarray,
    ref: Callable[[np.ndarray], np.ndarray],
    max_ulp: float,
    max_abs: float | None = None,
) -> tuple[float, float]:
    got = compiled(name)(x)
    with np.errstate(all="ignore"):
        r = ref(x.astype(np.float64))
    err = ulp_error(got, r)
    worst = int(np.argmax(err))
    msg = f"{name}({x[worst]!r}) = {got[worst]!r}, want {r[worst]!r}: {err[worst]:.2f} ulp"
    if max_abs is None:
        assert err[worst] <= max_ulp, msg
    else:
        finite = np.isfinite(r)
        assert np.all(np.isfinite(got[finite])), msg
        aerr = np.abs(got[finite].astype(np.float64) - r[finite])
        assert float(aerr.max()) <= max_abs, msg
        assert np.all(err[~finite] == 0), msg
    return float(err[worst]), rel_error(got, r)


def specials(name: str, cases: list[tuple[float, float]]) -> None:
    x = np.array([c[0] for c in cases], dtype=F32)
    want = np.array([c[1] for c in cases], dtype=F32)
    got = compiled(name)(x)
    for xi, g, w in zip(x, got, want, strict=True):
        if math.isnan(w):
            assert math.isnan(g), f"{name}({xi}) = {g}, want nan"
        else:
            assert g == w and math.copysign(1, g) == math.copysign(1, w), (
                f"{name}({xi}) = {g!r}, want {w!r}"
            )


NAN = math.nan
_erf_np = np.frompyfunc(math.erf, 1, 1)


def erf64(x: np.ndarray) -> np.ndarray:
    return _erf_np(x).astype(np.float64)


def softplus64(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def sigmoid64(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


# ------------------------------------------------------------------------------------------
# vectorization
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MATH_FUNCTIONS))
def test_vectorizes_without_calls(name: str) -> None:
    ir = compiled(name).optimized_ir
    body = ir[ir.index("define void @apply") :]
    body = body[: body.index("\n}\n")]
    # (the width is LLVM's choice per host: 8 or 16 lanes for most functions, 4 for the
    # inverse and hyperbolic ones and pow under AVX2's cost model)
    lanes = {int(n) for n in re.findall(r"<(\d+) x float>", body)}
    assert lanes and max(lanes) >= 4, "loop was not vectorized"
    calls = re.findall(r"call [^@]*@([\w.$]+)", body)
    assert all(c.startswith("llvm.") for c in calls), f"calls left in the loop: {calls}"
    assert not re.search(r"declare [^@]*@(?!llvm\.)", ir), "external declarations"


def test_math_ir_dependencies_and_errors() -> None:
    text = math_ir(["softplus", "tanh", "exp"])
    for fn in ("aotc_softplusf", "aotc_tanhf", "aotc_expf", "aotc_logf", "aotc_log1pf"):
        assert text.count(f"define internal float @{fn}(") == 1
    for bad in ("nnan", "ninf", "fast", "declare"):
        assert bad not in math_ir(MATH_FUNCTIONS)
    with pytest.raises(KeyError):
        math_ir(["cbrt"])
    # appending to a module that declares the same intrinsics itself still parses
    _init_llvm()
    mod = llvm.parse_assembly(
        "declare float @llvm.fmuladd.f32(float, float, float)\n"
        "declare float @llvm.fabs.f32(float)\n" + math_ir(MATH_FUNCTIONS)
    )
    mod.verify()


# ------------------------------------------------------------------------------------------
# exp
# ------------------------------------------------------------------------------------------
def test_exp_accuracy() -> None:
    x = np.concatenate(
        [
            spread(-110.0, 95.0, 1_000_000),
            np.linspace(-104, -86, 20001, dtype=F32),
            np.linspace(88.5, 89, 2001, dtype=F32),
        ]
    )
    check("exp", x, np.exp, max_ulp=1.5)


def test_exp_specials() -> None:
    specials(
        "exp",
        [
            (0.0, 1.0),
            (-0.0, 1.0),
            (INF, INF),
            (-INF, 0.0),
            (NAN, NAN),
            (88.72283, 3.4027985e38),
            (88.7229, INF),
            (100.0, INF),
            (FLT_MAX, INF),
            (-FLT_MAX, 0.0),
            (-3.4e38, 0.0),
            (-104.0, 0.0),
            (-1e30, 0.0),
            (1e-30, 1.0),
            (-87.33654, 1.1754997e-38),
            (-103.27893, DENORM_MIN),
        ],
    )


def test_exp_attention_mask() -> None:
    """exp(x - max) for masked scores (-inf and -3.4e38) is exactly 0, never NaN."""
    scores = np.array([-INF, -3.4e38, -FLT_MAX, -1e30, 1.5, 0.25], dtype=F32)
    mx = F32(1.5)
    with np.errstate(over="ignore"):
        d = scores - mx
    got = compiled("exp")(d)
    assert not np.isnan(got).any()
    assert list(got[:4]) == [0.0, 0.0, 0.0, 0.0]
    assert got[4] == 1.0


@pytest.mark.parametrize("target,scaled", [("cpu-avx512", True), ("cpu-avx2", False),
                                            ("aarch64", False)])
def test_exp_scales_by_one_instruction_where_there_is_one(target: str, scaled: bool) -> None:
    """On AVX-512, exp scales p by 2^n with llvm.ldexp, which becomes vscalefps (one rounding,
    denormals and overflow included); elsewhere ldexp would be a libm call, so exp builds
    the two factors 2^n1 * 2^n2 from the exponent bits instead."""
    t = NAMED_TARGETS[target]
    assert t.scales_by_instruction is scaled
    tm = target_machine(t)
    src = (f'target datalayout = "{tm.target_data}"\ntarget triple = "{t.triple}"\n'
           + math_ir(["exp"], t.scales_by_instruction) + _LOOP1.replace("FN", "aotc_expf")
           + _LOOP_MD)
    asm = tm.emit_assembly(optimized_module(src, t))
    assert ("vscalefps" in asm) is scaled
    assert "ldexp" not in asm.replace("llvm.ldexp", "")  # no libm call either way


def test_exp_scaled_and_built_factors_agree() -> None:
    """Where the host has the scale instruction, both forms of exp give the same floats over
    the whole range (the accuracy and special-value tests above run the host's form)."""
    if not host_target().scales_by_instruction:
        pytest.skip("the host has no vscalefps: the tests above ran the built factors")
    x = np.concatenate([spread(-110.0, 95.0, 400_000, seed=3),
                        np.linspace(-104, -86, 20001, dtype=F32),
                        np.array([0.0, -0.0, INF, -INF, NAN, 88.7229, -103.27893], F32)])
    scaled = compiled("exp")
    built = Compiled("exp", llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())
    assert scaled.scale_instruction and not built.scale_instruction
    np.testing.assert_array_equal(scaled(x), built(x))


@pytest.mark.parametrize("built", [False, True])
def test_exp_of_nonpositive_arguments_equals_exp(built: bool) -> None:
    """Sigmoid's and softplus's e^-|x| and erf's e^-x² (`exp_nonpositive`: one lower clamp,
    one exponent built) gives exp's floats bit for bit on every argument it takes: x <= 0, -0, -inf and
    NaN, denormal results included; with the host's scaling and with built factors."""
    x = np.concatenate([-np.abs(spread(-110.0, 110.0, 400_000, seed=5)),
                        np.linspace(-104, -86, 20001, dtype=F32),
                        np.array([0.0, -0.0, -INF, NAN, -FLT_MAX, -103.27893, -87.33654], F32)])
    host = (llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()) if built else ()
    fast, ref = Compiled("exp_nonpositive", *host), Compiled("exp", *host)
    assert fast.scale_instruction == ref.scale_instruction
    np.testing.assert_array_equal(fast(x), ref(x))


# ------------------------------------------------------------------------------------------
# log, log1p
# ------------------------------------------------------------------------------------------
def test_log_accuracy() -> None:
    x = np.concatenate(
        [
            spread(0.0, FLT_MAX, 1_000_000),
            np.linspace(0.5, 2.0, 100001, dtype=F32),
            (1 + np.arange(-2000, 2000) * 2.0**-23).astype(F32),
        ]
    )
    check("log", x, np.log, max_ulp=1.0)


def test_log_specials() -> None:
    specials(
        "log",
        [
            (1.0, 0.0),
            (0.0, -INF),
            (-0.0, -INF),
            (-1.0, NAN),
            (-DENORM_MIN, NAN),
            (-INF, NAN),
            (INF, INF),
            (NAN, NAN),
            (DENORM_MIN, -103.27893),
            (FLT_TINY, -87.33655),
            (FLT_MAX, 88.72284),
            (math.e, 1.0),
        ],
    )


def test_log1p_accuracy() -> None:
    x = np.concatenate([spread(-1.0, FLT_MAX, 1_000_000)])
    check("log1p", x, np.log1p, max_ulp=2.0)
    specials(
        "log1p",
        [
            (0.0, 0.0),
            (-0.0, -0.0),
            (-1.0, -INF),
            (-2.0, NAN),
            (INF, INF),
            (NAN, NAN),
            (1e-30, 1e-30),
            (DENORM_MIN, DENORM_MIN),
        ],
    )


# ------------------------------------------------------------------------------------------
# tanh, sigmoid, softplus, erf
# ------------------------------------------------------------------------------------------
def test_tanh_accuracy() -> None:
    x = np.concatenate(
        [spread(-FLT_MAX, FLT_MAX, 1_000_000), np.linspace(-10, 10, 200001, dtype=F32)]
    )
    check("tanh", x, np.tanh, max_ulp=2.0)


def test_tanh_specials() -> None:
    specials(
        "tanh",
        [
            (0.0, 0.0),
            (-0.0, -0.0),
            (INF, 1.0),
            (-INF, -1.0),
            (NAN, NAN),
            (FLT_MAX, 1.0),
            (-FLT_MAX, -1.0),
            (50.0, 1.0),
            (-50.0, -1.0),
            (1e-30, 1e-30),
            (-DENORM_MIN, -DENORM_MIN),
            (1e-4, 1e-4 - 1e-12 / 3),
        ],
    )


def test_sigmoid_accuracy() -> None:
    x = np.concatenate(
        [spread(-FLT_MAX, FLT_MAX, 1_000_000), np.linspace(-110, 30, 200001, dtype=F32)]
    )
    check("sigmoid", x, sigmoid64, max_ulp=2.5)


def test_sigmoid_specials() -> None:
    specials(
        "sigmoid",
        [
            (0.0, 0.5),
            (-INF, 0.0),
            (INF, 1.0),
            (NAN, NAN),
            (FLT_MAX, 1.0),
            (-FLT_MAX, 0.0),
            (-3.4e38, 0.0),
            (100.0, 1.0),
            (-120.0, 0.0),
            (-100.0, 3.8e-44),
        ],
    )


def test_softplus_accuracy() -> None:
    x = np.concatenate(
        [spread(-FLT_MAX, FLT_MAX, 1_000_000), np.linspace(-110, 30, 200001, dtype=F32)]
    )
    check("softplus", x, softplus64, max_ulp=2.5)


def test_softplus_specials() -> None:
    specials(
        "softplus",
        [
            (0.0, math.log(2.0)),
            (-INF, 0.0),
            (INF, INF),
            (NAN, NAN),
            (FLT_MAX, FLT_MAX),
            (-FLT_MAX, 0.0),
            (100.0, 100.0),
            (1e10, 1e10),
            (-100.0, 3.8e-44),
        ],
    )


def test_erf_accuracy() -> None:
    x = np.concatenate([spread(-10.0, 10.0, 600_000), np.linspace(-5, 5, 200001, dtype=F32)])
    check("erf", x, erf64, max_ulp=INF, max_abs=1e-6)
    check("erf", x, erf64, max_ulp=2.0)


def test_erf_specials() -> None:
    specials(
        "erf",
        [
            (0.0, 0.0),
            (-0.0, -0.0),
            (INF, 1.0),
            (-INF, -1.0),
            (NAN, NAN),
            (FLT_MAX, 1.0),
            (-FLT_MAX, -1.0),
            (4.0, 1.0),
            (-10.0, -1.0),
            (1e-30, 1.1283791e-30),
        ],
    )


# ------------------------------------------------------------------------------------------
# pow
# ------------------------------------------------------------------------------------------
def test_pow_accuracy() -> None:
    rng = np.random.default_rng(1)
    n = 1_000_000
    # log-spaced x with y such that x**y spans the float range (and overflows/underflows a bit)
    x = np.exp2(rng.uniform(-149, 128, n)).astype(F32)
    t = rng.uniform(-160, 140, n)
    y = (t / np.log2(x.astype(np.float64))).astype(F32)
    # small integer and simple exponents of negative and positive bases
    xs = spread(-1e4, 1e4, 200_000, seed=2)
    ys = rng.choice(
        np.array([-3, -2, -1, -0.5, 0.5, 1, 2, 3, 4, 5, 0.25, 1.5, 7, -7], F32), xs.size
    )
    xa, ya = np.concatenate([x, xs]), np.concatenate([y, ys])
    got = compiled("pow")(xa, ya)
    with np.errstate(all="ignore"):
        ref = np.power(xa.astype(np.float64), ya.astype(np.float64))
    err = ulp_error(got, ref)
    w = int(np.argmax(err))
    assert err[w] <= 1.0, f"pow({xa[w]!r}, {ya[w]!r}) = {got[w]!r}, want {ref[w]!r}"


def test_pow_specials() -> None:
    vals = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -2.0,
            3.0,
            -3.0,
            2.5,
            -2.5,
            INF,
            -INF,
            NAN,
            2.0**24 + 2,
            2.0**23 + 1,
            -(2.0**23 + 1),
            1e-45,
            FLT_MAX,
            -FLT_MAX,
            1e30,
            -1e30,
        ],
        dtype=F32,
    )
    xa, ya = (a.ravel() for a in np.meshgrid(vals, vals))
    got = compiled("pow")(xa, ya)
    with np.errstate(all="ignore"):
        want = np.power(xa.astype(np.float64), ya.astype(np.float64)).astype(F32)
    bad = [
        (float(a), float(b), float(g), float(w))
        for a, b, g, w in zip(xa, ya, got, want, strict=True)
        if not (
            (np.isnan(g) and np.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w))
        )
    ]
    assert not bad, f"(x, y, got, want): {bad[:10]}"


# ------------------------------------------------------------------------------------------
# inverse trigonometric and hyperbolic functions, sinh and cosh (in double, rounded once)
# ------------------------------------------------------------------------------------------
_INVERSE = {
    "asin": (np.arcsin, -1.0, 1.0),
    "acos": (np.arccos, -1.0, 1.0),
    "atan": (np.arctan, -FLT_MAX, FLT_MAX),
    "asinh": (np.arcsinh, -FLT_MAX, FLT_MAX),
    "acosh": (np.arccosh, 1.0, FLT_MAX),
    "atanh": (np.arctanh, -1.0, 1.0),
    "sinh": (np.sinh, -100.0, 100.0),
    "cosh": (np.cosh, -100.0, 100.0),
}


@pytest.mark.parametrize("name", sorted(_INVERSE))
def test_inverse_accuracy(name: str) -> None:
    ref, lo, hi = _INVERSE[name]
    every_prime = np.arange(0, 2**32, 9973, dtype=np.uint64).astype(np.uint32).view(F32)
    x = np.concatenate([spread(lo, hi, 600_000), np.linspace(max(lo, -4.0), min(hi, 4.0),
                        200_001, dtype=F32), every_prime])  # the last: outside the domain too
    check(name, x, ref, max_ulp=0.51)


_PI = F32(math.pi)
_PI_2 = F32(math.pi / 2)


@pytest.mark.parametrize(("name", "cases"), [
    ("asin", [(0.0, 0.0), (-0.0, -0.0), (1.0, _PI_2), (-1.0, -_PI_2), (1.0000001, NAN),
              (-2.0, NAN), (INF, NAN), (NAN, NAN), (DENORM_MIN, DENORM_MIN)]),
    ("acos", [(1.0, 0.0), (-1.0, _PI), (0.0, _PI_2), (-0.0, _PI_2), (1.0000001, NAN),
              (-1.0000001, NAN), (-INF, NAN), (NAN, NAN)]),
    ("atan", [(0.0, 0.0), (-0.0, -0.0), (INF, _PI_2), (-INF, -_PI_2), (FLT_MAX, _PI_2),
              (1.0, F32(math.pi / 4)), (NAN, NAN), (-DENORM_MIN, -DENORM_MIN)]),
    ("asinh", [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -INF), (NAN, NAN),
               (FLT_MAX, F32(math.asinh(FLT_MAX))), (DENORM_MIN, DENORM_MIN)]),
    ("acosh", [(1.0, 0.0), (0.99999994, NAN), (-1.0, NAN), (-INF, NAN), (INF, INF), (NAN, NAN),
               (FLT_MAX, F32(math.acosh(FLT_MAX)))]),
    ("atanh", [(0.0, 0.0), (-0.0, -0.0), (1.0, INF), (-1.0, -INF), (1.0000001, NAN),
               (-INF, NAN), (NAN, NAN), (DENORM_MIN, DENORM_MIN)]),
    ("sinh", [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -INF), (NAN, NAN), (89.0, F32(math.sinh(89.0))),
              (89.5, INF), (-89.5, -INF), (DENORM_MIN, DENORM_MIN), (1.0, F32(math.sinh(1.0)))]),
    ("cosh", [(0.0, 1.0), (-0.0, 1.0), (INF, INF), (-INF, INF), (NAN, NAN), (89.5, INF),
              (-89.0, F32(math.cosh(89.0))), (DENORM_MIN, 1.0), (1.0, F32(math.cosh(1.0)))]),
])
def test_inverse_specials(name: str, cases: list[tuple[float, float]]) -> None:
    specials(name, cases)


# ------------------------------------------------------------------------------------------
# a target without FMA or SSE4.1 (baseline x86-64): still vectorized, no libm calls, accurate
# ------------------------------------------------------------------------------------------
_BASELINE_REFS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "exp_nonpositive": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "tanh": np.tanh,
    "sigmoid": sigmoid64,
    "softplus": softplus64,
    "erf": erf64,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
}

# the functions' domains (log1p from -1, log from 0, the inverse ones where they are finite)
_BASELINE_RANGES = {"exp_nonpositive": (-100.0, 0.0), "log1p": (-1.0, 100.0),
                    "log": (0.0, 100.0), "asin": (-1.0, 1.0), "acos": (-1.0, 1.0),
                    "acosh": (1.0, 100.0), "atanh": (-1.0, 1.0)}


@pytest.mark.parametrize("name", sorted(MATH_FUNCTIONS))
def test_baseline_x86_64_without_fma(name: str) -> None:
    c = compiled(name, "x86-64", "")
    body = c.optimized_ir[c.optimized_ir.index("define void @apply") :]
    assert "<4 x float>" in body
    assert all(f.startswith("llvm.") for f in re.findall(r"call [^@]*@([\w.$]+)", body))
    rng = np.random.default_rng(3)
    if name == "pow":
        x = np.exp2(rng.uniform(-40, 40, 100_000)).astype(F32)
        y = rng.uniform(-3, 3, x.size).astype(F32)
        got = c(x, y)
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
    else:
        lo, hi = _BASELINE_RANGES.get(name, (-100.0, 100.0))
        x = spread(lo, hi, 200_000, seed=4)
        got = c(x)
        with np.errstate(all="ignore"):
            ref = _BASELINE_REFS[name](x.astype(np.float64))
    assert float(np.max(ulp_error(got, ref))) <= 2.5
