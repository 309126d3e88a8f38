"""The 8-, 4- and 2-bit element types against onnxruntime, bit for bit.

FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0, FLOAT4E2M1, INT4, UINT4,
INT2 and UINT2 are one byte per element in aotc (ml_dtypes' layout) and packed in onnxruntime,
whose Python API has no arrays of them: its side runs on OrtValues made from raw bytes (the
4- and 2-bit ones packed here, low bits first, as ONNX's raw data) and its outputs are read as
bytes. Every comparison is of codes, so NaN codes and signed zeros count.

Where onnxruntime 1.32 has no kernel (Cast to or from FLOAT4E2M1, QuantizeLinear to it) ONNX's
reference evaluator is the reference (ml_dtypes' conversions). Where onnxruntime departs from
the spec's table the reference is used for those inputs and the test says so: Cast with
saturate=0 keeps 448 for E4M3FN inputs in [480, 496) (the spec: NaN) and gives NaN for E5M2
inputs in [61440, 65536) (the spec: ±inf).
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import ml_dtypes  # noqa: F401 (numpy's names for the narrow types)
import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, str(Path(__file__).parent))
from program_runner import compile_onnx, run_program  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402

RNG = np.random.default_rng(11)
FLOAT8 = {"float8_e4m3fn": TP.FLOAT8E4M3FN, "float8_e4m3fnuz": TP.FLOAT8E4M3FNUZ,
          "float8_e5m2": TP.FLOAT8E5M2, "float8_e5m2fnuz": TP.FLOAT8E5M2FNUZ}
E8M0, FLOAT4 = "float8_e8m0fnu", "float4_e2m1fn"
SUBBYTE = {"int4": (TP.INT4, 4), "uint4": (TP.UINT4, 4), "int2": (TP.INT2, 2),
           "uint2": (TP.UINT2, 2), FLOAT4: (TP.FLOAT4E2M1, 4)}
ONNX_TYPE = {**FLOAT8, E8M0: TP.FLOAT8E8M0, **{k: v[0] for k, v in SUBBYTE.items()},
             "float32": TP.FLOAT, "float64": TP.DOUBLE, "float16": TP.FLOAT16,
             "int8": TP.INT8, "uint8": TP.UINT8, "int32": TP.INT32, "int64": TP.INT64,
             "bool": TP.BOOL, "uint16": TP.UINT16, "uint64": TP.UINT64,
             "bfloat16": TP.BFLOAT16}
NP_OF = {v: k for k, v in ONNX_TYPE.items()}


# --- running a model on both sides -------------------------------------------------------------

def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    per = 8 // bits
    flat = codes.ravel().astype(np.uint8) & ((1 << bits) - 1)
    flat = np.concatenate([flat, np.zeros(-len(flat) % per, np.uint8)])
    out = np.zeros(len(flat) // per, np.uint8)
    for k in range(per):
        out |= flat[k::per] << (k * bits)
    return out


def _unpack(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    per = 8 // bits
    out = np.stack([(raw >> (k * bits)) & ((1 << bits) - 1) for k in range(per)], axis=1)
    return out.ravel()[:count].astype(np.uint8)


def _to_ort(a: np.ndarray) -> ort.OrtValue:
    name = a.dtype.name
    if name in SUBBYTE:
        kind, bits = SUBBYTE[name]
        # an OrtValue of the packed bytes' count, then the data type and shape of the tensor
        v = ort.OrtValue.ortvalue_from_shape_and_type(list(a.shape), kind)
        raw = _pack(a.view(np.uint8), bits)
        ctypes.memmove(v.data_ptr(), raw.ctypes.data, raw.nbytes)
        return v
    if name in FLOAT8 or name == E8M0 or name == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.ascontiguousarray(a).view(np.uint8 if a.itemsize == 1 else np.uint16),
            ONNX_TYPE[name])
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(a))


def _from_ort(v: ort.OrtValue, dtype: str) -> np.ndarray:
    shape = tuple(v.shape())
    count = int(np.prod(shape))
    raw = np.frombuffer(ctypes.string_at(v.data_ptr(), v.tensor_size_in_bytes()), np.uint8)
    if dtype in SUBBYTE:
        return _unpack(raw, SUBBYTE[dtype][1], count).view(dtype).reshape(shape)
    return raw.view(dtype).reshape(shape).copy()


def ort_run(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = sess.run_with_ort_values([o.name for o in model.graph.output],
                                    {n: _to_ort(a) for n, a in zip(names, feeds, strict=True)})
    return [_from_ort(v, NP_OF[o.type.tensor_type.elem_type])
            for v, o in zip(outs, model.graph.output, strict=True)]


def ref_run(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, feeds, strict=True)))


def aotc_run(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[np.ndarray]:
    return run_program(compile_onnx(model), feeds)


def one_node(op: str, inputs: list[np.ndarray], out: str, consts: dict[int, np.ndarray]
             | None = None, opset: int = 25, **attrs) -> tuple[onnx.ModelProto, list]:
    """A model of one node; inputs named in `consts` are initializers, the rest graph
    inputs. Returns the model and its feeds."""
    consts = consts or {}
    names = [f"in{i}" for i in range(len(inputs))]
    graph_inputs, inits, feeds = [], [], []
    for i, (n, a) in enumerate(zip(names, inputs, strict=True)):
        if i in consts:
            inits.append(_initializer(n, a))
        else:
            graph_inputs.append(oh.make_tensor_value_info(n, ONNX_TYPE[a.dtype.name], a.shape))
            feeds.append(a)
    shape = inputs[0].shape
    graph = oh.make_graph([oh.make_node(op, names, ["y"], **attrs)], "g", graph_inputs,
                          [oh.make_tensor_value_info("y", ONNX_TYPE[out], shape)], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 11
    return model, feeds


def _initializer(name: str, a: np.ndarray) -> onnx.TensorProto:
    dt = a.dtype.name
    if dt in SUBBYTE:
        kind, bits = SUBBYTE[dt]
        return oh.make_tensor(name, kind, a.shape, _pack(a.view(np.uint8), bits).tobytes(),
                              raw=True)
    if dt in FLOAT8 or dt == E8M0:
        return oh.make_tensor(name, ONNX_TYPE[dt], a.shape, a.view(np.uint8).tobytes(), raw=True)
    return onnx.numpy_helper.from_array(a, name)


def assert_codes(got: np.ndarray, want: np.ndarray, x: np.ndarray | None = None) -> None:
    """Equal dtypes, shapes and bytes; the first differences named with their inputs."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    g, w = got.view(np.uint8).ravel(), want.view(np.uint8).ravel()
    if got.itemsize > 1:
        g, w = got.ravel().view(f"u{got.itemsize}"), want.ravel().view(f"u{got.itemsize}")
    bad = np.nonzero(g != w)[0]
    where = [(x.ravel()[i] if x is not None else i, hex(g[i]), hex(w[i])) for i in bad[:6]]
    assert not len(bad), f"{len(bad)} of {g.size} differ: {where}"


