"""The ONNX backend node tests (the cases whose generators the onnx wheel ships) through aotc.

Run from the repository root:

    python -m tests.conformance.runner                      # every case, in-process, a summary
    python -m tests.conformance.runner --filter '^test_conv' -v   # some cases, one line each
    python -m tests.conformance.runner --write-status --update-expected   # STATUS.md + list
    python -m tests.conformance.runner --path c     # the full C path (~4 min on 2 cores; not in CI)
    python -m tests.conformance.runner --path opencl --write-status --update-expected
                                                    # the GPU target on an OpenCL device (PoCL)
    python -m tests.conformance.runner --path cuda --write-status   # CUDA's kernels, ~25 min

Each case's graph inputs are bound to the shapes of its input arrays (inputs whose declared
shape is already static are left alone), and the model goes through one of three paths:
- `inprocess` (default; what test_conformance.py runs): frontend, passes and compiler
  into a `Program` whose kernel object runs in this process (`tests/program_runner.py`);
- `c`: `aotc optimize` into a bundle (`aotc.driver.optimize_model`), `make shared`, and the
  bundle's `NAME_run_context` through ctypes (`aotc.package.loaded.LoadedBundle`);
- `opencl`: frontend and passes as in-process, compiled for `gpu_target("opencl")`, the
  Program run on the first OpenCL device (PoCL on a machine without a GPU) through pyopencl
  (`targets/gpu/opencl_program.py`). A case the GPU target does not take yet (control flow,
  an element type its renderer lacks) is refused like any other;
- `cuda`: compiled for `gpu_target("cuda")` (PTX by nvcc, checked by ptxas: nvcc must be
  installed) and its kernels run in their OpenCL form (`GpuModule.in_dialect`) on the OpenCL
  device, as above (~10 s a case for nvcc; not in the tests).
Outcomes: `pass` (every output's shape and dtype as expected, values within the case's
rtol/atol as onnx's backend runner compares them: `np.testing.assert_allclose`, NaN positions
equal; integers, bools and strings exactly; elements whose value the spec leaves undefined, a
float cast to a fixed-point type out of range, are not compared), `refused` (an `AotcError`: its message's first
line is the reason; or a run that a run-time check stopped, status 13), `wrong` (a result that differs), `crash` (any other exception, a worker
process that died, or a case past its time limit: each a bug in aotc).

Cases run on `--jobs` worker processes (default: the number of cores), forked from this one
after the cases are collected. A worker that runs past a case's time limit exits; a worker that
dies takes the pool with it, so the cases it was running are run again alone to find the one
that killed it, and the rest are resubmitted.
`--write-status` writes STATUS.md (totals, refusal reasons grouped, one row per operator;
`--path opencl`: STATUS_opencl.md, which also lists the in-process passes it refuses);
`--update-expected` writes expected_passes.txt (`--path opencl`: expected_passes_opencl.txt;
with `--filter`: only the filtered cases' entries change), the lists test_conformance.py
holds aotc to. The command exits with 1 when a case is wrong or crashed or an expected pass
of the path no longer passes.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import re
import shlex
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _p in (str(ROOT / "tests"), str(ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

STATUS = HERE / "STATUS.md"
EXPECTED = HERE / "expected_passes.txt"
# The GPU path's own status and list (its passes are a subset of the in-process ones: what
# the GPU target refuses is listed there, by reason)
STATUS_FILES = {"inprocess": STATUS, "c": STATUS, "opencl": HERE / "STATUS_opencl.md",
                "cuda": HERE / "STATUS_cuda.md"}
EXPECTED_FILES = {"inprocess": EXPECTED, "opencl": HERE / "expected_passes_opencl.txt"}
OUTCOMES = ("pass", "refused", "wrong", "crash")
PATHS = ("inprocess", "c", "opencl", "cuda")
# The status a run returns when one of its run-time checks refuses the input values
# (AOTC_ERR_INPUT_VALUE, runtime_c/aotc_api.h): a refusal, made when the model runs.
INPUT_VALUE_STATUS = 13

# Seconds a case may take (compile + run) before it counts as a crash (a hang).
TIME_LIMITS = {"inprocess": 120.0, "c": 600.0, "opencl": 300.0, "cuda": 300.0}
# Paths whose workers are spawned, not forked: an OpenCL platform (PoCL's threads) does not
# survive a fork, and the process that starts the pool may hold one (pytest's, after the GPU
# tests); a spawned worker collects the cases again (a few seconds).
SPAWNED = ("opencl", "cuda")


@dataclass
class Result:
    name: str
    outcome: str  # one of OUTCOMES
    reason: str = ""  # refused: the AotcError's first line; wrong/crash: what went wrong
    seconds: float = 0.0


# -- the cases -------------------------------------------------------------------------------

_CASES: dict[str, object] = {}  # name -> onnx's TestCase, filled before workers fork


def collect(pattern: str | None = None) -> dict[str, object]:
    """The node test cases by name (sorted), those whose name matches `pattern` (re.search)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    regex = re.compile(pattern) if pattern else None
    return {c.name: c for c in sorted(cases, key=lambda c: c.name)
            if regex is None or regex.search(c.name)}


