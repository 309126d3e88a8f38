"""Bundle writer + C runtime end to end, with a hand-written kernel object (no code generator):
build with make / CMake / a cross compiler, run as a process and through ctypes, check errors."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from aotc.errors import AotcError
from aotc.package import bundle as bundle_mod
from aotc.package.build import (
    BundleError,
    LoadedBundle,
    RunModelError,
    build_bundle,
    run_model_command,
    run_model_process,
)
from aotc.package.bundle import write_bundle
from aotc.package.cpu_check import X86_CHECKABLE, X86_CPUID
from aotc.package.memory_plan import PlanBuffer, plan_memory
from aotc.package.program import BufferRef, Program, Step, TensorInfo

N = 1000  # elements of the float tensors, shape (4, 250)
SHAPE = (4, 250)
W_OFFSET = 64  # the weight tensor sits after 64 bytes of other weights

KERNELS_LL = """
declare void @aotc_parallel_for(ptr, ptr, ptr, i64)

; c[i] = a[i] + b[i] for i in [lo, hi); env = {a, b, c}
define internal void @add_body(ptr %env, i64 %lo, i64 %hi) {
entry:
  %a = load ptr, ptr %env
  %bp = getelementptr ptr, ptr %env, i64 1
  %b = load ptr, ptr %bp
  %cp = getelementptr ptr, ptr %env, i64 2
  %c = load ptr, ptr %cp
  %empty = icmp sge i64 %lo, %hi
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %lo, %entry ], [ %next, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %va = load float, ptr %pa
  %pb = getelementptr float, ptr %b, i64 %i
  %vb = load float, ptr %pb
  %s = fadd float %va, %vb
  %pc = getelementptr float, ptr %c, i64 %i
  store float %s, ptr %pc
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %hi
  br i1 %more, label %loop, label %done
done:
  ret void
}

define i32 @model_k0(ptr %ctx, ptr %bufs, ptr %dims) {
entry:
  %env = alloca [3 x ptr]
  %a = load ptr, ptr %bufs
  %bp = getelementptr ptr, ptr %bufs, i64 1
  %b = load ptr, ptr %bp
  %cp = getelementptr ptr, ptr %bufs, i64 2
  %c = load ptr, ptr %cp
  store ptr %a, ptr %env
  %e1 = getelementptr ptr, ptr %env, i64 1
  store ptr %b, ptr %e1
  %e2 = getelementptr ptr, ptr %env, i64 2
  store ptr %c, ptr %e2
  call void @aotc_parallel_for(ptr %ctx, ptr @add_body, ptr %env, i64 N_ELEMS)
  ret i32 0
}

; out[i] = max(x[i], 0)
define i32 @model_k1(ptr %ctx, ptr %bufs, ptr %dims) {
entry:
  %x = load ptr, ptr %bufs
  %op = getelementptr ptr, ptr %bufs, i64 1
  %o = load ptr, ptr %op
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px
  %pos = fcmp ogt float %v, 0.0
  %r = select i1 %pos, float %v, float 0.0
  %po = getelementptr float, ptr %o, i64 %i
  store float %r, ptr %po
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, N_ELEMS
  br i1 %more, label %loop, label %done
done:
  ret i32 0
}

; out[i] = in[i] * 2 for 3 int64 elements
define i32 @model_k2(ptr %ctx, ptr %bufs, ptr %dims) {
entry:
  %x = load ptr, ptr %bufs
  %op = getelementptr ptr, ptr %bufs, i64 1
  %o = load ptr, ptr %op
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr i64, ptr %x, i64 %i
  %v = load i64, ptr %px
  %d = shl i64 %v, 1
  %po = getelementptr i64, ptr %o, i64 %i
  store i64 %d, ptr %po
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, 3
  br i1 %more, label %loop, label %done
done:
  ret i32 0
}
""".replace("N_ELEMS", str(N))


def kernel_object(triple: str, cpu: str, features: str, name: str = "model") -> tuple[bytes, str]:
    """The kernels above as a PIC object for (triple, cpu, features), named NAME_kI."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=2, reloc="pic", codemodel="default"
    )
    body = KERNELS_LL.replace("@model_k", f"@{name}_k")
    text = f'target datalayout = "{tm.target_data}"\ntarget triple = "{triple}"\n' + body
    mod = llvm.parse_assembly(text)
    mod.verify()
    return tm.emit_object(mod), text