# --- inputs -------------------------------------------------------------------------------------

def edge_floats(kind: str) -> np.ndarray:
    """float32 values at every rounding and saturation edge of `kind`: each of its values and
    the float32 neighbours, every midpoint between neighbours (ties) and its neighbours,
    subnormals, ±0, ±inf, NaNs of both signs, float32 subnormals, values far past the range,
    and random values over many scales."""
    codes = np.arange(16 if kind == FLOAT4 else 256, dtype=np.uint8)
    vals = codes.view(kind).astype(np.float32)
    vals = np.unique(vals[np.isfinite(vals)].astype(np.float64))
    near = vals.astype(np.float32).view(np.uint32).astype(np.int64)
    mids = ((vals[1:] + vals[:-1]) / 2).astype(np.float32).view(np.uint32).astype(np.int64)
    bits = np.concatenate([near + d for d in (-1, 0, 1)] + [mids + d for d in (-1, 0, 1)])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-40,
                        1.1754942e-38, 3.4028235e38, -3.4028235e38, 1e6, -1e6, 65504, 70000,
                        480, 488, 496, 500, 61440, 62000, 65536, 464, 248, 6.5, 7, -7],
                       np.float32)
    scales = np.float32(10.0) ** RNG.integers(-12, 8, 600).astype(np.float32)
    rand = RNG.standard_normal(600).astype(np.float32) * scales
    return np.concatenate([(bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32), special,
                           rand]).astype(np.float32)


