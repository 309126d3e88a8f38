"""Where a model's time goes: aotc's kernels next to onnxruntime's nodes, on one core or N.

    python benchmarks/profile_model.py benchmarks/models/resnet50.onnx [--runs 15] [--top 25]
        [--threads N] [--markdown]

aotc: the compiled model's steps run in model order (the arena laid out as in the bundle), each
timed alone; median per step over `--runs` passes. One thread runs the serial runtime; with
`--threads N` the model is compiled for N threads and its kernels linked with the runtime's
pool of N (as in a bundle), so each step's time includes handing its loop to the workers. So a
kernel meets its inputs as the model leaves them (weights streaming from memory, activations
in L2/L3), unlike a benchmark that repeats one layer. Convolutions and matrix products get
GFLOP/s and % of the FMA peak of the threads used (`peak.py`).
onnxruntime: its profiler's per-node kernel times (all graph optimisations, one thread), median
per node over the same number of runs. Its node names follow its own rewrites (NCHWc
convolutions, fused activations), so the two lists are ranked side by side rather than
matched; the summary groups both by kind of work.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from peak import cached_peak  # noqa: E402
from program_runner import bind_steps  # noqa: E402
from table import print_rows  # noqa: E402

from aotc.driver import compile_file  # noqa: E402
from aotc.package.build import build_runtime_library  # noqa: E402
from aotc.package.program import Program  # noqa: E402

# onnxruntime's operators that run a convolution or matrix product (the rest: pooling,
# element-wise, layout reorders)
ORT_PRODUCTS = {"Conv", "FusedConv", "NchwcConv", "Gemm", "MatMul", "FusedMatMul",
                "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "FusedGemm"}


def pooled_library(program: Program, threads: int, workdir: Path
                   ) -> tuple[ctypes.CDLL, ctypes.c_void_p]:
    """The program's kernels linked with the C runtime, and a pool of `threads` threads."""
    obj = workdir / "kernels.o"
    obj.write_bytes(program.kernel_object)
    lib = ctypes.CDLL(str(build_runtime_library(workdir, objects=[obj])))
    pool = ctypes.c_void_p()
    if lib.aotc_pool_create(ctypes.byref(pool), threads) != 0:
        raise SystemExit(f"aotc_pool_create({threads}) failed")
    return lib, pool


def aotc_step_times(program: Program, runs: int, rng: np.random.Generator, threads: int = 1
                    ) -> list[tuple[str, float, float]]:
    """(node, median seconds, flops) per step, in model order."""
    inputs = [rng.standard_normal(tuple(i.shape)) for i in program.inputs]
    with tempfile.TemporaryDirectory(prefix="aotc-profile-") as tmp:
        lib, pool = pooled_library(program, threads, Path(tmp)) if threads > 1 else (None, None)
        try:
            return _step_times(program, inputs, runs, lib, pool)
        finally:
            if lib is not None:
                lib.aotc_pool_destroy(pool)


def _step_times(program: Program, inputs: list[np.ndarray], runs: int, lib, ctx
                ) -> list[tuple[str, float, float]]:
    calls, _outs, _keep = bind_steps(program, inputs, lib=lib)
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(runs + 2):  # two warm-up passes
        for j, (fn, args) in enumerate(calls):
            t = time.perf_counter()
            fn(ctx, args, None)
            times[j].append(time.perf_counter() - t)
    return [(st.node, statistics.median(ts[2:]), st.flops)
            for st, ts in zip(program.steps, times, strict=True)]


def ort_node_times(model: Path, runs: int, rng: np.random.Generator, threads: int = 1
                   ) -> list[tuple[str, str, float]]:
    """(node, operator, median seconds) per executed node, in execution order."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]
                                        ).astype(np.float32) for i in sess.get_inputs()}
    for _ in range(runs + 2):
        sess.run(None, feed)
    trace = Path(sess.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    durations: dict[str, list[float]] = collections.defaultdict(list)
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            ops.setdefault(name, e["args"].get("op_name", "?"))
            durations[name].append(e["dur"] * 1e-6)
    return [(n, ops[n], statistics.median(d[2:] or d)) for n, d in durations.items()]


def _ratio(a: float, b: float, fmt: str = ".2f") -> str:
    """a / b, or blank where b is 0 (a model without products has no product ratio)."""
    return f"{a / b:{fmt}}" if b else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--top", type=int, default=25, help="rows of each ranked list")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of both engines (aotc compiled for that many)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    program, _ = compile_file(args.model, input_shapes=[], threads=args.threads)
    ours = aotc_step_times(program, args.runs, rng, args.threads)
    theirs = ort_node_times(args.model, args.runs, rng, args.threads)
    peak = cached_peak(args.threads).gflops

    ours_products = sum(t for _, t, f in ours if f)
    theirs_products = sum(t for _, op, t in theirs if op in ORT_PRODUCTS)
    flops = sum(f for _, _, f in ours)
    rows = [["convolutions and matrix products", f"{ours_products * 1e3:.2f}",
             f"{theirs_products * 1e3:.2f}", _ratio(ours_products, theirs_products),
             _ratio(flops / 1e9, ours_products, ".1f"),
             _ratio(flops / 1e9, theirs_products, ".1f")],
            ["everything else", f"{(sum(t for _, t, _ in ours) - ours_products) * 1e3:.2f}",
             f"{(sum(t for *_, t in theirs) - theirs_products) * 1e3:.2f}", "", "", ""],
            ["total (sum of kernels)", f"{sum(t for _, t, _ in ours) * 1e3:.2f}",
             f"{sum(t for *_, t in theirs) * 1e3:.2f}",
             f"{sum(t for _, t, _ in ours) / sum(t for *_, t in theirs):.2f}", "", ""]]
    print(f"{args.model.name}: {args.threads} thread(s), median of {args.runs} passes; FMA "
          f"peak {peak:.1f} GFLOP/s")
    print_rows(["work", "aotc ms", "onnxruntime ms", "aotc/ort", "aotc GFLOP/s",
                "ort GFLOP/s"], rows, args.markdown)
    print()
    ranked = sorted(ours, key=lambda r: r[1], reverse=True)[: args.top]
    print_rows(["aotc step", "ms", "GFLOP/s", "% peak"],
               [[n, f"{t * 1e3:.3f}", f"{f / t / 1e9:.1f}" if f else "",
                 f"{100 * f / t / 1e9 / peak:.0f}" if f else ""] for n, t, f in ranked],
               args.markdown)
    print()
    ranked_ort = sorted(theirs, key=lambda r: r[2], reverse=True)[: args.top]
    print_rows(["onnxruntime node", "operator", "ms"],
               [[n, op, f"{t * 1e3:.3f}"] for n, op, t in ranked_ort], args.markdown)


if __name__ == "__main__":
    main()
