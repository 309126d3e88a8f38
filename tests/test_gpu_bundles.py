"""GPU bundles (issue 18 parts 3-5): every sample model compiled for `mali` builds with make and
`aotc verify` passes on the OpenCL device (PoCL on this CPU); the OpenCL host code's errors
(a bad device choice, a kernel that does not build, bad arguments) are status codes with
messages, its binary cache is read and rewritten as it should, under AddressSanitizer without
leaks; every sample compiled for `cuda` builds against cuda.h and libcuda (the toolkit's stub, or
one made here from the symbols the host code uses) and its PTX passes `ptxas -arch=sm_90`. Where a
CUDA device answers, the CUDA bundles are also compared with onnxruntime."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import pytest

from aotc.driver import optimize_model
from aotc.package.build import RunModelError, build_bundle, run_model_command, run_model_process
from aotc.verify import ort_run, random_inputs, verify_bundle

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "runtime_c"
SAMPLES = ["mlp", "resnet_tiny", "mobilenet_tiny", "transformer_tiny", "unet_tiny"]
MLP = ROOT / "models" / "mlp.onnx"

_PROBE = r"""
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
int main(void) {
    cl_platform_id p[8];
    cl_uint np = 0, i, nd, total = 0;
    if (clGetPlatformIDs(8, p, &np) != CL_SUCCESS) return 1;
    for (i = 0; i < np && i < 8; ++i)
        if (clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS) total += nd;
    return total > 0 ? 0 : 1;
}
"""


@cache
def _opencl_missing() -> str | None:
    """Why an OpenCL bundle cannot be built and run here (None: it can)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="aotc-clprobe-") as d:
        src, exe = Path(d) / "probe.c", Path(d) / "probe"
        src.write_text(_PROBE)
        r = subprocess.run(["cc", "-std=c99", "-o", str(exe), str(src), "-lOpenCL"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "no OpenCL headers or ICD loader (apt-get install ocl-icd-opencl-dev)"
        if subprocess.run([str(exe)], capture_output=True).returncode != 0:
            return "no OpenCL device (apt-get install pocl-opencl-icd)"
    return None


def _cuda_path() -> Path | None:
    """The CUDA toolkit holding cuda.h, when nvcc and ptxas are installed."""
    nvcc = shutil.which("nvcc")
    if nvcc is None or shutil.which("ptxas") is None:
        return None
    for p in (os.environ.get("CUDA_PATH"), "/usr/local/cuda",
              str(Path(nvcc).resolve().parent.parent)):
        if p and (Path(p) / "include" / "cuda.h").is_file():
            return Path(p)
    return None


needs_opencl = pytest.mark.skipif(_opencl_missing() is not None,
                                  reason=_opencl_missing() or "")
needs_cuda = pytest.mark.skipif(_cuda_path() is None,
                                reason="no CUDA toolkit (nvcc, ptxas and cuda.h)")


def _compile(name: str, out: Path, target: str) -> Path:
    optimize_model(ROOT / "models" / f"{name}.onnx", out, input_shapes=[], target=target)
    return out


# ---- OpenCL: every sample on PoCL ----

@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("name", SAMPLES)
def test_mali_bundle_builds_and_verifies(name: str, tmp_path: Path) -> None:
    out = _compile(name, tmp_path / "bundle", "mali")
    manifest = json.loads((out / "aotc_bundle.json").read_text())
    assert manifest["gpu"] == {"api": "opencl", "arch": "mali-valhall"}
    assert not (out / "model_kernels.o").exists() and (out / "model_kernels.cl").is_file()
    reports = verify_bundle(ROOT / "models" / f"{name}.onnx", out, input_shapes=[], runs=1)
    assert reports and all(r.ok for r in reports), reports


@pytest.mark.opencl
@needs_opencl
def test_cli_opencl_target(tmp_path: Path) -> None:
    """`aotc optimize --target opencl` and `aotc verify` from the command line."""
    out = tmp_path / "bundle"

    def aotc(*args: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)],
                              capture_output=True, text=True, cwd=ROOT)

    proc = aotc("optimize", MLP, "-o", out, "--target", "opencl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "opencl (opencl-generic)" in proc.stdout
    proc = aotc("verify", MLP, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match onnxruntime" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--target", "mali", "--emit", "onnx"], "--emit onnx does not take the GPU target"),
    (["--target", "cuda", "--emit", "ort"], "--emit ort does not take the GPU target"),
    (["--target", "cuda:sm9"], "cuda:sm_XX"),
    (["--target", "mali", "--machine", "machine.json"], "--machine describes a CPU"),
])
def test_gpu_target_user_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "bundle"
    proc = subprocess.run([sys.executable, "-m", "aotc", "optimize", str(MLP), "-o", str(out),
                           *args], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


# ---- OpenCL host code: the C API, its errors, the binary cache, under ASan ----

_API_TEST = r"""
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "line %d: %s (%s)\n", __LINE__, #cond, err); return 1; } } while (0)

static float in[MODEL_INPUT_0_SIZE / 4], out[MODEL_OUTPUT_0_SIZE / 4];

/* api_test CACHE OUT.bin: the API's error paths, then one run with the binary cache CACHE,
 * its output written to OUT.bin. */
int main(int argc, char **argv) {
    const void *ins[1] = {in};
    void *outs[1] = {out};
    model_context *ctx = NULL;
    aotc_gpu_options o;
    char err[2048] = "";
    FILE *f;
    size_t i;
    if (argc != 3) return 2;
    for (i = 0; i < sizeof in / sizeof in[0]; ++i) in[i] = (float)((int)(i % 7) - 3) * 0.25f;
    memset(&o, 0, sizeof o);
    o.error = err;
    o.error_size = sizeof err;

    o.device = "no-such-device";
    CHECK(model_create_with_options(&ctx, &o) == AOTC_ERR_NO_DEVICE && ctx == NULL);
    CHECK(strstr(err, "no OpenCL device matches 'no-such-device'") != NULL);
    CHECK(strstr(err, "0: ") != NULL); /* the devices there are */
    o.device = "99";
    CHECK(model_create_with_options(&ctx, &o) == AOTC_ERR_NO_DEVICE && ctx == NULL);
    CHECK(model_create(NULL, 0) == AOTC_ERR_NULL_ARGUMENT);
    CHECK(model_create(&ctx, -1) == AOTC_ERR_BAD_ARGUMENT && ctx == NULL);
    CHECK(model_create_with_weights(&ctx, 0, in, 3) == AOTC_ERR_BAD_SIZE && ctx == NULL);
    CHECK(strcmp(model_status_message(AOTC_ERR_NO_DEVICE), "unknown status code") != 0);
    CHECK(strcmp(model_status_message(AOTC_ERR_DEVICE), "unknown status code") != 0);
    CHECK(model_missing_cpu_feature() == NULL);
    CHECK(model_context_error(NULL)[0] == '\0' && model_context_num_threads(NULL) == 0);
    model_destroy(NULL);

    o.device = "0";
    o.binary_cache = argv[1];
    err[0] = '\0';
    CHECK(model_create_with_options(&ctx, &o) == AOTC_OK && ctx != NULL);
    CHECK(model_context_device(ctx)[0] != '\0' && model_context_num_threads(ctx) == 1);
    CHECK(model_run_context(ctx, NULL, outs) == AOTC_ERR_NULL_ARGUMENT);
    CHECK(model_run_context(NULL, ins, outs) == AOTC_ERR_NULL_ARGUMENT);
    CHECK(model_run_context(ctx, ins, outs) == AOTC_OK);
    CHECK(model_run_context(ctx, ins, outs) == AOTC_OK);
    CHECK(model_context_error(ctx)[0] == '\0');
    model_destroy(ctx);
    f = fopen(argv[2], "wb");
    CHECK(f != NULL && fwrite(out, 1, sizeof out, f) == sizeof out && fclose(f) == 0);
    return 0;
}
"""

_ASAN = "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"


def build_asan_bundle(out: Path) -> None:
    """The OpenCL bundle in `out` rebuilt under AddressSanitizer/UBSan."""
    build_bundle(out, cflags=_ASAN, ldflags="-fsanitize=address,undefined")


def asan_program(out: Path, source: str, exe: Path) -> Path:
    """`source` (a C test of the bundle in `out`) built beside `exe` under the sanitizers and
    linked with the bundle's library and OpenCL."""
    src = exe.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", *_ASAN.split(),
                    f"-I{out}", "-o", str(exe), str(src), str(out / "libmodel.a"),
                    "-fsanitize=address,undefined", "-lOpenCL", "-lpthread", "-lm"], check=True)
    return exe