def all_codes(kind: str) -> np.ndarray:
    if kind in SUBBYTE:
        return np.arange(1 << SUBBYTE[kind][1], dtype=np.uint8).view(kind)
    return np.arange(256, dtype=np.uint8).view(kind)


# --- Cast to the 8-bit floats -----------------------------------------------------------------

# onnxruntime 1.32's departures from the spec's saturate=0 table (see the module docstring)
ORT_NO_SATURATE_QUIRK = {"float8_e4m3fn": (480.0, 496.0, True),
                         "float8_e5m2": (61440.0, 65536.0, True)}


@pytest.mark.parametrize("kind", list(FLOAT8))
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_float32_to_float8(kind: str, saturate: int) -> None:
    x = edge_floats(kind)
    model, feeds = one_node("Cast", [x], kind, to=FLOAT8[kind], saturate=saturate)
    got = aotc_run(model, feeds)[0]
    want = ort_run(model, feeds)[0]
    if not saturate and kind in ORT_NO_SATURATE_QUIRK:
        lo, hi, closed = ORT_NO_SATURATE_QUIRK[kind]
        a = np.abs(x)
        quirk = ((a >= lo) if closed else (a > lo)) & (a < hi)
        assert quirk.any()
        ref = ref_run(model, feeds)[0]
        want = np.where(quirk, ref, want)
    assert_codes(got, want, x)


@pytest.mark.parametrize("kind", list(FLOAT8))
@pytest.mark.parametrize("src", ["float16", "float64", "int32", "bfloat16"])
def test_cast_other_sources_to_float8(kind: str, src: str) -> None:
    """float16 exactly, float64 and integers through float32 (two roundings), as
    onnxruntime."""
    x = edge_floats(kind)
    if src == "int32":
        x = np.concatenate([np.arange(-600, 600), [2**24 + 1, -(2**31), 2**31 - 1, 61439,
                                                  61441, 465, 463]]).astype(np.int32)
    else:
        x = x[np.abs(x) < 65504].astype(src) if src == "float16" else x.astype(src)
        if src == "float64":  # values between float32 neighbours, around the ties
            x = np.concatenate([x, x * (1 + 2.0**-30), x * (1 - 2.0**-30)])
    model, feeds = one_node("Cast", [x], kind, to=FLOAT8[kind])
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


# --- Cast from the 8-bit floats ------------------------------------------------------------

@pytest.mark.parametrize("kind", [*FLOAT8, E8M0])
@pytest.mark.parametrize("dst", ["float32", "float16", "float64", "bfloat16", "int32", "int8",
                                 "uint8", "bool", "float8_e4m3fn", "float8_e5m2fnuz", E8M0])
def test_cast_from_float8(kind: str, dst: str) -> None:
    """Every code, NaNs and infinities included (to integers: the finite ones, whose
    out-of-range conversions ONNX leaves undefined). To bool the spec's rule, as ONNX's
    reference: ±0 is false, anything else true; onnxruntime tests the code instead (-0 true,
    E8M0's 2^-127, code 0, false)."""
    if dst == kind:
        pytest.skip("an Identity")
    x = all_codes(kind)
    if dst in ("int32", "int8", "uint8"):
        v = x.astype(np.float32)
        x = x[np.isfinite(v) & (np.abs(v) < (2**31 if dst == "int32" else 127))]
        if dst == "uint8":
            x = x[x.astype(np.float32) > -1]
    model, feeds = one_node("Cast", [x], dst, to=ONNX_TYPE[dst])
    reference = ref_run if dst == "bool" else ort_run
    assert_codes(aotc_run(model, feeds)[0], reference(model, feeds)[0], x)


def test_cast_saturate_flag_between_float8() -> None:
    """E5M2 → E4M3FN: values past 448 saturate, or become NaN with saturate=0."""
    x = all_codes("float8_e5m2")
    for sat in (1, 0):
        model, feeds = one_node("Cast", [x], "float8_e4m3fn", to=TP.FLOAT8E4M3FN, saturate=sat)
        assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


# --- E8M0 -----------------------------------------------------------------------------------

