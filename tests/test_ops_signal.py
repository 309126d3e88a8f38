"""Signal operators against onnxruntime: DFT (real and complex input, forward and inverse,
one-sided both ways, axes, dft_length shorter, longer, odd), STFT, the window functions and
MelWeightMatrix. Where onnxruntime's results follow no definition (an inverse one-sided DFT
whose input holds other than dft_length//2+1 bins) ONNX's reference, i.e. numpy, is the
judge."""

from __future__ import annotations

import functools
import pathlib
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from backend_cases import backend_cases, frozen  # noqa: E402
from program_runner import (  # noqa: E402
    assert_close,
    compile_onnx,
    node_model,
    onnx_reference_outputs,
    ort_outputs,
    run_program,
)

from aotc.errors import AotcError  # noqa: E402

RNG = np.random.default_rng(23)


def dft_model(x: np.ndarray, length: int | None, axis: int, **attrs):
    ins = [x, None if length is None else np.array(length, np.int64), np.array(axis, np.int64)]
    return node_model("DFT", ins, consts=(1, 2), opset=20, **attrs)


def check(model, feeds, tol: float = 1e-5, reference: bool = False,
          ort_tol: float | None = None) -> None:
    """Against onnxruntime (or only ONNX's reference). float64 results are held to 1e-7
    against onnxruntime, whose inverse DFT of float64 is only that accurate (1.4e-8 off numpy
    at 11 points), and to 1e-11 against the reference (numpy's pocketfft, exact to rounding).
    `ort_tol` loosens the comparison with onnxruntime and adds the reference at `tol`: its
    DFT of a length that is not a power of two is a direct sum with float32 twiddles, 1e-5 to
    2e-4 of the spectrum's scale off numpy from 67 to 1000 points (aotc's: 1e-7 to 3e-7)."""
    got = run_program(compile_onnx(model), feeds)
    wide = any(f.dtype == np.float64 for f in feeds)
    checks = [] if reference else [(ort_outputs(model, feeds),
                                    1e-7 if wide else ort_tol or tol)]
    if reference or wide or ort_tol:
        checks.append((onnx_reference_outputs(model, feeds), 1e-11 if wide else tol))
    for want, t in checks:
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            assert_close(g, w, t)


def _ort_tol(length: int) -> float | None:
    return None if length & (length - 1) == 0 or length < 50 else 1e-3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("length", [None, 5, 12, 17])
def test_dft_complex(dtype, parts: int, inverse: int, length: int | None) -> None:
    x = RNG.standard_normal((2, 11, 3, parts)).astype(dtype)
    model, feeds = dft_model(x, length, 1, inverse=inverse)
    check(model, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("length", [2, 8, 64, 128, 100, 81, 98, 360, 67])
def test_dft_passes(dtype, parts: int, inverse: int, length: int) -> None:
    """Composite lengths from 64 take Stockham's passes (128: 4·4·4·2, 100: 4·5·5, 81: 3⁴,
    98: 2·7·7, 360: 4·2·3·3·5), the rest the direct sum (67 is prime); input shorter than the
    length (zero-padded)."""
    x = RNG.standard_normal((3, min(length, 70), parts)).astype(dtype)
    model, feeds = dft_model(x, length, 1, inverse=inverse)
    check(model, feeds, ort_tol=_ort_tol(length))


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("length", [1024, 1000])
def test_dft_long(onesided: int, length: int) -> None:
    x = RNG.standard_normal((2, length, 3, 1)).astype(np.float32)
    model, feeds = dft_model(x, None, 1, onesided=onesided)
    check(model, feeds, ort_tol=_ort_tol(length))


def test_dft_real_signal_keeps_exact_zeros() -> None:
    """The imaginary parts of a real signal's bins 0 and L/2 are exactly 0 in the passes too."""
    x = RNG.standard_normal((3, 256, 1)).astype(np.float32) * 100
    model, feeds = dft_model(x, None, 1)
    got = run_program(compile_onnx(model), feeds)[0]
    assert (got[:, 0, 1] == 0).all() and (got[:, 128, 1] == 0).all()


@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
def test_dft_axes(axis: int) -> None:
    x = RNG.standard_normal((4, 6, 7, 2)).astype(np.float32)
    model, feeds = dft_model(x, None, axis)
    check(model, feeds, 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,length", [(10, None), (9, None), (10, 7), (10, 16), (1, None),
                                      (64, None), (33, 20)])
def test_dft_onesided(dtype, n: int, length: int | None) -> None:
    x = RNG.standard_normal((3, n, 1)).astype(dtype)
    model, feeds = dft_model(x, length, -2, onesided=1)
    check(model, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bins,length", [(6, None), (6, 10), (5, 8), (5, 9), (10, 18),
                                         (10, 16), (2, 3)])
