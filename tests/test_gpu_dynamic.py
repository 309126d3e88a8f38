"""GPU targets with a run-time dimension (issue 18 part 5, `--input-shape ids=1,1..N`): the
encoder of tests/test_dynamic_shapes.py compiled once for the bound, its kernels taking the
length as an argument, run at lengths 1, 7 and the bound against onnxruntime: in OpenCL form on
PoCL (the `opencl` target, and the `cuda` target's kernels after nvcc and ptxas), and as a
`mali` bundle (make, run_model and the C API under AddressSanitizer/UBSan, a length out of
range refused); what cannot take the dimension is refused by node."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper as h

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from program_runner import assert_close, ort_outputs  # noqa: E402
from test_dynamic_shapes import BOUND, SHAPES, _encoder, _inputs  # noqa: E402
from test_gpu_bundles import asan_env, asan_program, build_asan_bundle  # noqa: E402

from aotc.driver import compile_file, optimize_model  # noqa: E402
from aotc.errors import AotcError  # noqa: E402
from targets.gpu.opencl_device import opencl_available  # noqa: E402

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (install pocl-opencl-icd)")
LENGTHS = (1, 7, BOUND)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("gdyn") / "encoder.onnx"
    onnx.save(_encoder(), path)
    return path


def _check_lengths(program, model: onnx.ModelProto) -> None:
    from targets.gpu.opencl_program import run_program

    for n in LENGTHS:
        ins = _inputs(n)
        got = run_program(program, ins, n)
        want = ort_outputs(model, ins)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            assert_close(g, w)


@pytest.mark.opencl
@needs_opencl
def test_opencl_kernels_take_the_length_and_run_every_length(encoder):
    """One program for every length: each entry point takes `i64 d0` after its buffers, its
    grid is the bound's (the launches are constants), and its loops over the dimension stop
    at the argument (a guard for the threads past it, tile loops of no iterations)."""
    program, _ = compile_file(encoder, input_shapes=SHAPES, target="opencl")
    assert program.gpu is not None and [(d.lo, d.hi) for d in program.dims] == [(1, BOUND)]
    entries = re.findall(r"AOTC_KERNEL \w+\(([^)]*)\)", program.gpu.source)
    assert entries and all(e.endswith(", i64 d0") for e in entries)
    assert re.search(r"\(i64\)\(d0 - ", program.gpu.source)  # a guard or a partial tile
    assert re.search(r"< d0;", program.gpu.source)  # a reduction over the keys stops at it
    _check_lengths(program, onnx.load(encoder))


@pytest.mark.opencl
@needs_opencl
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_kernels_pass_ptxas_and_run_every_length_in_opencl_form(encoder, tmp_path):
    """The cuda target: nvcc and ptxas (sm_90) take the kernels with the length argument; the
    same bodies, in OpenCL form (only the prelude differs), run every length on PoCL."""
    program, _ = compile_file(encoder, input_shapes=SHAPES, target="cuda")
    assert program.gpu is not None and program.gpu.dialect == "cuda"
    ptx = bytes(program.kernel_object).decode()
    entries = re.findall(r"\.entry (\w+)\(", ptx)
    assert entries and set(entries) == {la.function for ls in program.gpu.launches.values()
                                        for la in ls}
    if shutil.which("ptxas"):
        ptx_file = tmp_path / "k.ptx"
        ptx_file.write_text(ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"),
                            str(ptx_file)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    ocl = dataclasses.replace(program, gpu=program.gpu.in_dialect("opencl"))
    _check_lengths(ocl, onnx.load(encoder))


# The C API at lengths: out of range (0, N + 1) is AOTC_ERR_BAD_SIZE with a message and writes
# nothing; NULL dims is AOTC_ERR_NULL_ARGUMENT; length 7 from a file of ids then mask
_API_TEST = r"""
#include "model.h"
#include <stdio.h>
#include <string.h>
#define CHECK(x) do { if (!(x)) { fprintf(stderr, "failed: %s (line %d)\n", #x, __LINE__); return 1; } } while (0)
#define N 7
int main(int argc, char **argv) {
    static int64_t ids[MODEL_DIM_0_MAX], mask[MODEL_DIM_0_MAX];
    static float y[MODEL_OUTPUT_0_SIZE / 4], pool[MODEL_OUTPUT_1_SIZE / 4];
    const void *in[2] = {ids, mask};
    void *out[2] = {y, pool};
    int64_t bad[2] = {0, MODEL_DIM_0_MAX + 1}, n = N;
    model_context *ctx = NULL;
    FILE *f;
    size_t i;
    int k;
    CHECK(argc == 3);
    CHECK(model_create(&ctx, 0) == AOTC_OK);
    for (k = 0; k < 2; ++k) {
        for (i = 0; i < sizeof y / sizeof y[0]; ++i) y[i] = 7.0f;
        CHECK(model_run_context_dims(ctx, &bad[k], in, out) == AOTC_ERR_BAD_SIZE);
        CHECK(strstr(model_context_error(ctx), "run-time dimension 0 is") != NULL);
        CHECK(strstr(model_context_error(ctx), "the model runs 1 to") != NULL);
        for (i = 0; i < sizeof y / sizeof y[0]; ++i) CHECK(y[i] == 7.0f);
    }
    CHECK(model_run_context_dims(ctx, NULL, in, out) == AOTC_ERR_NULL_ARGUMENT);
    f = fopen(argv[1], "rb");
    CHECK(f != NULL && fread(ids, 8, N, f) == N && fread(mask, 8, N, f) == N && fclose(f) == 0);
    CHECK(model_run_context_dims(ctx, &n, in, out) == AOTC_OK);
    CHECK(model_context_error(ctx)[0] == '\0');
    f = fopen(argv[2], "wb");
    CHECK(f != NULL && fwrite(y, 4, (size_t)N * 32, f) == (size_t)N * 32);
    CHECK(fwrite(pool, 4, 32, f) == 32 && fclose(f) == 0);
    model_destroy(ctx);
    return 0;
}
"""


@pytest.mark.opencl
@needs_opencl
def test_mali_bundle_runs_lengths_and_refuses_one_out_of_range(encoder, tmp_path):
    """A `--target mali` bundle with a range, built by make under ASan/UBSan: the header
    documents the range, run_model (which takes the length from the inputs' files) runs
    lengths 1, 7 and the bound and refuses N + 1, and a C program through
    model_run_context_dims matches onnxruntime at 7 and gets AOTC_ERR_BAD_SIZE with a message
    for 0 and N + 1, nothing written."""
    from aotc.package.build import run_model_command, run_model_process

    out = tmp_path / "bundle"
    optimize_model(encoder, out, input_shapes=SHAPES, target="mali")
    header = (out / "model.h").read_text()
    assert f"#define MODEL_DIM_0_MAX {BOUND}" in header and "#define MODEL_DIM_0_MIN 1" in header
    assert "int model_run_context_dims(model_context *ctx" in header
    assert "model_run_context_dims takes their values" in header
    build_asan_bundle(out)
    env = asan_env(tmp_path)
    model = onnx.load(encoder)
    for n in LENGTHS:
        ins = _inputs(n)
        got = run_model_process(out, ins, env=env)
        for g, w in zip(got, ort_outputs(model, ins), strict=True):
            assert g.shape == w.shape
            assert_close(g, w)
    for i, x in enumerate(_inputs(BOUND + 1)):
        np.save(tmp_path / f"in{i}.npy", x)
    proc = run_model_command(out, [str(tmp_path / "in0.npy"), str(tmp_path / "in1.npy"),
                                   str(tmp_path / "o0.npy"), str(tmp_path / "o1.npy")], env=env)
    assert proc.returncode == 2 and "Sanitizer" not in proc.stderr, proc.stderr

    exe = asan_program(out, _API_TEST, tmp_path / "api_test")
    ins = _inputs(7)
    (tmp_path / "in.bin").write_bytes(ins[0].tobytes() + ins[1].tobytes())
    r = subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
    assert r.returncode == 0 and "Sanitizer" not in r.stderr, r.stdout + r.stderr
    data = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    want = ort_outputs(model, ins)
    assert_close(data[:7 * 32].reshape(1, 7, 32), want[0])
    assert_close(data[7 * 32:].reshape(1, 32), want[1])


def test_what_cannot_take_the_dimension_is_refused_by_name_for_gpu_targets(tmp_path):
    """The frontend's refusals hold for GPU targets (a LayerNorm over the dimension, exit 2
    on the command line), and a GPU schedule that cannot take a stage over the dimension
    refuses its node with an AotcError instead of failing as a compiler bug."""
    from typer.testing import CliRunner

    import lowering.search.gpu_space as gpu_space
    from aotc.cli import app
    from lowering import te
    from lowering.schedule import ScheduleError

    path = tmp_path / "m.onnx"
    onnx.save(_encoder([h.make_node("LayerNormalization", ["y", "g", "b"], ["norm"], axis=1)],
                       "norm"), path)
    for target in ("opencl", "mali"):
        with pytest.raises(AotcError) as e:
            compile_file(path, input_shapes=SHAPES, target=target)
        assert e.value.op == "LayerNormalization", e.value.message
    args = ["optimize", str(path), "-o", str(tmp_path / "o"), "--target", "cuda"]
    for spec in SHAPES:
        args += ["--input-shape", spec]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "LayerNormalization" in result.output, result.output

    path = tmp_path / "enc.onnx"
    onnx.save(_encoder(), path)
    real = gpu_space.bind_threads

    def refuse_softmax(s, *a, **k):  # the max over the keys: Softmax's first reduction
        body = s.tensor.op.body
        if isinstance(body, te.Reduce) and body.combiner in ("max", "max_nan") and any(
                isinstance(ax.extent, te.DynExtent) for ax in body.axes):
            raise ScheduleError(f"{s.tensor.name}: no GPU schedule over a run-time dimension")
        return real(s, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpu_space, "bind_threads", refuse_softmax)
        with pytest.raises(AotcError) as e:
            compile_file(path, input_shapes=SHAPES, target="opencl")
    assert e.value.op == "Softmax" and "does not compile for the opencl target" in \
        e.value.message, e.value.message
