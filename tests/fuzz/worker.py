"""A fuzzing worker: runs cases as a user would, one after another, in one process.

Reads one JSON job per line on stdin and answers with JSON lines on stdout: a `{"phase": ...}`
line as each phase starts (so that the campaign can tell a hang or a crash in that phase), then
`{"result": ...}`. Phases:
- inspect: `aotc inspect MODEL` through the CLI, in this process (imports paid once);
- compile: `aotc optimize MODEL -o BUNDLE` likewise;
- build: `make` in the bundle;
- run: the bundle's run_model on random inputs (with --threads 1 or 2); a job with "valgrind"
  is compiled for cpu-avx2 and run under valgrind's memcheck, which reports what the kernels
  read or write outside the buffers they are given (valgrind does not run AVX-512);
- compare: onnxruntime on the same inputs, when it accepts the model (a wrong result is
  reported, not counted as a failure of aotc's error handling).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Bundles whose inputs, outputs and workspace exceed this are compiled but not run here: the
# runner's own memory, not aotc, would be the limit.
RUN_BYTES_LIMIT = 1 << 28
MEMORY_LIMIT = 8 << 30
VALGRIND_ERROR = 99  # run_model's exit status when memcheck found an error


_CHANNEL = sys.stdout  # the protocol's channel (main() moves it off file descriptor 1)


def _say(obj: dict) -> None:
    _CHANNEL.write(json.dumps(obj) + "\n")
    _CHANNEL.flush()


def cli(args: list[str]) -> dict:
    """`aotc ARGS` in this process: exit status, what it printed, seconds."""
    from aotc.cli import app

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    code: object = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            app(args, prog_name="aotc")
        except SystemExit as e:
            code = e.code
        except BaseException:  # the CLI lets nothing else out: this is a bug of its own
            traceback.print_exc()
            code = "escaped"
    return {"exit": code if isinstance(code, int) else str(code), "stdout": out.getvalue(),
            "stderr": err.getvalue(), "seconds": time.perf_counter() - start}


def _too_big(manifest: dict) -> bool:
    sizes = [t["bytes"] for t in (*manifest["inputs"], *manifest["outputs"])]
    return sum(sizes) + manifest["arena_size"] > RUN_BYTES_LIMIT


def build_and_run(model: Path, bundle: Path, threads: int, seed: int, valgrind: bool) -> dict:
    import onnx

    from aotc.package.build import BuildError, RunModelError, build_bundle, run_model_process
    from aotc.package.output_folder import read_manifest
    from aotc.verify import random_inputs

    manifest = read_manifest(bundle)
    if manifest is None:
        return {"build": "no manifest"}
    if _too_big(manifest):
        return {"build": "skipped", "run": "too big to run here"}
    _say({"phase": "build"})
    try:
        build_bundle(bundle)
    except BuildError as e:
        return {"build": "failed", "detail": str(e)[-2000:]}
    proto = onnx.load(str(model), load_external_data=False)
    arrays = random_inputs(manifest["inputs"], proto, np.random.default_rng(seed))
    _say({"phase": "run"})
    runner = ["valgrind", "-q", f"--error-exitcode={VALGRIND_ERROR}"] if valgrind else None
    try:
        got = run_model_process(bundle, arrays, threads=threads, runner=runner)
    except RunModelError as e:
        return {"build": "ok", "run": "failed", "status": e.returncode,
                "detail": e.output[-2000:]}
    result: dict = {"build": "ok", "run": "ok", "memcheck": valgrind}
    _say({"phase": "compare"})
    result.update(compare(model, manifest, arrays, got))
    return result


def compare(model: Path, manifest: dict, arrays: list[np.ndarray], got: list[np.ndarray]) -> dict:
    """aotc's outputs against onnxruntime's (without its graph rewrites, as `aotc verify`);
    where they differ, onnx's reference evaluator decides whether onnxruntime is the one off."""
    from aotc.verify import ort_session

    try:
        sess = ort_session(model)
        names = [i.name for i in sess.get_inputs()]
        want = sess.run(None, dict(zip(names, arrays, strict=True)))
    except Exception as e:  # onnxruntime refuses the model or the inputs
        return {"compare": "onnxruntime refused", "detail": str(e)[:300]}
    verdict = _differences(manifest, got, want)
    if verdict["compare"] == "mismatch" and _reference_agrees(model, names, arrays, manifest, got):
        return {"compare": "onnxruntime off", "detail": verdict["detail"]}
    return verdict


def _differences(manifest: dict, got: list[np.ndarray], want: list[np.ndarray]) -> dict:
    from aotc.verify import compare as compare_arrays

    for spec, g, w in zip(manifest["outputs"], got, want, strict=True):
        w = np.asarray(w)
        err, scale, ok = compare_arrays(g, w, 1e-3)
        if ok:
            continue
        if _overflow_only(g, w):
            return {"compare": "overflow", "detail": f"{spec['name']}: inf or NaN against a "
                                                     "finite value beyond 1e30"}
        return {"compare": "mismatch", "detail": f"{spec['name']}: error {err:.3g} "
                                                  f"(scale {scale:.3g})"}
    return {"compare": "match"}


def _reference_agrees(model: Path, names: list[str], arrays: list[np.ndarray], manifest: dict,
                      got: list[np.ndarray]) -> bool:
    """Whether onnx's reference evaluator gives aotc's outputs (where onnxruntime did not)."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    try:
        ref = ReferenceEvaluator(onnx.load(str(model))).run(None, dict(zip(names, arrays,
                                                                            strict=True)))
    except Exception:  # the reference does not run it either: no third opinion
        return False
    return _differences(manifest, got, ref)["compare"] == "match"


def _overflow_only(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether the outputs differ only where one side overflowed (to inf, or to NaN through
    inf - inf) and the other holds a finite value beyond 1e30: mutated weights near the float
    range, combined in another order."""
    if got.shape != want.shape or got.dtype.kind != "f":
        return False
    differ = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    huge = (~np.isfinite(got) & (np.abs(want) > 1e30)) | (~np.isfinite(want) &
                                                            (np.abs(got) > 1e30))
    close = np.isfinite(got) & np.isfinite(want) & (np.abs(got - want) <= 1e-3 * np.maximum(
        1.0, np.abs(want)))
    return bool(np.all(~differ | huge | close))


def run_job(job: dict) -> dict:
    model, bundle = Path(job["model"]), Path(job["bundle"])
    _say({"phase": "inspect"})
    inspected = cli(["inspect", str(model)])
    _say({"phase": "compile"})
    valgrind = bool(job.get("valgrind"))
    target = ["--target", "cpu-avx2"] if valgrind else []
    result = cli(["optimize", str(model), "-o", str(bundle), *target])
    result["inspect"] = inspected
    if result["exit"] == 0:
        result.update(build_and_run(model, bundle, job.get("threads", 1), job["seed"],
                                    valgrind))
    return result


def main() -> None:
    global _CHANNEL
    # The protocol keeps the original stdout; file descriptor 1 goes to stderr, so that nothing
    # a library prints can be taken for a message.
    _CHANNEL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    limit = int(os.environ.get("AOTC_FUZZ_MEMORY", MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for line in sys.stdin:
        job = json.loads(line)
        _say({"result": run_job(job)})


if __name__ == "__main__":
    main()
