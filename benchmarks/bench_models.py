"""Latency of aotc bundles against onnxruntime, side by side in one process, interleaved.

For each model and thread count: the bundle's `NAME_run_context` (through ctypes, input/output
pointer arrays built once) and an onnxruntime session (ORT_ENABLE_ALL, the same intra-op thread
count, IO binding with preallocated outputs) take turns in blocks of `--block` runs after a
warm-up; before each block it waits until the other engine's worker threads stop spinning
(timing.interleave and quiesce; spin_study.py and RESULTS.md say why).
Reports medians, the ratio aotc/onnxruntime (< 1: aotc is faster) and the geometric mean of the
ratios per thread count, and each model's compile time (`optimize`, without tuning) and `make`
time. aotc's outputs are checked against onnxruntime's before timing. `--tuning-log FILE`
compiles with the schedules a tuning run recorded (`aotc optimize MODEL -o DIR --tune SECONDS
--tuning-log FILE`), to compare tuned bundles.

Each thread count gets a bundle compiled for it (`aotc optimize --threads N`), as a user
deploying on N threads would build it; onnxruntime's session gets the same intra-op count.
`--bundle-threads host` compiles one bundle for all cores and runs it at every count (the
schedules then suit all cores: ResNet-50's 7x7 layers ran 1.2-1.3x slower so on one thread).

`--emit ort` also builds each model's onnxruntime custom-op library (`aotc optimize --emit ort`)
and adds a third engine to every turn: onnxruntime running the rewritten model with the library
registered (its islands on onnxruntime's intra-op pool), reported against onnxruntime alone
and against the bundle; the library is compiled per thread count like the bundle.
`--measure-islands` compiles each library with `aotc optimize --measure-islands`: the parts of
islands onnxruntime ran faster on this machine, at that thread count, are left to it.

    python benchmarks/bench_models.py [--big] [--models mlp resnet50] [--runs 50]
                                      [--threads 1 2] [--tuning-log FILE] [--markdown]
                                      [--target cpu-avx2] [--emit ort [--measure-islands]]

`--big` adds the full-size models of make_big_models.py (ResNet-50, MobileNetV2, the BERT-base-sized
encoder, EfficientNet-B0, RegNetY-400MF, ViT-B/16; run it first).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from model_zoo import SAMPLE_MODELS, random_inputs  # noqa: E402
from table import print_rows  # noqa: E402
from timing import (  # noqa: E402
    CLOCKS,
    aotc_engine,
    flush_files,
    geomean,
    interleave,
    load_average,
    median,
    ort_engine,
    ort_session,
    settle_by_name,
)

from aotc.driver import emit_ort, make_tuner, optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402

BIG_DIR = ROOT / "benchmarks" / "models"
BIG_NAMES = ("resnet50", "mobilenetv2", "bert_encoder", "efficientnet_b0", "regnety_400mf", "vit_b16")
# their int8 forms (onnxruntime.quantization, static QDQ; make_big_models.py QUANTIZED)
INT8_NAMES = ("resnet50_int8", "mobilenetv2_int8", "bert_encoder_int8")


def model_inputs(path: Path) -> list[np.ndarray]:
    """Seeded random inputs in graph-input order (initializers excluded)."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    arrays = random_inputs(path, None, seed=0)
    return [arrays[i.name] for i in model.graph.input if i.name not in inits]


def build_shared(path: Path, bundle: Path) -> Path:
    """`aotc optimize` + `make shared`: the bundle folder holding libmodel.so."""
    optimize_model(path, bundle, input_shapes=[])
    build_bundle(bundle, target="shared")
    return bundle


def _check(got: list[np.ndarray], want: list[np.ndarray], step: float | None = None) -> str:
    """"ok" or the error; for a quantized model (`step`: its output's scale), how many
    quantization steps the outputs lie apart (onnxruntime's own graph optimizations move a
    deep quantized model's outputs by several steps; see RESULTS.md)."""
    if step is not None:
        steps = max(float(np.abs(g.astype(np.float64) - w).max()) / step
                    for g, w in zip(got, want, strict=True))
        return f"{steps:.0f} steps"
    err = max(float(np.abs(g - w).max() / max(1.0, float(np.abs(w).max())))
              for g, w in zip(got, want, strict=True))
    return "ok" if err < 1e-3 else f"WRONG {err:.1e}"