def test_dft_inverse_onesided(dtype, bins: int, length: int | None) -> None:
    """irfft: onnxruntime agrees with numpy when the input holds length//2+1 bins (or more)."""
    x = RNG.standard_normal((2, 3, bins, 2)).astype(dtype)
    model, feeds = dft_model(x, length, 2, inverse=1, onesided=1)
    check(model, feeds)


@pytest.mark.parametrize("bins,length", [(10, 7), (10, 12), (3, 8), (4, 12)])
def test_dft_inverse_onesided_other_bin_counts(bins: int, length: int) -> None:
    """Fewer or more bins than length//2+1: numpy's irfft (zero-padded or truncated), as ONNX's
    reference; onnxruntime's results here match neither."""
    x = RNG.standard_normal((2, bins, 2)).astype(np.float32)
    model, feeds = dft_model(x, length, 1, inverse=1, onesided=1)
    check(model, feeds, 1e-5, reference=True)


def test_dft_round_trip() -> None:
    """rfft then irfft gives the signal back (a 2-node model)."""
    x = RNG.standard_normal((4, 50, 1)).astype(np.float32)
    fwd, _ = dft_model(x, None, 1, onesided=1)
    bins = fwd.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    inv, _ = dft_model(np.zeros((4, bins, 2), np.float32), 50, 1, inverse=1, onesided=1)
    got = run_program(compile_onnx(fwd), [x])[0]
    back = run_program(compile_onnx(inv), [got])[0]
    np.testing.assert_allclose(back, x, atol=2e-5)


def test_dft_opset17_attribute_axis() -> None:
    x = RNG.standard_normal((2, 8, 5, 1)).astype(np.float32)
    model, feeds = node_model("DFT", [x], opset=17, axis=2, onesided=1)
    check(model, feeds, 1e-5)


def test_dft_zero_size_batch() -> None:
    x = np.zeros((0, 8, 2), np.float32)
    model, feeds = dft_model(x, None, 1)
    got = run_program(compile_onnx(model), feeds)[0]
    assert got.shape == (0, 8, 2)


def test_dft_runtime_axis_runs_each_fitting_axis() -> None:
    """A [2, 8, 1] signal's output [2, 8, 2] fits axes 0 and 1: both are compiled and the run-
    time value selects (tests/test_pinned_parameters.py holds the checks)."""
    x = RNG.standard_normal((2, 8, 1)).astype(np.float32)
    model, _ = node_model("DFT", [x, None, np.array(1, np.int64)], opset=20)
    program = compile_onnx(model)
    for axis in (0, 1, -2):
        feeds = [x, np.array(axis, np.int64)]
        for g, w in zip(run_program(program, feeds), ort_outputs(model, feeds), strict=True):
            assert_close(g, w, 1e-5)


