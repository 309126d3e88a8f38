"""How two runtimes' spinning worker threads disturb each other, measured (RESULTS.md, "Fairness").

After a parallel run both runtimes keep their workers spinning before they sleep: onnxruntime
(session option `session.intra_op.allow_spinning`, on by default) and the aotc pool
(AOTC_SPIN_NS, 200 us). A spinning worker holds a core that the other engine's next run needs.
For one model at all cores this prints
1. the CPU time each engine's threads burn in the 200 ms after a run while the caller sleeps
   (what is left spinning), and
2. each engine's median alone, and interleaved with the other under each remedy: none, a fixed
   20 ms pause before each turn, waiting until the process is quiet (timing.quiesce), with
   onnxruntime's spinning on and off.

    python benchmarks/spin_study.py [--model resnet_tiny] [--runs 40] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

from bench_models import build_shared, model_inputs  # noqa: E402
from table import print_rows  # noqa: E402
from timing import (  # noqa: E402
    Engine,
    aotc_engine,
    interleave,
    load_average,
    median,
    no_pause,
    ort_engine,
    ort_session,
    settle_by_name,
)

from aotc.package.loaded import LoadedBundle  # noqa: E402

SETTLES = ("none", "0.02", "quiesce")


def cpu_after_run(engine: Engine, window: float = 0.2, reps: int = 3) -> float:
    """Median CPU seconds the process burns while its caller sleeps `window` after a run."""
    burnt = []
    for _ in range(reps):
        engine()
        c0 = time.process_time()
        time.sleep(window)
        burnt.append(time.process_time() - c0)
        time.sleep(window)
    return median(burnt)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def study(path: Path, bundle_dir: Path, threads: int, runs: int) -> tuple[list, list]:
    inputs = model_inputs(path)
    spin_rows, rows = [], []
    with LoadedBundle(bundle_dir) as bundle:
        bundle.create(threads)
        aotc, _ = aotc_engine(bundle, inputs)
        spin_rows.append(("aotc", "", _ms(cpu_after_run(aotc))))
        alone = median(interleave({"aotc": aotc}, runs, settle=no_pause)["aotc"])
        for spinning in (True, False):
            ort, _ = ort_engine(ort_session(path, threads, spinning), inputs)
            spin_rows.append(("onnxruntime", spinning, _ms(cpu_after_run(ort))))
            ort_alone = median(interleave({"ort": ort}, runs, settle=no_pause)["ort"])
            rows.append(("alone", spinning, "", _ms(alone), _ms(ort_alone)))
            for settle in SETTLES:
                t = interleave({"aotc": aotc, "ort": ort}, runs, settle=settle_by_name(settle))
                rows.append(("interleaved, blocks of 5", spinning, settle, _ms(median(t["aotc"])),
                             _ms(median(t["ort"]))))
    return spin_rows, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet_tiny", help="a sample model or an .onnx path")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    path = Path(args.model) if args.model.endswith(".onnx") else \
        HERE.parent / "models" / f"{args.model}.onnx"
    print(f"load average: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        bundle = build_shared(path, Path(tmp) / "bundle")
        spin_rows, rows = study(path, bundle, args.threads, args.runs)
    print_rows(("engine", "ort spinning", "CPU ms burnt in the 200 ms after a run"), spin_rows,
               args.markdown)
    print()
    print_rows(("setting", "ort spinning", "before each turn", "aotc median ms", "ort median ms"),
               rows, args.markdown)


if __name__ == "__main__":
    main()
