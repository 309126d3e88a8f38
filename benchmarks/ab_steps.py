"""One model compiled twice, with and without some graph passes or for two machine models of
this host, timed step by step.

    python benchmarks/ab_steps.py benchmarks/models/resnet50.onnx --without pad_in_producer
        [--machine-a FILE] [--runs 40] [--threads N] [--min-change 0.04] [--markdown]

`--machine-a FILE` compiles program A for that machine file (`aotc calibrate`'s form, as
`aotc optimize --machine`), B for the host's own model: what a change of machine row does to
the schedules chosen, measured on this machine.

Both programs run in model order on the serial runtime, or with `--threads N` compiled for N
threads and linked with the runtime's pool of N (as `profile_model.py` runs one), their
passes alternating, so that a burst of load on a shared host hits both alike. Reports, per step
whose median moved by more than `--min-change`, both medians and their ratio (B: all passes, A:
without the named ones), and the sums of the steps' medians and minimums. Steps are paired by
position where the passes compared keep the kernel sequence; where they do not (fusion,
`winograd_conv`), only the sums are reported.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from profile_model import pooled_library  # noqa: E402
from program_runner import bind_steps  # noqa: E402
from table import print_rows  # noqa: E402

from aotc.driver import compile_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--without", nargs="+", default=[], help="passes program A leaves out")
    ap.add_argument("--machine-a", type=Path, default=None,
                    help="compile program A for this machine file instead of the host's model")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1,
                    help="compile for and run on this many threads (the runtime's pool)")
    ap.add_argument("--min-change", type=float, default=0.04,
                    help="list steps whose median moved by more than this fraction")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if not args.without and args.machine_a is None:
        ap.error("name passes to leave out (--without) or a machine file (--machine-a)")
    programs = [compile_file(args.model, input_shapes=[], threads=args.threads,
                             machine=args.machine_a, disabled_passes=list(args.without))[0],
                compile_file(args.model, input_shapes=[], threads=args.threads)[0]]
    paired = len(programs[0].steps) == len(programs[1].steps)
    with contextlib.ExitStack() as stack:
        times = _alternating_step_times(programs, args.runs, args.threads, stack)
    med = [[statistics.median(ts[2:]) for ts in per] for per in times]
    low = [[min(ts[2:]) for ts in per] for per in times]
    changes = ([f"without {', '.join(args.without)}"] if args.without else []) + \
        ([f"for {args.machine_a.name}"] if args.machine_a else [])
    print(f"{args.model.name}: {args.threads} thread(s), {args.runs} alternating passes; "
          f"A {' and '.join(changes)}, B with every pass for the host")
    print(f"sum of medians: A {sum(med[0]) * 1e3:.2f} ms, B {sum(med[1]) * 1e3:.2f} ms, "
          f"B/A {sum(med[1]) / sum(med[0]):.3f}; of minimums: B/A "
          f"{sum(low[1]) / sum(low[0]):.3f}")
    if not paired:
        print(f"the programs have {len(programs[0].steps)} and {len(programs[1].steps)} "
              "steps: not paired step by step")
        return
    rows = []
    for j, sb in enumerate(programs[1].steps):
        a, b = med[0][j], med[1][j]
        if abs(b / a - 1) > args.min_change:
            rows.append([str(j), sb.node, f"{a * 1e3:.4g}", f"{b * 1e3:.4g}", f"{b / a:.2f}",
                         f"{low[1][j] / low[0][j]:.2f}"])
    print_rows(["step", "node (B)", "A ms", "B ms", "B/A", "B/A of minimums"], rows,
               args.markdown)


def _alternating_step_times(programs: list, runs: int, threads: int,
                            stack: contextlib.ExitStack) -> list[list[list[float]]]:
    """Seconds per run of each step of each program, the programs' passes alternating (two
    warm-up passes first); with threads > 1 each program runs on its own pool of `threads`."""
    rng = np.random.default_rng(0)
    bound = []  # (calls, pool, arrays the pointers point into) per program
    for p in programs:
        lib, pool = None, None
        if threads > 1:
            lib, pool = pooled_library(p, threads, Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="aotc-ab-"))))
            stack.callback(lib.aotc_pool_destroy, pool)
        inputs = [rng.standard_normal(tuple(i.shape)) for i in p.inputs]
        calls, outs, keep = bind_steps(p, inputs, lib=lib)
        bound.append((calls, pool, (outs, keep)))
    times = [[[] for _ in p.steps] for p in programs]
    for _ in range(runs + 2):
        for k, (calls, pool, _alive) in enumerate(bound):
            for j, (fn, ptrs) in enumerate(calls):
                t = time.perf_counter()
                fn(pool, ptrs, None)
                times[k][j].append(time.perf_counter() - t)
    return times


if __name__ == "__main__":
    main()