def host_features() -> set[str]:
    return {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}


def make_program(
    name: str = "model",
    triple: str | None = None,
    cpu: str | None = None,
    features: str | None = None,
    cpu_features: list[str] | None = None,
) -> tuple[Program, np.ndarray]:
    llvm.initialize_native_target()
    triple = triple or llvm.get_process_triple()
    cpu = cpu or llvm.get_host_cpu_name()
    features = features if features is not None else llvm.get_host_cpu_features().flatten()
    obj, ll = kernel_object(triple, cpu, features, name)
    if cpu_features is None:
        cpu_features = [f for f in ("avx", "avx2", "fma") if f in host_features()]
    w = np.linspace(-1.0, 1.0, N, dtype=np.float32).reshape(SHAPE)
    weights = bytes(range(W_OFFSET)) + w.tobytes()
    weights += b"\0" * (-len(weights) % 64)
    plan = plan_memory([PlanBuffer("t", N * 4, 0, 1)])
    t = BufferRef("arena", plan.offsets["t"])
    x, ids = BufferRef("input", 0), BufferRef("input", 1)
    y, z, ids2 = BufferRef("output", 0), BufferRef("output", 1), BufferRef("output", 2)
    k0, k1, k2 = f"{name}_k0", f"{name}_k1", f"{name}_k2"
    program = Program(
        name=name,
        inputs=[TensorInfo("x", "float32", SHAPE), TensorInfo("ids", "int64", (3,))],
        outputs=[
            TensorInfo("y", "float32", SHAPE),
            TensorInfo("z", "float32", SHAPE),
            TensorInfo("ids_out", "int64", (3,)),
        ],
        steps=[
            Step(k0, (x, BufferRef("weight", W_OFFSET), t), "add"),
            Step(k1, (t, y), "relu"),
            Step(k0, (y, x, z), "add_1"),
            Step(k2, (ids, ids2), "double"),
        ],
        arena_size=plan.arena_size,
        arena_lower_bound=plan.lower_bound,
        arena_no_reuse=plan.no_reuse,
        weights=weights,
        kernel_object=obj,
        kernel_ll=ll,
        triple=triple,
        cpu=cpu,
        cpu_features=cpu_features,
    )
    return program, w


def expected(x: np.ndarray, w: np.ndarray, ids: np.ndarray) -> list[np.ndarray]:
    y = np.maximum(x + w, 0).astype(np.float32)
    return [y, (y + x).astype(np.float32), ids * 2]


def random_inputs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32), rng.integers(-100, 100, 3).astype(np.int64)]


def check_outputs(outs: list[np.ndarray], ins: list[np.ndarray], w: np.ndarray) -> None:
    want = expected(ins[0], w, ins[1])
    assert len(outs) == len(want)
    for got, ref in zip(outs, want, strict=True):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


@pytest.fixture(scope="module")
def host_program() -> tuple[Program, np.ndarray]:
    return make_program()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, host_program) -> Path:
    """The incbin bundle, built with make (all + shared)."""
    out = tmp_path_factory.mktemp("incbin") / "bundle"
    write_bundle(host_program[0], out)
    build_bundle(out)
    build_bundle(out, target="shared")
    return out


# ---- contents ----