@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0(round_mode: str, saturate: int) -> None:
    """Powers of two and their neighbours, 1.5 times them (nearest's ties), float32
    subnormals, zero, negatives (the spec leaves them unspecified: onnxruntime's answer), ±inf,
    NaN, values beyond 2^127."""
    p = (2.0 ** np.arange(-149, 128)).astype(np.float32)
    x = np.concatenate([p, p * 1.5, np.nextafter(p, 0), np.nextafter(p, np.inf),
                        np.nextafter(p * 1.5, 0), np.nextafter(p * 1.5, np.inf),
                        edge_floats("float8_e4m3fn"), [3.4028235e38, -3.5, -0.0, 0.0]])
    x = x.astype(np.float32)
    model, feeds = one_node("Cast", [x], E8M0, to=TP.FLOAT8E8M0, saturate=saturate,
                            round_mode=round_mode)
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


def test_cast_e8m0_bad_round_mode_is_the_nodes_error() -> None:
    x = np.ones(3, np.float32)
    model, _ = one_node("Cast", [x], E8M0, to=TP.FLOAT8E8M0, round_mode="sideways")
    with pytest.raises(AotcError, match="round_mode"):
        compile_onnx(model, passes=False)


# --- 4- and 2-bit integers ----------------------------------------------------------------------

SUBBYTE_INTS = ["int4", "uint4", "int2", "uint2"]


@pytest.mark.parametrize("dst", SUBBYTE_INTS)
@pytest.mark.parametrize("src", ["float32", "float16", "float64", "int8", "int32", "uint8",
                                 "int64", "bool"])
def test_cast_to_subbyte_int(src: str, dst: str) -> None:
    """Integers keep their low bits (wraparound, as the spec says for fixed point); floats
    are rounded half away from zero first and then wrap, as onnxruntime (ONNX's reference
    truncates toward zero instead; ties at ±0.5, ±1.5, ... tell them apart)."""
    if src == "bool":
        x = np.array([True, False, True, True])
    elif src in ("int8", "int32", "uint8", "int64"):
        info = np.iinfo(src)
        x = np.concatenate([np.arange(max(info.min, -300), min(info.max, 300)),
                            [info.min, info.max]]).astype(src)
    else:
        x = np.concatenate([np.arange(-40, 40, 0.25), [-0.0, 0.49999997, -0.49999997, 2**20 + 0.5,
                                                        1000.5, -1000.5]]).astype(src)
    model, feeds = one_node("Cast", [x], dst, to=SUBBYTE[dst][0])
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


@pytest.mark.parametrize("src", SUBBYTE_INTS)
@pytest.mark.parametrize("dst", ["float32", "float16", "int8", "uint8", "int32", "uint64",
                                 "bool", "int4", "uint2", "float8_e4m3fn"])
def test_cast_from_subbyte_int(src: str, dst: str) -> None:
    if src == dst:
        pytest.skip("an Identity")
    x = np.tile(all_codes(src), 3)
    model, feeds = one_node("Cast", [x], dst, to=ONNX_TYPE[dst])
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


# --- FLOAT4E2M1 (onnxruntime has no Cast kernel: ONNX's reference) -----------------------

@pytest.mark.parametrize("src", ["float32", "float16"])
def test_cast_to_float4(src: str) -> None:
    """Round to nearest even, saturate at ±6 (infinities too), NaN to a zero of the opposite
    sign (ml_dtypes', so the reference's and the node tests'; ONNX's float4 page says 6)."""
    x = edge_floats(FLOAT4).astype(src)
    model, feeds = one_node("Cast", [x], FLOAT4, to=TP.FLOAT4E2M1)
    assert_codes(aotc_run(model, feeds)[0], ref_run(model, feeds)[0], x)


@pytest.mark.parametrize("dst", ["float32", "float16", "float8_e4m3fn", "int8"])
def test_cast_from_float4(dst: str) -> None:
    x = np.tile(all_codes(FLOAT4), 2)
    model, feeds = one_node("Cast", [x], dst, to=ONNX_TYPE[dst])
    want = ref_run(model, feeds)[0]
    assert_codes(aotc_run(model, feeds)[0], want, x)


# --- data movement keeps every code -------------------------------------------------------------