def _base_name(name: str) -> str:
    """A function-expanded case's name without its suffix (`_expanded`, `_expanded_ver18`)."""
    return re.sub(r"_expanded(_ver\d+)?$", "", name)


def operator_of(case, cases: dict[str, object] | None = None) -> str:
    """The operator a case tests: its one node's (domain-qualified outside the default domain);
    an expanded case (the function body of an operator) counts as its operator's."""
    nodes = case.model.graph.node
    if len(nodes) != 1 and cases is not None and _base_name(case.name) in cases:
        nodes = cases[_base_name(case.name)].model.graph.node
    if len(nodes) != 1:
        return "(several nodes)"
    node = nodes[0]
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def _array(value):
    """A data set entry as numpy (TensorProto and numpy scalars too); sequences stay lists."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_array(v) for v in value]
    return value if value is None else np.asarray(value)


def case_data(case) -> tuple[list, list]:
    """The case's (inputs, expected outputs), the first (and in onnx 1.23 only) data set."""
    inputs, outputs = case.data_sets[0]
    return [_array(x) for x in inputs], [_array(y) for y in outputs]


def input_shapes(model: onnx.ModelProto, inputs: list) -> dict[str, tuple[int, ...]]:
    """Shapes to bind: each graph input's array shape where the declared shape is not static."""
    shapes = {}
    for value, array in zip(model.graph.input, inputs, strict=False):
        if not isinstance(array, np.ndarray):
            continue  # a sequence or an optional: nothing to bind (aotc refuses them)
        tensor = value.type.tensor_type
        static = value.type.HasField("tensor_type") and tensor.HasField("shape") and all(
            d.HasField("dim_value") for d in tensor.shape.dim)
        if not static:
            shapes[value.name] = tuple(array.shape)
    return shapes


# -- comparing -------------------------------------------------------------------------------

def _half_eps(dtype: np.dtype) -> float:
    """Machine epsilon of float16 or bfloat16 (ml_dtypes')."""
    if dtype == np.float16:
        return float(np.finfo(np.float16).eps)
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).eps)