def test_bundle_files_and_header(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    for f in [
        "model.h", "model.c", "model_kernels.o", "model_kernels.ll", "model_weights.bin",
        "model_weights.S", "aotc_api.h", "aotc_runtime.h", "aotc_runtime.c", "aotc_pool.c",
        "aotc_npy.c", "aotc_npy.h", "run_model.c", "Makefile", "CMakeLists.txt", "README.md",
        "aotc_bundle.json", "libmodel.a", "libmodel.so", "run_model",
    ]:
        assert f in names, f
    header = (built / "model.h").read_text()
    assert header.startswith("/* Generated by aotc")
    for macro in [
        "#define MODEL_WORKSPACE_SIZE 4032", "#define MODEL_WORKSPACE_ALIGN 64",
        "#define MODEL_NUM_INPUTS 2", "#define MODEL_NUM_OUTPUTS 3",
        "#define MODEL_INPUT_0_SIZE 4000", "#define MODEL_INPUT_1_SIZE 24",
        "#define MODEL_OUTPUT_2_SIZE 24",
    ]:
        assert macro in header
    assert '"x" float32[4, 250], 4000 bytes' in header
    for fn in ["model_run(", "model_create(", "model_run_context(", "model_destroy(",
               "model_context_num_threads(", "model_status_message(", "model_describe("]:
        assert fn in header
    assert "one context per thread" in header
    source = (built / "model.c").read_text()
    assert source.count("extern int32_t model_k0") == 1  # kernels declared once
    readme = (built / "README.md").read_text()
    assert "one context per thread" in readme and "model_create(&ctx, 0)" in readme
    assert not list(built.parent.glob(".bundle*"))  # no temporary folders left


def _nm(path: Path, *flags: str) -> str:
    return subprocess.run(["nm", *flags, str(path)], capture_output=True, text=True).stdout


def test_weights_aligned_and_only_the_api_exported(built: Path) -> None:
    address = re.search(r"^([0-9a-f]+) [rR] model_weights$", _nm(built / "libmodel.so"), re.M)
    assert address and int(address.group(1), 16) % 64 == 0
    # exported API only: kernels, weights and the runtime stay inside the shared library
    dyn = _nm(built / "libmodel.so", "-D", "--defined-only")
    assert "model_run_context" in dyn and "model_create_with_weights" in dyn
    assert "aotc_parallel_for" not in dyn and "model_weights" not in dyn and "model_k0" not in dyn


# ---- run_model as a process ----


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_run_model_matches_numpy(built: Path, host_program, threads: int) -> None:
    ins = random_inputs(threads)
    outs = run_model_process(built, ins, threads=threads)
    check_outputs(outs, ins, host_program[1])


def npy_files(folder: Path, ins: list[np.ndarray]) -> tuple[list[str], list[str]]:
    """The inputs saved as in0.npy, ... in `folder`; the paths of out0.npy, ... beside them."""
    paths = []
    for i, x in enumerate(ins):
        np.save(folder / f"in{i}.npy", x)
        paths.append(str(folder / f"in{i}.npy"))
    return paths, [str(folder / f"out{i}.npy") for i in range(3)]


def test_bench_output(built: Path, tmp_path: Path) -> None:
    ins = random_inputs(7)
    paths, outs = npy_files(tmp_path, ins)
    proc = run_model_command(built, ["--bench", "5", "--threads", "2", *paths, *outs])
    assert proc.returncode == 0, proc.stderr
    m = re.fullmatch(
        r"latency ms: min (\d+\.\d{3}) median (\d+\.\d{3}) max (\d+\.\d{3}) \(5 runs, 2 threads\)\n",
        proc.stdout,
    )
    assert m, proc.stdout
    lo, med, hi = map(float, m.groups())
    assert lo <= med <= hi
    check_outputs([np.load(p) for p in outs], ins, np.linspace(-1, 1, N, dtype=np.float32).reshape(SHAPE))


def test_thread_count_from_environment(built: Path, tmp_path: Path) -> None:
    ins = random_inputs(8)
    paths = []
    for i, x in enumerate(ins):
        np.save(tmp_path / f"in{i}.npy", x)
        paths.append(str(tmp_path / f"in{i}.npy"))
    outs = [str(tmp_path / f"out{i}.npy") for i in range(3)]
    proc = run_model_command(built, ["--bench", "1", *paths, *outs], env={"AOTC_NUM_THREADS": "3"})
    assert "(1 runs, 3 threads)" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda ins: [ins[0].astype(np.float64), ins[1]], r"input 0 'x' .*expected float32\[4, 250\], got float64\[4, 250\]"),
        (lambda ins: [ins[0].reshape(2, 500), ins[1]], r"expected float32\[4, 250\], got float32\[2, 500\]"),
        (lambda ins: [ins[0], ins[1].astype(np.int32)], r"input 1 'ids'.*got int32\[3\]"),
        (lambda ins: [ins[0], ins[1].astype(">i8")], r"big-endian"),
        (lambda ins: [np.asfortranarray(ins[0]), ins[1]], r"Fortran-order"),
        (lambda ins: [ins[0].astype(np.float16), ins[1]], r"got float16\[4, 250\]"),
        (lambda ins: [ins[0].astype(np.complex64), ins[1]], r"got <c8\[4, 250\]"),
        (lambda ins: [ins[0]], r"expected 2 input and 3 output files"),
    ],
)
def test_run_model_rejects_bad_inputs(built: Path, tmp_path: Path, bad, message: str) -> None:
    ins = bad(random_inputs(3))
    paths = []
    for i, x in enumerate(ins):
        np.save(tmp_path / f"in{i}.npy", x, allow_pickle=False)
        paths.append(str(tmp_path / f"in{i}.npy"))
    outs = [str(tmp_path / f"out{i}.npy") for i in range(3)]
    proc = run_model_command(built, [*paths, *outs])
    assert proc.returncode == 2
    assert re.search(message, proc.stderr), proc.stderr