@pytest.mark.parametrize("kind", [*FLOAT8, E8M0, *SUBBYTE])
def test_transpose_keeps_codes(kind: str) -> None:
    """Loads decode and stores encode: every code comes back as it was (E5M2's infinities
    and every NaN code of one sign included) through stages that are not casts."""
    codes = np.resize(all_codes(kind), 256).reshape(4, 64)
    if kind == "float8_e5m2":  # NaN codes 0x7D/0x7E become onnxruntime's one NaN, 0x7F
        codes.view(np.uint8)[(codes.view(np.uint8) & 0x7F) > 0x7C] |= 0x7F
    shape = oh.make_tensor("s", TP.INT64, [2], [16, 16])
    graph = oh.make_graph(
        [oh.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
         oh.make_node("Reshape", ["t", "s"], ["r"]),
         oh.make_node("Transpose", ["r"], ["y"], perm=[1, 0])], "g",
        [oh.make_tensor_value_info("x", ONNX_TYPE[kind], codes.shape)],
        [oh.make_tensor_value_info("y", ONNX_TYPE[kind], (16, 16))], [shape])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    model.ir_version = 11
    got = aotc_run(model, [codes])[0]
    assert_codes(got, codes.T.reshape(16, 16).T)


# --- QuantizeLinear / DequantizeLinear -----------------------------------------------------

QUANT_KINDS = [*SUBBYTE_INTS, *FLOAT8]