def asan_env(folder: Path) -> dict[str, str]:
    """The sanitizers' options, leaks checked: PoCL and its LLVM keep compiler state for the
    process's life (never freed), so their allocations are suppressed; the host code's own
    (and the bundle's) are reported."""
    suppressions = folder / "lsan.supp"
    suppressions.write_text("leak:libpocl\nleak:libLLVM\n")
    return {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
            "LSAN_OPTIONS": f"suppressions={suppressions}:print_suppressions=0",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


@pytest.mark.opencl
@needs_opencl
def test_opencl_api_errors_and_cache_under_asan(tmp_path: Path) -> None:
    """PoCL runs under AddressSanitizer with leak detection: the API test (error paths, runs,
    the binary cache) and run_model leave no error and no leak of the host code's (PoCL's own
    compiler state, which it never frees, is suppressed)."""
    out = _compile("mlp", tmp_path / "bundle", "mali")
    build_asan_bundle(out)
    exe = asan_program(out, _API_TEST, tmp_path / "api_test")
    env = {**os.environ, **asan_env(tmp_path)}
    env.pop("AOTC_OPENCL_DEVICE", None)
    cache_file, got = tmp_path / "kernels.bin", tmp_path / "out.bin"

    def run() -> bytes:
        r = subprocess.run([str(exe), str(cache_file), str(got)], capture_output=True,
                           text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr
        return got.read_bytes()

    first = run()  # builds from source, writes the cache
    assert cache_file.read_bytes()[:8] == b"AOTCCLB1"
    inode = cache_file.stat().st_ino
    assert run() == first  # read from the cache: the file is not rewritten
    assert cache_file.stat().st_ino == inode
    data = bytearray(cache_file.read_bytes())
    data[24:] = b"\x5a" * (len(data) - 24)  # the same key, a binary the driver refuses
    cache_file.write_bytes(bytes(data))
    inode = cache_file.stat().st_ino
    assert run() == first  # rebuilt from source and rewritten
    assert cache_file.stat().st_ino != inode and cache_file.read_bytes()[24:] != data[24:]

    x = np.array([((i % 7) - 3) * 0.25 for i in range(64)], np.float32).reshape(1, 64)
    want = ort_run(onnx.load(MLP), ["input"], [x])[0]
    np.testing.assert_allclose(np.frombuffer(first, np.float32).reshape(want.shape), want,
                               rtol=1e-4, atol=1e-5)

    # run_model under the sanitizers: a run, and a device choice that matches nothing
    np.save(tmp_path / "in.npy", x)
    proc = run_model_command(out, [str(tmp_path / "in.npy"), str(tmp_path / "o.npy")], env=env)
    assert proc.returncode == 0 and "Sanitizer" not in proc.stderr, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), want, rtol=1e-4, atol=1e-5)
    proc = run_model_command(out, [str(tmp_path / "in.npy"), str(tmp_path / "o.npy")],
                             env={**env, "AOTC_OPENCL_DEVICE": "no-such-device"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no OpenCL device matches 'no-such-device'" in proc.stderr
    assert "Sanitizer" not in proc.stderr


_DEVICE_RUN_TEST = r"""
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include "model.h"

#include <stdio.h>
#include <string.h>

#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "line %d: %s (%s)\n", __LINE__, #cond, model_context_error(ctx)); return 1; } } while (0)

static float in[MODEL_INPUT_0_SIZE / 4], host_out[MODEL_OUTPUT_0_SIZE / 4], device_out[MODEL_OUTPUT_0_SIZE / 4];

/* The model on the application's cl_mem buffers (model_run_device) against the host run, and
 * the device run's argument checks. */
int main(void) {
    const void *ins[1] = {in};
    void *outs[1] = {host_out};
    model_context *ctx = NULL;
    void *native_context = NULL, *native_queue = NULL;
    cl_context cl_ctx, other_ctx;
    cl_command_queue queue;
    cl_device_id device;
    cl_mem input, output, small, foreign;
    void *device_ins[1], *device_outs[1];
    cl_int e;
    size_t i;
    for (i = 0; i < sizeof in / sizeof in[0]; ++i) in[i] = (float)((int)(i % 5) - 2) * 0.5f;
    CHECK(model_create(&ctx, 0) == AOTC_OK);
    CHECK(model_run_context(ctx, ins, outs) == AOTC_OK);

    CHECK(model_context_native(NULL, &native_context, &native_queue) == AOTC_ERR_NULL_ARGUMENT);
    CHECK(model_context_native(ctx, &native_context, NULL) == AOTC_OK && native_context != NULL);
    CHECK(model_context_native(ctx, NULL, &native_queue) == AOTC_OK && native_queue != NULL);
    cl_ctx = (cl_context)native_context;
    queue = (cl_command_queue)native_queue;
    input = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, MODEL_INPUT_0_SIZE, NULL, &e);
    CHECK(e == CL_SUCCESS);
    output = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, MODEL_OUTPUT_0_SIZE, NULL, &e);
    CHECK(e == CL_SUCCESS);
    CHECK(clEnqueueWriteBuffer(queue, input, CL_FALSE, 0, MODEL_INPUT_0_SIZE, in, 0, NULL, NULL) == CL_SUCCESS);
    device_ins[0] = input;
    device_outs[0] = output;
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_OK);
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_OK);
    CHECK(clEnqueueReadBuffer(queue, output, CL_TRUE, 0, MODEL_OUTPUT_0_SIZE, device_out, 0, NULL, NULL) == CL_SUCCESS);
    CHECK(memcmp(host_out, device_out, sizeof host_out) == 0);

    /* the argument checks */
    CHECK(model_run_device(NULL, device_ins, device_outs) == AOTC_ERR_NULL_ARGUMENT);
    CHECK(model_run_device(ctx, NULL, device_outs) == AOTC_ERR_NULL_ARGUMENT);
    device_outs[0] = NULL;
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_ERR_NULL_ARGUMENT);
    small = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, MODEL_OUTPUT_0_SIZE - 4, NULL, &e);
    CHECK(e == CL_SUCCESS);
    device_outs[0] = small;
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_ERR_BAD_SIZE);
    CHECK(strstr(model_context_error(ctx), "output 0 holds") != NULL);
    CHECK(clGetContextInfo(cl_ctx, CL_CONTEXT_DEVICES, sizeof device, &device, NULL) == CL_SUCCESS);
    other_ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &e);
    CHECK(e == CL_SUCCESS);
    foreign = clCreateBuffer(other_ctx, CL_MEM_READ_WRITE, MODEL_INPUT_0_SIZE, NULL, &e);
    CHECK(e == CL_SUCCESS);
    device_ins[0] = foreign;
    device_outs[0] = output;
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_ERR_BAD_ARGUMENT);
    CHECK(strstr(model_context_error(ctx), "input 0 is a buffer of another OpenCL context") != NULL);
    device_ins[0] = input; /* a good run after failed ones */
    CHECK(model_run_device(ctx, device_ins, device_outs) == AOTC_OK);
    CHECK(model_context_error(ctx)[0] == '\0');

    clReleaseMemObject(foreign);
    clReleaseContext(other_ctx);
    clReleaseMemObject(small);
    clReleaseMemObject(output);
    clReleaseMemObject(input);
    model_destroy(ctx);
    return 0;
}
"""


@pytest.mark.opencl
@needs_opencl
def test_opencl_run_on_device_buffers(tmp_path: Path) -> None:
    """model_run_device on cl_mem buffers the application made in the context
    model_context_native gives: the same output as the host run, bit for bit; a buffer too
    small, one of another context and NULL entries are refused with their status and message;
    under AddressSanitizer/UBSan."""
    out = _compile("mlp", tmp_path / "bundle", "mali")
    build_asan_bundle(out)
    exe = asan_program(out, _DEVICE_RUN_TEST, tmp_path / "device_run")
    r = subprocess.run([str(exe)], capture_output=True, text=True,
                       env={**os.environ, **asan_env(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr


@pytest.mark.opencl
@needs_opencl
def test_kernel_build_failure_is_reported(tmp_path: Path) -> None:
    """A kernel source the device's compiler refuses: create fails with AOTC_ERR_DEVICE and the
    build log, run_model exits 1 with it."""
    out = _compile("mlp", tmp_path / "bundle", "mali")
    broken = b"__kernel void model_k0_s0(__global uchar *p0, long o0) { this is not C; }\n"
    (out / "model_kernel_code.c").write_text(
        '#include "aotc_gpu.h"\n'
        "extern const char model_kernel_target[] AOTC_INTERNAL;\n"
        'const char model_kernel_target[] AOTC_INTERNAL = "opencl mali-valhall";\n'
        "extern const unsigned char model_kernel_code[] AOTC_INTERNAL;\n"
        "const unsigned char model_kernel_code[] AOTC_INTERNAL = {"
        + ",".join(str(b) for b in broken) + ",0};\n")
    build_bundle(out)
    with pytest.raises(RunModelError) as e:
        run_model_process(out, [np.zeros((1, 64), np.float32)])
    assert e.value.returncode == 1
    assert "clBuildProgram failed: CL_BUILD_PROGRAM_FAILURE" in e.value.output
    assert "status 12" in e.value.output


@pytest.mark.opencl
@needs_opencl
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake missing")
def test_opencl_bundle_cmake_build(tmp_path: Path) -> None:
    out = _compile("mlp", tmp_path / "bundle", "mali")
    build = out / "build"
    for cmd in (["cmake", "-S", str(out), "-B", str(build)],
                ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    np.save(tmp_path / "in.npy", x)
    r = subprocess.run([str(build / "run_model"), str(tmp_path / "in.npy"),
                        str(tmp_path / "out.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want = ort_run(onnx.load(MLP), ["input"], [x])[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-4, atol=1e-5)


# ---- CUDA: every sample builds; its PTX passes ptxas ----

def _make_stub_libcuda(folder: Path, cuda: Path) -> None:
    """A libcuda.so.1 defining every driver function the host code calls, each failing with
    CUDA_ERROR_NO_DEVICE (100): enough to link, and to see the host code report no device."""
    obj = folder / "host.o"
    subprocess.run(["cc", "-std=c99", "-c", f"-I{RUNTIME}", f"-I{cuda / 'include'}", "-o",
                    str(obj), str(RUNTIME / "aotc_cuda.c")], check=True)
    names = re.findall(r"\bU (cu\w+)", subprocess.run(["nm", "-u", str(obj)], check=True,
                                                     capture_output=True, text=True).stdout)
    assert "cuInit" in names and "cuLaunchKernel" in names, names
    (folder / "stub.c").write_text("".join(f"int {n}(void) {{ return 100; }}\n" for n in names))
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    str(folder / "libcuda.so"), str(folder / "stub.c")], check=True)
    (folder / "libcuda.so.1").symlink_to("libcuda.so")


@pytest.fixture(scope="session")
def cuda_link(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, str]]:
    """(make's environment, run_model's environment) for linking libcuda: the toolkit's stub,
    else the driver's, else a stub made here (run_model then finds it by LD_LIBRARY_PATH)."""
    cuda = _cuda_path()
    assert cuda is not None
    make_env = {"CUDA_PATH": str(cuda)}
    if (cuda / "lib64" / "stubs" / "libcuda.so").is_file() or ctypes.util.find_library("cuda"):
        return make_env, {}
    folder = tmp_path_factory.mktemp("libcuda")
    _make_stub_libcuda(folder, cuda)
    return ({**make_env, "CUDA_LIBS": f"-L{folder} -lcuda"},
            {"LD_LIBRARY_PATH": f"{folder}:{os.environ.get('LD_LIBRARY_PATH', '')}"})


def _embedded_code(bundle: Path) -> bytes:
    text = (bundle / "model_kernel_code.c").read_text()
    return bytes(int(v) for v in re.findall(r"\d+", text[text.index("= {"):]))


def _ptxas(ptx: Path, arch: str) -> None:
    r = subprocess.run(["ptxas", f"-arch={arch}", "-o", os.devnull, str(ptx)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_cuda
@pytest.mark.parametrize("name", SAMPLES)
def test_cuda_bundle_builds_and_ptx_assembles(name: str, tmp_path: Path, cuda_link) -> None:
    make_env, run_env = cuda_link
    out = _compile(name, tmp_path / "bundle", "cuda")
    assert json.loads((out / "aotc_bundle.json").read_text())["gpu"] == {"api": "cuda",
                                                                        "arch": "sm_90"}
    ptx = out / "model_kernels.ptx"
    assert (out / "model_kernels.cu").is_file() and ".target sm_90" in ptx.read_text()
    assert _embedded_code(out) == ptx.read_bytes() + b"\0"
    _ptxas(ptx, "sm_90")
    build_bundle(out, extra_env=make_env)
    model = onnx.load(ROOT / "models" / f"{name}.onnx")
    manifest = json.loads((out / "aotc_bundle.json").read_text())
    inputs = random_inputs(manifest["inputs"], model, np.random.default_rng(0))
    try:
        got = run_model_process(out, inputs, env=run_env)
    except RunModelError as e:
        if e.returncode == 127 and "libcuda.so.1" in e.output:
            return  # linked against the toolkit's stub, and no driver to load
        # no CUDA device here: the host code says so
        assert e.returncode == 2, e.output
        assert "status 11" in e.output and ("cuInit failed" in e.output
                                            or "no CUDA device" in e.output), e.output
        return
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    for g, w in zip(got, ort_run(model, names, inputs), strict=True):  # a device answered
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@needs_cuda
def test_cuda_ptx_rebuilt_for_another_architecture(tmp_path: Path, cuda_link) -> None:
    """`make ptx CUDA_ARCH=sm_80` recompiles the kept .cu and embeds the new PTX."""
    make_env, _ = cuda_link
    out = _compile("mlp", tmp_path / "bundle", "cuda")
    build_bundle(out, extra_env=make_env)
    build_bundle(out, target="ptx", extra_env={**make_env, "CUDA_ARCH": "sm_80"})
    ptx = out / "model_kernels.ptx"
    assert ".target sm_80" in ptx.read_text()
    assert _embedded_code(out) == ptx.read_bytes() + b"\0"
    _ptxas(ptx, "sm_80")
    build_bundle(out, extra_env=make_env)  # the library and run_model relinked with it
    nm = subprocess.run(["nm", str(out / "libmodel.a")], capture_output=True, text=True).stdout
    assert "model_kernel_code" in nm
    # the descriptor's target follows the PTX (model_describe()->triple)
    strings = subprocess.run(["strings", str(out / "libmodel.a")], capture_output=True,
                             text=True).stdout.splitlines()
    assert "cuda sm_80" in strings and "cuda sm_90" not in strings
    _compile("mlp", out, "cuda")  # a built GPU bundle holds only files aotc knows: replaced
    assert ".target sm_90" in ptx.read_text() and not (out / "libmodel.a").exists()