def test_run_model_missing_file(built: Path, tmp_path: Path) -> None:
    proc = run_model_command(built, ["nope.npy", "nope2.npy", "a.npy", "b.npy", "c.npy"])
    assert proc.returncode == 2 and "cannot open" in proc.stderr


def test_run_model_process_raises(built: Path) -> None:
    ins = random_inputs(1)
    with pytest.raises(RunModelError) as err:
        run_model_process(built, [ins[0].astype(np.float64), ins[1]])
    assert err.value.returncode == 2


# ---- the C API through ctypes ----


def test_loaded_bundle_two_threads(built: Path, host_program) -> None:
    w = host_program[1]
    bundles = [LoadedBundle(built), LoadedBundle(built)]
    errors: list[BaseException] = []

    def work(b: LoadedBundle, seed: int) -> None:
        try:
            for k in range(30):
                ins = random_inputs(seed * 1000 + k)
                check_outputs(b.run(ins), ins, w)
        except BaseException as e:  # reported below
            errors.append(e)

    for b in bundles:
        b.create(2)
        assert b.num_threads == 2
    threads = [threading.Thread(target=work, args=(b, i)) for i, b in enumerate(bundles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for b in bundles:
        b.destroy()
    assert not errors, errors


def test_loaded_bundle_describe_and_run_single(built: Path, host_program) -> None:
    b = LoadedBundle(built)
    assert [t.name for t in b.inputs] == ["x", "ids"]
    assert [t.shape for t in b.outputs] == [SHAPE, SHAPE, (3,)]
    assert b.workspace_size == 4032 and b.workspace_align == 64
    ins = random_inputs(11)
    check_outputs(b.run_single(ins), ins, host_program[1])


def test_benchmark_engine_keeps_the_arrays_it_points_into(built: Path, host_program) -> None:
    """benchmarks/timing.aotc_engine binds pointer arrays once; the arrays they point into live
    as long as the engine, even when the caller drops the outputs it returned (spin_study did:
    the bundle then wrote into freed memory, and the process died in malloc later)."""
    import gc
    import sys
    import weakref

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from timing import aotc_engine

    b = LoadedBundle(built)
    b.create()
    ins = random_inputs(11)
    engine, outs = aotc_engine(b, ins)
    alive = [weakref.ref(o) for o in outs]
    del outs
    gc.collect()
    assert all(ref() is not None for ref in alive)
    engine()
    check_outputs([ref() for ref in alive], ins, host_program[1])


def test_c_api_error_codes(built: Path) -> None:
    b = LoadedBundle(built)
    ins = random_inputs(0)
    outs = [np.empty(SHAPE, np.float32), np.empty(SHAPE, np.float32), np.empty(3, np.int64)]
    in_ptrs = (ctypes.c_void_p * 2)(*[a.ctypes.data for a in ins])
    out_ptrs = (ctypes.c_void_p * 3)(*[a.ctypes.data for a in outs])
    ws = np.zeros(4032 + 128, np.uint8)
    aligned = ws.ctypes.data + (-ws.ctypes.data % 64)
    assert b.run_raw(in_ptrs, out_ptrs, aligned) == 0
    assert b.run_raw(None, out_ptrs, aligned) == 1
    assert b.run_raw(in_ptrs, None, aligned) == 1
    assert b.run_raw(in_ptrs, out_ptrs, None) == 1
    assert b.run_raw((ctypes.c_void_p * 2)(ins[0].ctypes.data, None), out_ptrs, aligned) == 1
    assert b.run_raw(in_ptrs, (ctypes.c_void_p * 3)(None, None, None), aligned) == 1
    assert b.run_raw(in_ptrs, out_ptrs, aligned + 8) == 3
    assert "NULL" in b.status_message(1)
    assert "aligned" in b.status_message(3)
    assert b.status_message(12345) == "unknown status code"
    messages = {b.status_message(i) for i in range(11)}
    assert len(messages) == 11
    with pytest.raises(BundleError) as err:
        b.create(-1)
    assert err.value.status == 7
    create = b.lib.model_create
    create.argtypes = [ctypes.c_void_p, ctypes.c_int]
    assert create(None, 1) == 1
    run_context = b.lib.model_run_context
    run_context.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert run_context(None, in_ptrs, out_ptrs) == 1
    b.lib.model_destroy(None)  # no-op
    assert b.lib.model_context_num_threads(None) == 0


def test_caller_provided_weights(built: Path, host_program) -> None:
    """NAME_create_with_weights / NAME_run_with_weights run on the bytes of NAME_weights.bin
    (here altered, to see that they are the ones read) and check them first."""
    b = LoadedBundle(built)
    blob = (built / "model_weights.bin").read_bytes()
    raw = np.zeros(len(blob) + 128, np.uint8)
    start = -raw.ctypes.data % 64
    weights = raw[start:start + len(blob)]
    weights[:] = np.frombuffer(blob, np.uint8)
    w = weights[W_OFFSET:W_OFFSET + 4 * N].view(np.float32)
    w *= 2  # other weights than the linked-in ones
    create = b.lib.model_create_with_weights
    create.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64]
    ctx = ctypes.c_void_p()
    p = weights.ctypes.data
    assert create(ctypes.byref(ctx), 1, p, len(blob) - 64) == 2  # bad size
    assert create(ctypes.byref(ctx), 1, p + 4, len(blob)) == 10  # misaligned
    assert create(ctypes.byref(ctx), 1, None, len(blob)) == 1
    assert not ctx
    assert "aligned" in b.status_message(10)
    assert create(ctypes.byref(ctx), 2, p, len(blob)) == 0
    ins = random_inputs(3)
    outs = [np.empty(SHAPE, np.float32), np.empty(SHAPE, np.float32), np.empty(3, np.int64)]
    run_context = b.lib.model_run_context
    run_context.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    in_ptrs = (ctypes.c_void_p * 2)(*[a.ctypes.data for a in ins])
    out_ptrs = (ctypes.c_void_p * 3)(*[a.ctypes.data for a in outs])
    assert run_context(ctx, in_ptrs, out_ptrs) == 0
    b.lib.model_destroy(ctx)
    check_outputs(outs, ins, w.reshape(SHAPE))
    run = b.lib.model_run_with_weights
    run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_uint64]
    ws = np.zeros(4032 + 128, np.uint8)
    aligned = ws.ctypes.data + (-ws.ctypes.data % 64)
    assert run(in_ptrs, out_ptrs, aligned, p, 1) == 2
    assert run(in_ptrs, out_ptrs, aligned, p, len(blob)) == 0
    check_outputs(outs, ins, w.reshape(SHAPE))