def _scale_and_zero(kind: str, shape: tuple[int, ...], layout: str):
    """(scale, zero point, attributes) per tensor, per axis 1 or blocked along axis 1."""
    pshape = {"tensor": (), "axis": (shape[1],), "blocked": (shape[0], shape[1] // 4)}[layout]
    scale = (RNG.uniform(0.05, 2.0, pshape)).astype(np.float32)
    if kind in FLOAT8:
        zero = np.zeros(pshape, np.float32).astype(kind)  # the spec's: 0
    else:
        lo, hi = (-8, 7) if kind == "int4" else (0, 15) if kind == "uint4" else \
            (-2, 1) if kind == "int2" else (0, 3)
        zero = RNG.integers(lo, hi + 1, pshape).astype(np.int8).astype(kind)
    attrs = {"axis": 1} | ({"block_size": 4} if layout == "blocked" else {})
    return scale, zero, attrs


@pytest.mark.parametrize("kind", QUANT_KINDS)
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
def test_quantize_linear(kind: str, layout: str) -> None:
    """Saturation at both ends, ties of x/scale (half to even), and for float8 the whole
    range, NaN and infinities; the zero point a constant."""
    shape = (6, 8)
    scale, zero, attrs = _scale_and_zero(kind, shape, layout)
    x = (RNG.standard_normal(shape) * 6).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -2.5, 2.5]
    x[1, :3] = [1e6, -1e6, -0.0]
    if kind in FLOAT8:
        x[2, :3] = [np.nan, np.inf, -np.inf]
        x *= 20
    x = x.astype(np.float32)
    model, feeds = one_node("QuantizeLinear", [x, scale, zero], kind, consts={1: scale, 2: zero},
                            **attrs)
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


@pytest.mark.parametrize("kind", ["float8_e4m3fn", "float8_e5m2"])
def test_quantize_linear_float8_no_saturate(kind: str) -> None:
    x = np.array([1.0, 500.0, -1e5, np.inf, -np.inf, np.nan, 100.0, 3.0], np.float32)
    scale, zero = np.float32(0.5), np.zeros((), np.float32).astype(kind)
    model, feeds = one_node("QuantizeLinear", [x, scale, zero], kind, consts={1: scale, 2: zero},
                            saturate=0)
    assert_codes(aotc_run(model, feeds)[0], ort_run(model, feeds)[0], x)


@pytest.mark.parametrize("kind", [*QUANT_KINDS, FLOAT4])
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
def test_dequantize_linear(kind: str, layout: str) -> None:
    """Every code of the type (float8: the finite ones and NaN, whose zero point is 0)."""
    shape = (4, 256 if kind in FLOAT8 else 16)
    scale, zero, attrs = _scale_and_zero("int4" if kind == FLOAT4 else kind, shape, layout)
    if kind == FLOAT4:
        zero = np.zeros(zero.shape, np.float32).astype(FLOAT4)
    x = np.tile(all_codes(kind), shape[0] * shape[1] // all_codes(kind).size).reshape(shape)
    model, feeds = one_node("DequantizeLinear", [x, scale, zero], "float32",
                            consts={1: scale, 2: zero}, **attrs)
    reference = ref_run if kind in (FLOAT4, "int2", "uint2") else ort_run
    assert_codes(aotc_run(model, feeds)[0], reference(model, feeds)[0], x)


def test_quantize_linear_float4_against_reference() -> None:
    """onnxruntime has no QuantizeLinear to FLOAT4E2M1: the reference (x / scale + zero point,
    then the cast)."""
    x = np.concatenate([edge_floats(FLOAT4)[:200], [-0.0, 13.0, -13.0]]).astype(np.float32)
    scale, zero = np.float32(0.5), np.zeros((), np.float32).astype(FLOAT4)
    model, feeds = one_node("QuantizeLinear", [x, scale, zero], FLOAT4, consts={1: scale, 2: zero})
    assert_codes(aotc_run(model, feeds)[0], ref_run(model, feeds)[0], x)


def test_narrow_initializers_are_unpacked() -> None:
    """ONNX's raw data packs int4 two to a byte (an odd count padded); aotc's weights hold one
    a byte: a Cast of an int4 initializer gives its values."""
    w = np.array([-8, 7, -1, 0, 3, -5, 1], np.int8).astype("int4")
    graph = oh.make_graph([oh.make_node("Cast", ["w"], ["y"], to=TP.INT8)], "g", [],
                          [oh.make_tensor_value_info("y", TP.INT8, w.shape)],
                          [_initializer("w", w)])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    model.ir_version = 11
    got = run_program(compile_onnx(model, passes=False), [])[0]
    np.testing.assert_array_equal(got, w.astype(np.int8))


def test_narrow_bundle(tmp_path: Path) -> None:
    """A model with float8, int4 and E8M0 inputs and outputs and an int4 weight through
    `aotc optimize`, make and run_model: the header names the types and their one-a-byte
    sizes, .npy files in ml_dtypes' '<V1'/'<f1' go in and come out, and the results are
    onnxruntime's."""
    w = np.array([-8, 7, -1, 0, 3, -5], np.int8).astype("int4")
    graph = oh.make_graph(
        [oh.make_node("Cast", ["x"], ["q"], to=TP.INT4),
         oh.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
         oh.make_node("Cast", ["e"], ["ef"], to=TP.FLOAT),
         oh.make_node("Mul", ["wf", "ef"], ["p"]),
         oh.make_node("Cast", ["p"], ["y"], to=TP.FLOAT8E5M2, saturate=0),
         oh.make_node("Cast", ["f"], ["g"], to=TP.FLOAT8E8M0)], "narrow",
        [oh.make_tensor_value_info("x", TP.FLOAT, [6]),
         oh.make_tensor_value_info("e", TP.FLOAT8E4M3FN, [6]),
         oh.make_tensor_value_info("f", TP.FLOAT8E5M2, [6])],
        [oh.make_tensor_value_info("q", TP.INT4, [6]),
         oh.make_tensor_value_info("y", TP.FLOAT8E5M2, [6]),
         oh.make_tensor_value_info("g", TP.FLOAT8E8M0, [6])],
        [_initializer("w", w), onnx.numpy_helper.from_array(np.float32(4000.0), "s")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 25)])
    model.ir_version = 11
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "model.onnx")
    optimize_model(tmp_path / "m" / "model.onnx", tmp_path / "b", input_shapes=[])
    build_bundle(tmp_path / "b")
    header = (tmp_path / "b" / "model.h").read_text()
    assert '"q" int4[6], 6 bytes' in header and '"e" float8_e4m3fn[6], 6 bytes' in header
    inputs = [np.array([-9.5, 7.5, 0.5, -0.5, 100, 2.5], np.float32),
              np.array([1.5, -2, 448, 0.25, -0.0, 3], np.float32).astype("float8_e4m3fn"),
              np.array([3, -1, 0.5, 57344, 1e-5, np.inf], np.float32).astype("float8_e5m2")]
    got = run_model_process(tmp_path / "b", inputs)
    want = ort_run(model, inputs)
    for g, wnt in zip(got, want, strict=True):
        assert_codes(g, wnt)