def output_step(path: Path) -> float | None:
    """The scale of the DequantizeLinear that gives a quantized model's first output (None
    for a float model)."""
    model = onnx.load(str(path), load_external_data=False)
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(model.graph.output[0].name)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    inits = {i.name: i for i in model.graph.initializer}
    return float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0])


def bench_one(path: Path, bundle_dir: Path, threads: int, runs: int, block: int,
              settle: Callable[[], None], spinning: bool, clock: Callable[[], float],
              with_library: tuple[Path, Path] | None = None) -> tuple[dict[str, float], str]:
    """Median seconds per engine ("aotc", "ort", and "ort+lib" when `with_library` gives the
    rewritten model and its library), and the output check."""
    inputs = model_inputs(path)
    engines = {}
    engines["ort"], ort_outs = ort_engine(ort_session(path, threads, spinning), inputs)
    outs = {}
    if with_library is not None:
        model, library = with_library
        engines["ort+lib"], outs["ort+lib"] = ort_engine(
            ort_session(model, threads, spinning, library), inputs)
    with LoadedBundle(bundle_dir) as bundle:
        bundle.create(threads)
        engines["aotc"], outs["aotc"] = aotc_engine(bundle, inputs)
        for call in engines.values():
            call()
        step = output_step(path)
        checks = [_check(o, ort_outs, step) for o in outs.values()]
        t = interleave(engines, runs, block=block, settle=settle, clock=clock)
    check = next((c for c in checks if c != "ok"), "ok") if step is None else checks[0]
    return {k: median(v) for k, v in t.items()}, check


