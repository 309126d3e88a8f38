"""One bundle for every length against a bundle per length, side by side with onnxruntime.

A model whose input has a symbolic axis (make_big_models.py's `bert_encoder_seq.onnx`) is
compiled once with that axis a range `1..BOUND` (`--input-shape input=1,1..512,768`) and once
per `--exact` length with the axis fixed. For each timed length the range bundle
(`NAME_run_context_dims`), the exact bundle when there is one, and onnxruntime on the same
input take turns, interleaved (timing.interleave); outputs are checked against onnxruntime's
first. Reports medians and the ratios range/exact (issue 17's bar: within 10 % at 128) and
range/onnxruntime. `--emit ort` also compiles the model with the range as an onnxruntime
custom-op library (`aotc optimize --emit ort`) and adds onnxruntime running the rewritten model
with it ("ort+lib") to every length's turns.

    python benchmarks/bench_lengths.py [--model benchmarks/models/bert_encoder_seq.onnx]
        [--bound 512] [--lengths 1 7 128 512] [--exact 128] [--threads 1] [--runs 10]
        [--emit ort] [--clock wall|thread] [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from table import print_rows  # noqa: E402
from timing import (  # noqa: E402
    CLOCKS,
    aotc_engine,
    flush_files,
    interleave,
    load_average,
    median,
    ort_engine,
    ort_session,
)

from aotc.driver import emit_ort, optimize_model  # noqa: E402
from aotc.package.build import build_bundle  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402


def symbolic_input(path: Path) -> tuple[str, list[int | str]]:
    """The model's one graph input: its name and dims (a string for a symbolic one)."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SystemExit(f"{path}: expected one graph input, found {len(inputs)}")
    dims = [d.dim_param or d.dim_value for d in inputs[0].type.tensor_type.shape.dim]
    if sum(isinstance(d, str) for d in dims) != 1:
        raise SystemExit(f"{path}: expected one symbolic dimension in {dims}")
    return inputs[0].name, dims


def shape_flag(name: str, dims: list[int | str], value: str) -> str:
    return f"{name}=" + ",".join(value if isinstance(d, str) else str(d) for d in dims)


def at_length(dims: list[int | str], length: int) -> tuple[int, ...]:
    return tuple(length if isinstance(d, str) else int(d) for d in dims)


def check(got: list[np.ndarray], want: list[np.ndarray]) -> str:
    err = max(float(np.abs(g - w).max() / max(1.0, float(np.abs(w).max())))
              for g, w in zip(got, want, strict=True))
    return "ok" if err < 1e-3 else f"WRONG {err:.1e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path,
                    default=ROOT / "benchmarks" / "models" / "bert_encoder_seq.onnx")
    ap.add_argument("--bound", type=int, default=512)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1, 7, 128, 512])
    ap.add_argument("--exact", type=int, nargs="*", default=[128])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--block", type=int, default=2)
    ap.add_argument("--clock", choices=list(CLOCKS), default="wall",
                    help="thread: CPU time of the calling thread (1 thread only; shared machines)")
    ap.add_argument("--emit", choices=("bundle", "ort"), default="bundle",
                    help="ort: also time onnxruntime with the range's custom-op library")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.clock == "thread" and args.threads != 1:
        ap.error("--clock thread needs --threads 1 (worker threads' time would be left out)")
    if not args.model.exists():
        raise SystemExit(f"{args.model} not found: run benchmarks/make_big_models.py "
                         "--only bert_encoder_seq")
    name, dims = symbolic_input(args.model)
    rows = []
    with tempfile.TemporaryDirectory(prefix="aotc_len_") as tmp:
        builds: dict[str, Path] = {}
        compile_rows = []
        for label, value in [("range", f"1..{args.bound}"),
                             *[(f"exact {n}", str(n)) for n in args.exact]]:
            out = Path(tmp) / label.replace(" ", "_")
            t0 = time.perf_counter()
            optimize_model(args.model, out, input_shapes=[shape_flag(name, dims, value)])
            build_bundle(out, target="shared")
            compile_rows.append((label, f"{time.perf_counter() - t0:.1f}"))
            builds[label] = out
        library = None
        if args.emit == "ort":
            t0 = time.perf_counter()
            result = emit_ort(args.model, Path(tmp) / "ort", name="model",
                              input_shapes=[shape_flag(name, dims, f"1..{args.bound}")])
            compile_rows.append((f"ort library (range; {len(result.islands)} island(s), "
                                 f"{len(result.left_out)} node(s) left to onnxruntime)",
                                 f"{time.perf_counter() - t0:.1f}"))
            library = ort_session(result.model_path, args.threads, library=result.library_path)
        print_rows(("bundle", "compile + make s"), compile_rows, args.markdown)
        flush_files()
        rng = np.random.default_rng(0)
        sess = ort_session(args.model, args.threads)
        for length in args.lengths:
            x = rng.standard_normal(at_length(dims, length)).astype(np.float32)
            engines, outs = {}, {}
            engines["ort"], want = ort_engine(sess, [x])
            if library is not None:
                engines["ort+lib"], outs["ort+lib"] = ort_engine(library, [x])
            loaded = []
            for label, folder in builds.items():
                exact = label != "range"
                if exact and label != f"exact {length}":
                    continue
                bundle = LoadedBundle(folder)
                bundle.create(args.threads)
                loaded.append(bundle)
                engines[label], outs[label] = aotc_engine(
                    bundle, [x], length=None if exact else length)
            for call in engines.values():
                call()
            checks = {k: check(o, want) for k, o in outs.items()}
            t = {k: median(v) for k, v in interleave(engines, args.runs, block=args.block,
                                                     clock=CLOCKS[args.clock]).items()}
            for bundle in loaded:
                bundle.destroy()
            ex, lib = t.get(f"exact {length}"), t.get("ort+lib")
            rows.append((str(length), f"{t['range'] * 1e3:.2f}",
                         f"{ex * 1e3:.2f}" if ex else "-", f"{t['ort'] * 1e3:.2f}",
                         f"{t['range'] / ex:.2f}" if ex else "-", f"{t['range'] / t['ort']:.2f}",
                         *((f"{lib * 1e3:.2f}", f"{lib / t['ort']:.2f}") if library else ()),
                         " ".join(sorted(set(checks.values())))))
    print(f"\n{args.model.name}, bound {args.bound}, {args.threads} thread(s), median of "
          f"{args.runs}, clock {args.clock} (load average {load_average()})")
    print_rows(("length", "range ms", "exact ms", "ort ms", "range/exact", "range/ort",
                *(("ort+lib ms", "ort+lib/ort") if args.emit == "ort" else ()), "check"),
               rows, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