def test_run_model_reads_the_weights_file(built: Path, tmp_path: Path, host_program) -> None:
    """run_model links no copy of the weights: it reads NAME_weights.bin beside itself (from any
    current folder), or --weights FILE; a missing or foreign file is exit 2 with a message."""
    assert "model_weights" not in _nm(built / "run_model")
    exe = tmp_path / "copy" / "run_model"
    exe.parent.mkdir()
    shutil.copy(built / "run_model", exe)
    ins = random_inputs(4)
    paths, outs = npy_files(tmp_path, ins)
    proc = subprocess.run([str(exe), *paths, *outs], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "model_weights.bin" in proc.stderr
    (tmp_path / "short.bin").write_bytes(b"\0" * 10)
    proc = subprocess.run([str(exe), "--weights", str(tmp_path / "short.bin"), *paths, *outs],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "another bundle" in proc.stderr
    proc = subprocess.run([str(exe), "--weights", str(built / "model_weights.bin"), *paths,
                           *outs], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    check_outputs([np.load(p) for p in outs], ins, host_program[1])
    proc = subprocess.run([str(built / "run_model"), *paths, *outs], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_built_folder_holds_the_weights_twice_at_most(built: Path) -> None:
    """The blob the sources hold and the self-contained static library: no weights object is
    kept, and run_model links none (it reads the blob)."""
    blob = (built / "model_weights.bin").read_bytes()[W_OFFSET:W_OFFSET + 4 * N]
    holders = sorted(p.name for p in built.iterdir() if p.is_file() and blob in p.read_bytes())
    assert holders == ["libmodel.a", "libmodel.so", "model_weights.bin"]  # .so: `make shared`


# ---- unsupported CPU ----


def test_unsupported_cpu_is_an_error(tmp_path: Path) -> None:
    if not llvm.get_process_triple().startswith("x86_64"):
        pytest.skip("x86-64 only")
    missing = [f for f in X86_CHECKABLE if f not in host_features()]
    if not missing:
        pytest.skip("this CPU has every checkable feature")
    program, _ = make_program(cpu_features=["avx", missing[-1]])
    out = tmp_path / "b"
    write_bundle(program, out)
    build_bundle(out, target="run_model")
    assert f'__builtin_cpu_supports("{missing[-1]}")' in (out / "model.c").read_text()
    with pytest.raises(RunModelError) as err:
        run_model_process(out, random_inputs(0))
    assert err.value.returncode == 2  # another machine: a user error
    assert f"this CPU lacks {missing[-1]}" in err.value.output


@pytest.mark.parametrize("feature", sorted(X86_CPUID))
def test_features_older_compilers_cannot_name_are_checked_by_cpuid(feature: str,
                                                                   tmp_path: Path) -> None:
    """A feature that LLVM uses where the host has it but that older compilers'
    __builtin_cpu_supports cannot name (AVX512-FP16, AVX512-BF16) is read from CPUID: a bundle
    compiled on a host with it runs there, and on a CPU without it stops with a user error
    instead of faulting in a kernel. The result follows LLVM's own reading of the host."""
    if not llvm.get_process_triple().startswith("x86_64"):
        pytest.skip("x86-64 only")
    program, _ = make_program(cpu_features=["avx2", feature])
    out = tmp_path / "b"
    write_bundle(program, out)
    source = (out / "model.c").read_text()
    assert "#include <cpuid.h>" in source and "__get_cpuid_count(7, " in source
    assert "not checkable" not in source
    build_bundle(out, target="run_model")
    ins = random_inputs(0)
    if feature in host_features():
        run_model_process(out, ins)
        return
    with pytest.raises(RunModelError) as err:
        run_model_process(out, ins)
    assert err.value.returncode == 2
    assert f"this CPU lacks {feature}" in err.value.output


# ---- other builds ----


def test_c_weights_format(tmp_path: Path, host_program) -> None:
    out = tmp_path / "cw"
    write_bundle(host_program[0], out, weights_format="c")
    assert (out / "model_weights.c").exists() and not (out / "model_weights.S").exists()
    build_bundle(out)
    ins = random_inputs(5)
    check_outputs(run_model_process(out, ins, threads=2), ins, host_program[1])
    build_bundle(out, target="clean")
    assert (out / "model_kernels.o").exists() and not (out / "run_model").exists()
    assert not (out / "libmodel.a").exists()


def test_readme_example_compiles_and_runs(built: Path, tmp_path: Path) -> None:
    readme = (built / "README.md").read_text()
    example = re.search(r"```c\n(.*?)```", readme, re.S)
    assert example and len(example.group(1).splitlines()) <= 16
    (tmp_path / "app.c").write_text(example.group(1))
    exe = tmp_path / "app"
    proc = subprocess.run(
        ["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{built}", "-o", str(exe),
         str(tmp_path / "app.c"), str(built / "libmodel.a"), "-lpthread", "-lm"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert subprocess.run([str(exe)]).returncode == 0


def test_sanitizer_build(tmp_path: Path, host_program) -> None:
    out = tmp_path / "asan"
    write_bundle(host_program[0], out)
    flags = "-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined"
    build_bundle(out, cflags=flags, ldflags="-fsanitize=address,undefined")
    env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    for threads in (1, 2, 4):
        ins = random_inputs(threads)
        check_outputs(run_model_process(out, ins, threads=threads, env=env), ins, host_program[1])
    proc = run_model_command(out, ["--threads", "2", "x.npy"], env=env)  # usage error path
    assert proc.returncode == 2 and "Sanitizer" not in proc.stderr


def test_cmake_build(tmp_path: Path, host_program) -> None:
    if shutil.which("cmake") is None:
        pytest.skip("cmake missing")
    out = tmp_path / "cm"
    write_bundle(host_program[0], out)
    build = tmp_path / "build"
    for cmd in (["cmake", "-S", str(out), "-B", str(build)],
                ["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (build / "libmodel.a").exists()
    ins = random_inputs(9)
    paths = []
    for i, x in enumerate(ins):
        np.save(tmp_path / f"in{i}.npy", x)
        paths.append(str(tmp_path / f"in{i}.npy"))
    outs = [str(tmp_path / f"out{i}.npy") for i in range(3)]
    proc = subprocess.run([str(build / "run_model"), *paths, *outs], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    check_outputs([np.load(p) for p in outs], ins, host_program[1])


def test_custom_name(tmp_path: Path) -> None:
    program, w = make_program(name="net7")
    out = tmp_path / "n"
    write_bundle(program, out)
    build_bundle(out)
    assert (out / "libnet7.a").exists() and "#define NET7_NUM_INPUTS 2" in (out / "net7.h").read_text()
    ins = random_inputs(4)
    check_outputs(run_model_process(out, ins), ins, w)


@pytest.mark.cross
def test_aarch64_cross_build_under_qemu(tmp_path: Path) -> None:
    tools = ["aarch64-linux-gnu-gcc", "qemu-aarch64"]
    if any(shutil.which(t) is None for t in tools) or not Path("/usr/aarch64-linux-gnu").exists():
        pytest.skip("needs aarch64-linux-gnu-gcc, qemu-aarch64 and /usr/aarch64-linux-gnu")
    program, w = make_program(
        triple="aarch64-unknown-linux-gnu", cpu="generic", features="+neon", cpu_features=["neon"]
    )
    out = tmp_path / "arm"
    write_bundle(program, out)
    build_bundle(out, cc="aarch64-linux-gnu-gcc")
    runner = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
    for threads in (1, 2):
        ins = random_inputs(20 + threads)
        check_outputs(run_model_process(out, ins, threads=threads, runner=runner), ins, w)


def test_wrong_architecture_is_a_compile_error(tmp_path: Path) -> None:
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc")
    program, _ = make_program()
    out = tmp_path / "x"
    write_bundle(program, out)
    proc = subprocess.run(["aarch64-linux-gnu-gcc", "-c", "-o", "/dev/null", "model.c"],
                          cwd=out, capture_output=True, text=True)
    if program.triple.startswith("x86_64"):
        assert proc.returncode != 0 and "compiled for x86_64" in proc.stderr


# ---- the writer's folder handling ----


def test_failed_write_leaves_nothing(tmp_path: Path, host_program, monkeypatch) -> None:
    calls = []

    def failing(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 4:
            raise OSError("disk full")
        path.write_bytes(data)

    monkeypatch.setattr(bundle_mod, "_write_file", failing)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        write_bundle(host_program[0], out)
    assert list(tmp_path.iterdir()) == []
    calls.clear()
    with pytest.raises(OSError, match="disk full"):  # missing parents are removed again
        write_bundle(host_program[0], tmp_path / "a" / "b" / "out")
    assert list(tmp_path.iterdir()) == []

    write_bundle(host_program[0], out)  # an existing bundle survives a failed rewrite
    before = sorted(p.name for p in out.iterdir())
    calls.clear()
    with pytest.raises(OSError, match="disk full"):
        write_bundle(host_program[0], out)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert sorted(p.name for p in out.iterdir()) == before


def test_a_built_bundle_is_replaced(tmp_path: Path, host_program) -> None:
    out = tmp_path / "out"
    write_bundle(host_program[0], out)
    build_bundle(out)
    (out / "model.h").write_text("stale")
    write_bundle(host_program[0], out)
    assert (out / "model.h").read_text() != "stale" and not (out / "run_model").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    empty = tmp_path / "empty"
    empty.mkdir()
    write_bundle(host_program[0], empty)
    assert (empty / "model.h").exists()


def test_a_folder_holding_other_files_is_never_replaced(tmp_path: Path, host_program) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(AotcError, match="did not write"):
        write_bundle(host_program[0], plain)
    assert [p.name for p in plain.iterdir()] == ["notes.txt"]
    bundle = tmp_path / "bundle"
    write_bundle(host_program[0], bundle)
    (bundle / "app.c").write_text("int main(void) { return 0; }")
    before = sorted(p.name for p in bundle.iterdir())
    with pytest.raises(AotcError, match="app.c"):
        write_bundle(host_program[0], bundle)
    assert sorted(p.name for p in bundle.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "plain"]


def test_invalid_programs_are_rejected(tmp_path: Path, host_program) -> None:
    program = host_program[0]
    out = tmp_path / "bad"
    for name in ["1model", "my-model", "int", "aotc_x"]:
        with pytest.raises(AotcError):
            write_bundle(Program(**{**program.__dict__, "name": name}), out)
    too_many = Step("model_k0", tuple(BufferRef("input", 0) for _ in range(65)), "n")
    with pytest.raises(ValueError, match="arguments"):
        write_bundle(Program(**{**program.__dict__, "steps": [too_many]}), out)
    bad_ref = Step("model_k0", (BufferRef("input", 2),), "n")
    with pytest.raises(ValueError, match="out of range"):
        write_bundle(Program(**{**program.__dict__, "steps": [bad_ref]}), out)
    with pytest.raises(AotcError, match="weights format"):
        write_bundle(program, out, weights_format="zip")
    assert list(tmp_path.iterdir()) == []