def model_paths(big: bool, only: list[str], int8: bool = False) -> dict[str, Path]:
    paths = dict(SAMPLE_MODELS)
    names = (BIG_NAMES if big else ()) + (INT8_NAMES if int8 else ())
    missing = [n for n in names if not (BIG_DIR / f"{n}.onnx").exists()]
    if missing:
        sys.exit(f"{', '.join(missing)} not found in {BIG_DIR}: "
                 "run python benchmarks/make_big_models.py first")
    paths.update({n: BIG_DIR / f"{n}.onnx" for n in names})
    if only:
        unknown = [n for n in only if n not in paths]
        if unknown:
            sys.exit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(paths)}")
        paths = {n: paths[n] for n in only}
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="add the full-size models")
    ap.add_argument("--int8", action="store_true", help="add the full-size int8 (QDQ) models")
    ap.add_argument("--models", nargs="+", default=[], help="only these models")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per engine (median)")
    ap.add_argument("--block", type=int, default=5, help="runs per turn")
    ap.add_argument("--settle", default="quiesce",
                    help="before each turn: quiesce (wait for spinning threads), none, or seconds")
    ap.add_argument("--ort-spinning", choices=("on", "off"), default="on",
                    help="onnxruntime's session.intra_op.allow_spinning")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--clock", choices=list(CLOCKS), default="wall",
                    help="thread: CPU time of the calling thread (1 thread only; shared machines)")
    ap.add_argument("--tuning-log", type=Path, default=None,
                    help="compile with the schedules of this tuning log (written by `aotc "
                         "optimize --tune`; kernels it lacks keep the cost model's choice)")
    ap.add_argument("--target", choices=("cpu", "cpu-avx2"), default="cpu",
                    help="aotc's code: for this machine, or AVX2 code run here")
    ap.add_argument("--emit", choices=("bundle", "ort"), default="bundle",
                    help="ort: also time onnxruntime with the model's aotc custom-op library")
    ap.add_argument("--measure-islands", action="store_true",
                    help="with --emit ort: compile each library with `--measure-islands` "
                         "(islands onnxruntime runs faster on this machine are left to it)")
    ap.add_argument("--bundle-threads", choices=("per-run", "host"), default="per-run",
                    help="per-run: a bundle compiled for each --threads count; host: one "
                         "bundle compiled for all cores")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.clock == "thread" and args.threads != [1]:
        ap.error("--clock thread needs --threads 1 (worker threads' time would be left out)")
    load_before = load_average()
    paths = model_paths(args.big, args.models, args.int8)
    rows, compile_rows = [], []
    with tempfile.TemporaryDirectory(prefix="aotc_bench_models_") as tmp:
        bundles = {}
        libraries: dict[tuple[str, int], tuple[Path, Path]] = {}
        island_rows: list[tuple[str, int | str, int, int, str]] = []
        tuner = make_tuner(0.0, args.tuning_log) if args.tuning_log else None  # read once
        counts = args.threads if args.bundle_threads == "per-run" else [0]
        for name, path in paths.items():
            for count in counts:
                folder = Path(tmp) / f"{name}.t{count}"
                t0 = time.perf_counter()
                optimize_model(path, folder, input_shapes=[], tuner=tuner, target=args.target,
                               threads=count)
                t1 = time.perf_counter()
                build_bundle(folder, target="shared")
                compile_rows.append((name, count or "all", f"{t1 - t0:.2f}",
                                     f"{time.perf_counter() - t1:.2f}"))
                if args.emit == "ort":  # the library, compiled (and measured) likewise
                    result = emit_ort(path, Path(tmp) / f"{name}.t{count}.ort", input_shapes=[],
                                      name=name, tuner=tuner, target=args.target,
                                      threads=count, measure_islands=args.measure_islands)
                    split = sum(t.split for t in result.timings)
                    island_rows.append((name, count or "all", len(result.islands),
                                        len(result.left_out),
                                        f"{len(result.timings)} measured, {split} halved"
                                        if result.timings else ""))
                for threads in (args.threads if count == 0 else [count]):
                    bundles[name, threads] = folder
                    if args.emit == "ort":
                        libraries[name, threads] = (result.model_path, result.library_path)
        flush_files()
        for threads in args.threads:
            ratios: dict[str, list[float]] = {"aotc": [], "ort+lib": [], "ort+lib/aotc": []}
            for name, path in paths.items():
                t, check = bench_one(path, bundles[name, threads], threads, args.runs, args.block,
                                     settle_by_name(args.settle), args.ort_spinning == "on",
                                     CLOCKS[args.clock], libraries.get((name, threads)))
                a, o = t["aotc"], t["ort"]
                ratios["aotc"].append(a / o)
                row = [name, threads, f"{a * 1e3:.3f}", f"{o * 1e3:.3f}", f"{a / o:.2f}"]
                if args.emit == "ort":
                    lib = t["ort+lib"]
                    ratios["ort+lib"].append(lib / o)
                    ratios["ort+lib/aotc"].append(lib / a)
                    row += [f"{lib * 1e3:.3f}", f"{lib / o:.2f}", f"{lib / a:.2f}"]
                rows.append((*row, check))
            mean = ["geometric mean", threads, "", "", f"{geomean(ratios['aotc']):.2f}"]
            if args.emit == "ort":
                mean += ["", f"{geomean(ratios['ort+lib']):.2f}",
                         f"{geomean(ratios['ort+lib/aotc']):.2f}"]
            rows.append((*mean, ""))
    print(f"load average before: {load_before}, after: {load_average()}; clock: {args.clock}")
    head = ["model", "threads", "aotc median ms", "onnxruntime median ms", "aotc/ort"]
    if args.emit == "ort":
        head += ["ort+library median ms", "ort+library/ort", "ort+library/aotc"]
    print_rows((*head, "check"), rows, args.markdown)
    if island_rows:
        print()
        print_rows(("model", "compiled for threads", "islands", "nodes left to onnxruntime",
                    "islands measured"), island_rows, args.markdown)
    print()
    print_rows(("model", "compiled for threads", "aotc optimize s", "make s"), compile_rows,
               args.markdown)


if __name__ == "__main__":
    main()