def stft_model(x, step: int, window: np.ndarray | None, frame: int | None, const_window=True,
               **attrs):
    ins = [x, np.array(step, np.int64), window,
           None if frame is None else np.array(frame, np.int64)]
    consts = (1, 3, 2) if const_window else (1, 3)
    return node_model("STFT", ins, consts=consts, opset=17, **attrs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("step,frame,windowed", [(8, 16, False), (8, 16, True), (5, 12, True),
                                                 (3, 7, True), (16, 16, False), (1, 9, True)])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(dtype, step: int, frame: int, windowed: bool, onesided: int) -> None:
    x = RNG.standard_normal((2, 70, 1)).astype(dtype)
    window = np.hanning(frame).astype(dtype) if windowed else None
    model, feeds = stft_model(x, step, window, None if windowed else frame, onesided=onesided)
    check(model, feeds)


def test_stft_window_at_run_time_and_complex_signal() -> None:
    x = RNG.standard_normal((3, 40, 2)).astype(np.float32)
    window = RNG.uniform(0, 1, 10).astype(np.float32)
    model, feeds = stft_model(x, 4, window, 10, const_window=False, onesided=0)
    check(model, feeds)


def test_stft_whole_signal_one_frame() -> None:
    x = RNG.standard_normal((1, 24, 1)).astype(np.float32)
    model, feeds = stft_model(x, 4, None, 24, onesided=1)
    check(model, feeds)


@pytest.mark.parametrize("windowed", [False, True])
def test_stft_absent_onesided(windowed: bool) -> None:
    """onnx's shape inference takes an absent onesided as 0 (the spec's default is 1,
    onnxruntime's too); the frontend writes it, so the output is onesided as onnxruntime's."""
    x = RNG.standard_normal((1, 40, 1)).astype(np.float32)
    window = np.hamming(16).astype(np.float32) if windowed else None
    model, feeds = stft_model(x, 4, window, None if windowed else 16)
    for k, dim in enumerate(model.graph.output[0].type.tensor_type.shape.dim):
        dim.dim_param = f"d{k}"  # as an exporter writes it: not onnx's mistaken inference
    got = run_program(compile_onnx(model), feeds)[0]
    want = ort_outputs(model, feeds)[0]
    assert got.shape == want.shape == (1, 7, 9, 2)
    assert_close(got, want, 1e-5)


def test_stft_runtime_step_is_read_when_it_runs() -> None:
    """frame_step given at run time: the declared 5 frames of 8 over 24 samples hold for
    steps 4 (and 4 only); the frames read it when the kernel runs."""
    x = RNG.standard_normal((1, 24, 1)).astype(np.float32)
    model, _ = node_model("STFT", [x, np.array(4, np.int64), None, np.array(8, np.int64)],
                          consts=(3,), opset=17)
    out = model.graph.output[0].type.tensor_type  # onnx cannot infer it: declare it
    out.elem_type = onnx.TensorProto.FLOAT
    for d in (1, 5, 5, 2):
        out.shape.dim.add().dim_value = d
    feeds = [x, np.array(4, np.int64)]
    for g, w in zip(run_program(compile_onnx(model), feeds), ort_outputs(model, feeds),
                    strict=True):
        assert_close(g, w, 1e-5)


@functools.cache
def _signal_cases() -> list:
    return [c for c in backend_cases("test_") if c.name.startswith(("test_dft", "test_stft"))]


FROZEN = {"test_dft": [2], "test_dft_axis": [2], "test_dft_rfft": [2], "test_dft_irfft": [2],
          "test_stft": [1, 3], "test_stft_with_window": [1]}


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_backend_cases_with_parameters_frozen(name: str) -> None:
    """The node tests that give axis / frame_step / frame_length as graph inputs, with those
    made constants of the test's values (test_dft_inverse is left out: it expects numpy's
    1.9e-7 float noise where the exact value, and ours, is 0; onnxruntime misses it too)."""
    (case,) = [c for c in _signal_cases() if c.name == name]
    model, feeds, want = frozen(case, FROZEN[name])
    got = run_program(compile_onnx(model), feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size,out_type", [(10, None), (1, None), (7, 11), (64, 1), (33, 10)])
def test_window_functions(op: str, periodic: int, size: int, out_type: int | None) -> None:
    """ONNX defines the windows as functions, which the frontend expands; with a constant size
    they fold or compute through existing operators (float32, float64 and float16 outputs)."""
    attrs = {"periodic": periodic} if out_type is None else {"periodic": periodic,
                                                            "output_datatype": out_type}
    model, feeds = node_model(op, [np.array(size, np.int64)], consts=(0,), opset=17, **attrs)
    got = run_program(compile_onnx(model), feeds)[0]
    want = ort_outputs(model, feeds)[0]
    assert got.dtype == want.dtype
    assert_close(got, want, 1e-3 if want.dtype == np.float16 else 1e-6)


def mel_model(mels: int, length: int, rate: int, lower: float, upper: float,
              consts=(0, 1, 2, 3, 4), **attrs):
    ins = [np.array(mels, np.int32), np.array(length, np.int32), np.array(rate, np.int32),
           np.array(lower, np.float32), np.array(upper, np.float32)]
    return node_model("MelWeightMatrix", ins, consts=consts, opset=17, **attrs)


@pytest.mark.parametrize("runtime_edges", [False, True])
@pytest.mark.parametrize("mels,length,rate,lower,upper", [
    (8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 8000.0), (128, 1024, 22050, 0.0, 11025.0),
    (10, 64, 16000, 300.0, 3000.0), (20, 32, 8000, 0.0, 4000.0), (3, 7, 100, 10.0, 40.0)])
def test_mel_weight_matrix(runtime_edges: bool, mels: int, length: int, rate: int,
                           lower: float, upper: float) -> None:
    """Bit for bit with onnxruntime and ONNX's reference, the sample rate and edges constants
    or computed at run time (then in float64 from log and exp, which lands on the same bins
    here)."""
    model, feeds = mel_model(mels, length, rate, lower, upper,
                             consts=(0, 1) if runtime_edges else (0, 1, 2, 3, 4))
    got = run_program(compile_onnx(model), feeds)[0]
    for want in (ort_outputs(model, feeds)[0], onnx_reference_outputs(model, feeds)[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("out_type", [11, 10])
def test_mel_weight_matrix_output_types(out_type: int) -> None:
    model, feeds = mel_model(16, 256, 16000, 0.0, 8000.0, output_datatype=out_type)
    got = run_program(compile_onnx(model), feeds)[0]
    want = onnx_reference_outputs(model, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_mel_weight_matrix_runtime_bins_is_refused() -> None:
    model, _ = mel_model(8, 16, 8192, 0.0, 4096.0, consts=(1, 2, 3, 4))
    out = model.graph.output[0].type.tensor_type  # onnx cannot infer it: declare it
    out.elem_type = onnx.TensorProto.FLOAT
    for d in (9, 8):
        out.shape.dim.add().dim_value = d
    with pytest.raises(AotcError, match="num_mel_bins must be a constant"):
        compile_onnx(model)