def compare(got: list[np.ndarray], want: list, rtol: float, atol: float) -> str:
    """'' when `got` matches the expected outputs as onnx's backend runner checks them, else
    what differs first."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if not isinstance(w, np.ndarray):
            return f"output {i}: expected a {type(w).__name__}, got an array"
        if g.shape != w.shape:
            return f"output {i}: shape {g.shape}, expected {w.shape}"
        if g.dtype != w.dtype:
            return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        if w.dtype.kind in "biuUSO":
            bad = int(np.count_nonzero(g != w))
            if bad:
                return f"output {i}: {bad} of {w.size} elements differ (exact comparison)"
            continue
        tol_r, tol_a = rtol, atol
        if w.dtype.itemsize == 2 and (w.dtype.kind == "f" or w.dtype.kind not in "fc"):
            # float16 / bfloat16: the reference rounds after every numpy step, aotc (and
            # onnxruntime) compute in float32 and round once; a case's rtol can be finer than the
            # type itself (bfloat16 resolves 7.8e-3), so allow two units of the type's precision
            eps = float(_half_eps(w.dtype))
            tol_r, tol_a = max(rtol, 2 * eps), max(atol, 2 * eps)
        if w.dtype.kind not in "fc":  # ml_dtypes floats (bfloat16, fp8): as onnx's runner
            g, w = g.astype(np.float32), w.astype(np.float32)
        try:
            np.testing.assert_allclose(g, w, rtol=tol_r, atol=tol_a)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return f"output {i}: " + "; ".join(lines[1:4])
    return ""


def _bind_arrays(infos, model: onnx.ModelProto, inputs: list) -> tuple[list[np.ndarray], str]:
    """The case's arrays in the order of the compiled inputs `infos` (name, dtype, shape), or
    '' and what does not match (a compiled interface that differs from the model's)."""
    from aotc.package.program import DTYPES

    by_name = {v.name: a for v, a in zip(model.graph.input, inputs, strict=False)}
    arrays = []
    for info in infos:
        if info.name not in by_name:
            return [], f"compiled input '{info.name}' is not an input of the model"
        a = by_name[info.name]
        want = np.dtype(DTYPES[info.dtype][1])
        if not isinstance(a, np.ndarray) or a.dtype != want or a.shape != tuple(info.shape):
            return [], (f"compiled input '{info.name}' is {info.dtype}{list(info.shape)}, the "
                        f"case's array {getattr(a, 'dtype', type(a).__name__)}"
                        f"{list(getattr(a, 'shape', ()))}")
        arrays.append(a)
    return arrays, ""


def _order_outputs(infos, model: onnx.ModelProto, got: list[np.ndarray]) -> list[np.ndarray]:
    """Outputs in the model's order (by name; in the compiled order if names do not match)."""
    names = [o.name for o in infos]
    wanted = [o.name for o in model.graph.output]
    if sorted(names) != sorted(wanted):
        return got
    return [got[names.index(n)] for n in wanted]


# -- the two paths ---------------------------------------------------------------------------

def _run_inprocess(case, inputs: list, workdir: Path) -> tuple[list[np.ndarray] | None, str]:
    from program_runner import compile_onnx, run_program

    program = compile_onnx(case.model, input_shapes(case.model, inputs))
    arrays, problem = _bind_arrays(program.inputs, case.model, inputs)
    if problem:
        return None, problem
    return _order_outputs(program.outputs, case.model, run_program(program, arrays)), ""


def _run_c(case, inputs: list, workdir: Path) -> tuple[list[np.ndarray] | None, str]:
    from aotc.driver import optimize_model
    from aotc.package.build import build_bundle
    from aotc.package.loaded import LoadedBundle

    model_dir = workdir / "model"
    model_dir.mkdir()
    onnx.save(case.model, str(model_dir / "model.onnx"))
    bundle = workdir / "bundle"
    optimize_model(model_dir / "model.onnx", bundle,
                   input_shapes=input_shapes(case.model, inputs))
    build_bundle(bundle, target="shared")
    loaded = LoadedBundle(bundle)
    arrays, problem = _bind_arrays(loaded.inputs, case.model, inputs)
    if problem:
        return None, problem
    with loaded:
        loaded.create(1)
        return _order_outputs(loaded.outputs, case.model, loaded.run(arrays)), ""


def _run_gpu(case, inputs: list, target: str) -> tuple[list[np.ndarray] | None, str]:
    """The case compiled for the GPU target `target`, its kernels run in their OpenCL form
    (a CUDA module with the OpenCL prelude) on the OpenCL device."""
    from dataclasses import replace

    from program_runner import load_graph

    from aotc.compiler import compile_model
    from targets.gpu.opencl_program import run_program
    from targets.gpu.target import gpu_target

    graph = load_graph(case.model, input_shapes(case.model, inputs))
    program = compile_model(graph, gpu_target(target))
    assert program.gpu is not None
    if program.gpu.dialect != "opencl":
        program = replace(program, gpu=program.gpu.in_dialect("opencl"))
    arrays, problem = _bind_arrays(program.inputs, case.model, inputs)
    if problem:
        return None, problem
    return _order_outputs(program.outputs, case.model, run_program(program, arrays)), ""


def _run_opencl(case, inputs: list, workdir: Path) -> tuple[list[np.ndarray] | None, str]:
    return _run_gpu(case, inputs, "opencl")


def _run_cuda(case, inputs: list, workdir: Path) -> tuple[list[np.ndarray] | None, str]:
    return _run_gpu(case, inputs, "cuda")


RUNNERS: dict[str, Callable] = {"inprocess": _run_inprocess, "c": _run_c,
                                "opencl": _run_opencl, "cuda": _run_cuda}


# Cases whose expected outputs carry the reference's float32 rounding noise where the exact
# value is 0, beyond the case's absolute tolerance (onnxruntime fails them too): their
# absolute tolerance becomes a few units of float32 precision of the largest expected output.
REFERENCE_NOISE = {
    "test_dft_inverse_opset19": "numpy's float32 inverse FFT leaves 1.9e-7 of a signal of "
                                "magnitude 54 where the exact value is 0",
    "test_dft_inverse": "the same data as test_dft_inverse_opset19, the axis an input",
}
NOISE_UNITS = 4


def case_atol(case, want: list) -> float:
    """The case's absolute tolerance (REFERENCE_NOISE cases: scaled to their outputs)."""
    if case.name not in REFERENCE_NOISE:
        return case.atol
    largest = max((float(np.abs(np.asarray(w, dtype=np.float64)).max()) for w in want
                   if isinstance(w, np.ndarray) and w.size), default=0.0)
    return max(case.atol, NOISE_UNITS * float(np.finfo(np.float32).eps) * largest)


def _fixed_point_range(dtype: np.dtype) -> tuple[float, float] | None:
    """The values an integer `dtype` holds (numpy's or ml_dtypes' int4/int2), else None."""
    try:
        info = np.iinfo(dtype)
    except ValueError:
        import ml_dtypes

        try:
            info = ml_dtypes.iinfo(dtype)
        except ValueError:
            return None
    return float(info.min), float(info.max)


def _floating(dtype: np.dtype) -> bool:
    """Whether `dtype` is a floating type (numpy's or ml_dtypes' bfloat16, fp8, fp4)."""
    if dtype.kind == "f":
        return True
    import ml_dtypes

    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def undefined_elements(case, inputs: list, want: list) -> list[np.ndarray | None]:
    """Per expected output, the elements whose value the ONNX spec leaves undefined (None:
    every element is defined): a Cast from a floating type to a fixed-point one is "undefined
    if out of range", so a node test's data there is whatever the generator's ml_dtypes
    produced (wrapped to the low bits before ml_dtypes 0.7, zero from 0.7 on, where
    onnxruntime and aotc keep the low bits). Those elements are not compared."""
    nodes = case.model.graph.node
    masks: list[np.ndarray | None] = [None] * len(want)
    if len(nodes) != 1 or nodes[0].op_type not in ("Cast", "CastLike") or not inputs \
            or not isinstance(inputs[0], np.ndarray) or not _floating(inputs[0].dtype):
        return masks
    x = inputs[0]
    rounded = np.round(x.astype(np.float64))
    for i, w in enumerate(want):
        bounds = _fixed_point_range(w.dtype) if isinstance(w, np.ndarray) else None
        if bounds is None or w.shape != x.shape:
            continue
        masks[i] = ~((rounded >= bounds[0]) & (rounded <= bounds[1]))
    return masks


def run_case(case, path: str = "inprocess") -> Result:
    """One case through one path, classified (in this process, without a time limit)."""
    from aotc.errors import AotcError

    start = time.perf_counter()
    try:
        inputs, want = case_data(case)
        with tempfile.TemporaryDirectory(prefix="aotc_conf_") as tmp:
            got, problem = RUNNERS[path](case, inputs, Path(tmp))
        if problem:
            outcome, reason = "wrong", problem
        else:
            for j, undefined in enumerate(undefined_elements(case, inputs, want)):
                if undefined is not None and undefined.any() and j < len(got) \
                        and got[j].shape == want[j].shape and got[j].dtype == want[j].dtype:
                    got[j] = np.where(undefined, want[j], got[j])
            reason = compare(got, want, case.rtol, case_atol(case, want))
            outcome = "wrong" if reason else "pass"
    except AotcError as e:
        outcome, reason = "refused", (e.message.strip().splitlines() or [""])[0].rstrip(":")
    except Exception as e:  # noqa: BLE001 (anything else is a bug in aotc: a crash)
        if getattr(e, "status", None) == INPUT_VALUE_STATUS:  # a Check stopped the run
            outcome, reason = "refused", "a run-time check refused the input values (status 13)"
        else:
            lines = str(e).strip().splitlines()
            outcome, reason = "crash", f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
    return Result(case.name, outcome, reason, time.perf_counter() - start)


# -- workers ---------------------------------------------------------------------------------

_MARKS: Path | None = None  # a folder where a worker names the case it is running
_PATH = "inprocess"
_LIMIT = 0.0
TIMEOUT_MARK = "timed out: "


def _init_worker(marks: str, scratch: str, path: str, limit: float) -> None:
    global _MARKS, _PATH, _LIMIT
    _MARKS, _PATH, _LIMIT = Path(marks), path, limit
    if not _CASES:  # a spawned worker (SPAWNED paths): collect the cases again
        _CASES.update(collect())
    # a worker's temporary files (its own, the compiler's, cc's) go in the run's scratch
    # folder, removed at the end even when a dead worker left them behind
    tempfile.tempdir = os.environ["TMPDIR"] = scratch


def _timed_out(mark: Path, name: str) -> None:
    mark.write_text(TIMEOUT_MARK + name)
    os._exit(3)  # the case is stuck (in Python or in C): the worker goes, the pool breaks


def _work(name: str) -> Result:
    assert _MARKS is not None
    mark = _MARKS / str(os.getpid())
    mark.write_text(name)
    watchdog = threading.Timer(_LIMIT, _timed_out, (mark, name))
    watchdog.daemon = True
    watchdog.start()
    try:
        return run_case(_CASES[name], _PATH)
    finally:
        watchdog.cancel()
        mark.unlink()


def _batch(names: list[str], path: str, jobs: int, limit: float, scratch: str,
           done: Callable[[Result], None]) -> dict[str, bool]:
    """Runs `names` on a fresh pool, passing each result to `done`; returns the cases that were
    running when a worker died, each with whether it had timed out."""
    marks = tempfile.mkdtemp(prefix="marks_", dir=scratch)
    method = "spawn" if path in SPAWNED else "fork"
    pool = ProcessPoolExecutor(max(1, min(jobs, len(names))),
                               mp_context=multiprocessing.get_context(method),
                               initializer=_init_worker, initargs=(marks, scratch, path, limit))
    try:
        futures = [pool.submit(_work, n) for n in names]
        for future in as_completed(futures):
            try:
                done(future.result())
            except BrokenProcessPool:
                pass
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    interrupted = {}
    for mark in Path(marks).iterdir():
        text = mark.read_text()
        interrupted[text.removeprefix(TIMEOUT_MARK)] = text.startswith(TIMEOUT_MARK)
    return interrupted


def run_cases(cases: dict[str, object], path: str = "inprocess", jobs: int | None = None,
              limit: float | None = None,
              progress: Callable[[Result, int, int], None] | None = None) -> dict[str, Result]:
    """Every case on `jobs` forked workers, each within `limit` seconds; results by name."""
    jobs = jobs or os.cpu_count() or 1
    limit = limit or TIME_LIMITS[path]
    _CASES.clear()
    _CASES.update(cases)
    results: dict[str, Result] = {}

    def done(result: Result) -> None:
        results[result.name] = result
        if progress:
            progress(result, len(results), len(cases))

    queue = list(cases)
    with tempfile.TemporaryDirectory(prefix="aotc_conf_") as scratch:
        while queue:
            before = len(results)
            interrupted = _batch(queue, path, jobs, limit, scratch, done)
            for name, timed_out in interrupted.items():
                if timed_out:
                    done(Result(name, "crash", f"timed out after {limit:.0f} s", limit))
            for name in (n for n, timed_out in interrupted.items() if not timed_out):
                # one of these killed its worker: alone, the culprit dies again
                again = _batch([name], path, 1, limit, scratch, done)
                if name in again:
                    done(Result(name, "crash", f"timed out after {limit:.0f} s" if again[name]
                                else "the worker process died (a signal or an exit)", limit))
            queue = [n for n in queue if n not in results]
            if queue and len(results) == before:
                raise RuntimeError("the worker pool broke without finishing or naming a case")
    return {n: results[n] for n in cases}


# -- refusal groups, STATUS.md and the expected list -----------------------------------------

# (group, pattern on the refusal's first line), the first that matches wins.
REFUSAL_GROUPS = (
    ("not on this target yet", r"does not compile for the [\w:]+ target"),
    ("unsupported operator", r"operators aotc does not support"),
    ("element type", r"element type|unsupported type:? tensor\(|"
     r"\b(of|on) (b?float|u?int|bool)\w*( data)? is not supported"),
    ("parameter given as a graph input", r"must be a constant|known at compile time|"
     r"needs a constant"),
    ("opset conversion", r"canonical opset"),
    ("sequence or optional", r"is a (Sequence|Optional)\("),
    ("shape known only at run time", r"depends on the input data|cannot infer the dtype and "
     r"shape|is not static"),
    ("attribute or mode not supported", r"is not supported"),
    ("onnx shape inference failed", r"shape inference failed"),
)


def refusal_group(reason: str) -> str:
    for group, pattern in REFUSAL_GROUPS:
        if re.search(pattern, reason, re.IGNORECASE):
            return group
    return "other"


def gist(reason: str) -> str:
    """A reason with quoted names folded: for counting alike ones."""
    return re.sub(r"(?<!\w)'[^']*'(?!\w)", "'…'", reason)


def detail(reason: str) -> str:
    """What a refusal is about within its group: the operators of an unsupported-operator
    refusal, the type of an element-type one, else the reason with quoted names folded."""
    group = refusal_group(reason)
    ops = re.search(r"does not support \((.*)\)", reason)
    if group == "unsupported operator" and ops:
        return ops.group(1)
    found = re.search(r"element type (\w+)|unsupported type:? tensor\((\w+)\)|"
                      r"\b(?:of|on) (\w+)(?: data)? is not supported", reason)
    if group == "element type" and found:
        return next(g for g in found.groups() if g).upper()
    return gist(reason)


def short_reason(reason: str) -> str:
    group = refusal_group(reason)
    return f"{group}: {detail(reason)}" if group in ("unsupported operator", "element type") \
        else detail(reason)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def status_text(results: dict[str, Result], cases: dict[str, object], path: str,
                command: str, device: str = "") -> str:
    totals = Counter(r.outcome for r in results.values())
    n = len(results)
    lines = [
        "# ONNX backend node tests through aotc",
        "",
        f"Written by `{command}` on {datetime.date.today().isoformat()} with onnx "
        f"{onnx.__version__}: {n} cases, path `{path}`"
        + (f" on the OpenCL device '{device}'" if device else "")
        + " (see tests/conformance/runner.py).",
        "",
        "| outcome | cases | % |",
        "|---|---:|---:|",
    ]
    for outcome in OUTCOMES:
        lines.append(f"| {outcome} | {totals[outcome]} | {100 * totals[outcome] / max(n, 1):.1f} |")
    refused = [r for r in results.values() if r.outcome == "refused"]
    groups = Counter(refusal_group(r.reason) for r in refused)
    lines += ["", "## Refusals by reason", "", "| group | cases | most common reasons |",
              "|---|---:|---|"]
    for group, count in groups.most_common():
        common = Counter(detail(r.reason) for r in refused if refusal_group(r.reason) == group)
        most = 12 if group in ("unsupported operator", "element type") else 3
        top = ", ".join(f"{_cell(g)} ({c})" for g, c in common.most_common(most))
        lines.append(f"| {group} | {count} | {top}{', …' if len(common) > most else ''} |")
    by_op: dict[str, list[Result]] = {}
    for name, r in results.items():
        by_op.setdefault(operator_of(cases[name], cases), []).append(r)
    lines += ["", "## Per operator", "",
              "Function-expanded cases (`*_expanded*`) count under their operator.", "",
              "| operator | cases | passed | refused | wrong | crash | most common refusal |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for op in sorted(by_op, key=lambda op: ("::" in op, op.lower())):
        rs = by_op[op]
        count = Counter(r.outcome for r in rs)
        common = Counter(short_reason(r.reason) for r in rs
                         if r.outcome == "refused").most_common(1)
        reason = f"{_cell(common[0][0])} ({common[0][1]})" if common else ""
        lines.append(f"| {op} | {len(rs)} | {count['pass']} | {count['refused']} | "
                     f"{count['wrong']} | {count['crash']} | {reason} |")
    if path != "inprocess":
        lines += _elsewhere_lines(results)
    bad = [r for r in results.values() if r.outcome in ("wrong", "crash")]
    lines += ["", "## Wrong results and crashes", ""]
    lines += [f"- `{r.name}` ({r.outcome}): {_cell(r.reason)}" for r in bad] or ["None."]
    return "\n".join(lines) + "\n"


def _elsewhere_lines(results: dict[str, Result]) -> list[str]:
    """The in-process passes (expected_passes.txt) among `results` that this path did not
    pass, grouped by reason."""
    cpu = [n for n in read_expected(EXPECTED) if n in results]
    missed = [results[n] for n in cpu if results[n].outcome != "pass"]
    lines = ["", "## In-process passes this path does not pass", "",
             f"{len(cpu) - len(missed)} of the {len(cpu)} in-process passes pass here; the "
             f"other {len(missed)}:", "", "| reason | cases | examples |", "|---|---:|---|"]
    by_reason: dict[str, list[str]] = {}
    for r in missed:
        by_reason.setdefault(f"{r.outcome}: {gist(r.reason)}", []).append(r.name)
    for reason, names in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(f"`{n}`" for n in names[:3]) + (", …" if len(names) > 3 else "")
        lines.append(f"| {_cell(reason)} | {len(names)} | {shown} |")
    return lines


def read_expected(path: Path = EXPECTED) -> list[str]:
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def write_expected(results: dict[str, Result], path: Path = EXPECTED,
                   run: str = "inprocess") -> list[str]:
    """The passing cases among `results`, merged with the listed cases `results` does not hold
    (`run`: the path they ran on)."""
    kept = {n for n in read_expected(path) if n not in results}
    names = sorted(kept | {n for n, r in results.items() if r.outcome == "pass"})
    where = "in-process" if run == "inprocess" else f"on the {run} path"
    flag = "" if run == "inprocess" else f"--path {run} "
    path.write_text(f"# ONNX node test cases that pass {where}; written by "
                    f"`python -m tests.conformance.runner {flag}--update-expected`\n"
                    + "".join(f"{n}\n" for n in names))
    return names


def representative(names: Iterable[str], cases: dict[str, object], per_operator: int = 3
                   ) -> list[str]:
    """Up to `per_operator` of `names` per operator (operator_of): the first, the middle and
    the last by name (variants are named alike, so these differ most), in name order."""
    by_op: dict[str, list[str]] = {}
    for n in sorted(names):
        if n in cases:
            by_op.setdefault(operator_of(cases[n], cases), []).append(n)
    picked: set[str] = set()
    for group in by_op.values():
        k = min(per_operator, len(group))
        picked |= {group[round(i * (len(group) - 1) / max(k - 1, 1))] for i in range(k)}
    return sorted(picked)


def regressions(results: dict[str, Result], expected: Iterable[str]) -> list[Result]:
    """Expected passes among `results` that did not pass."""
    return [results[n] for n in expected if n in results and results[n].outcome != "pass"]


# -- command line ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=PATHS, default="inprocess")
    parser.add_argument("--filter", metavar="REGEX", help="only cases whose name matches")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, help="seconds per case (default: "
                        + ", ".join(f"{p} {s:.0f}" for p, s in TIME_LIMITS.items()) + ")")
    parser.add_argument("--write-status", action="store_true",
                        help=f"write {STATUS.name} ({STATUS_FILES['opencl'].name} for opencl)")
    parser.add_argument("--update-expected", action="store_true",
                        help=f"write {EXPECTED.name} ({EXPECTED_FILES['opencl'].name} for "
                        "opencl; not for c)")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per case")
    args = parser.parse_args(argv)
    if args.write_status and args.filter:
        parser.error("--write-status covers every case: run it without --filter")
    if args.update_expected and args.path not in EXPECTED_FILES:
        parser.error("--update-expected lists the passes of a path a test runs "
                     f"({', '.join(EXPECTED_FILES)})")

    device = ""
    if args.path in SPAWNED:
        from targets.gpu.opencl_device import device_name, opencl_available

        if not opencl_available():
            parser.error("--path opencl needs pyopencl and an OpenCL device (apt-get install "
                         "pocl-opencl-icd runs one on the CPU)")
        device = device_name()
    started = time.monotonic()
    cases = collect(args.filter)

    def progress(r: Result, k: int, n: int) -> None:
        if args.verbose:
            print(f"[{k}/{n}] {r.name}: {r.outcome} {r.reason} ({r.seconds:.1f} s)", flush=True)
        elif k % 100 == 0 or k == n:
            print(f"{k}/{n} cases", file=sys.stderr, flush=True)

    results = run_cases(cases, args.path, args.jobs, args.timeout, progress)
    totals = Counter(r.outcome for r in results.values())
    print(" ".join(f"{o} {totals[o]}" for o in OUTCOMES)
          + f" of {len(results)} ({time.monotonic() - started:.0f} s)")
    expected = EXPECTED_FILES.get(args.path)
    failed = regressions(results, read_expected(expected)) if expected else []
    for r in failed:
        print(f"expected to pass: {r.name}: {r.outcome}: {r.reason}")
    bad = [r for r in results.values() if r.outcome in ("wrong", "crash")]
    for r in bad:
        print(f"{r.outcome}: {r.name}: {r.reason}")
    if args.write_status:
        command = "python -m tests.conformance.runner " + shlex.join(argv or sys.argv[1:])
        status = STATUS_FILES[args.path]
        status.write_text(status_text(results, cases, args.path, command.strip(), device))
        print(f"wrote {status.relative_to(ROOT)}")
    if args.update_expected:
        assert expected is not None
        names = write_expected(results, expected, args.path)
        print(f"wrote {expected.relative_to(ROOT)} ({len(names)} cases)")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
