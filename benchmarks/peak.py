"""The machine's fp32 peak, measured: what "% of peak" in bench_ops divides by.

Method. `targets/cpu/probes.c` (its `fma` probe) is compiled with the system compiler (`cc -O2 -march=native -pthread`), so it
uses the widest vector FMA the machine has (AVX-512 here: 16 lanes). Each thread runs NACC
independent chains `acc[k] = acc[k] * m + a` (24 chains with AVX-512, 12 otherwise) for a fixed
time; the chains are independent, so with NACC >= FMA latency x FMA units (4 x 2 = 8 on Cascade
Lake) the loop runs at the FMA units' throughput and nothing else (no loads or stores inside).
FLOPs = 2 x lanes x NACC x iterations. The rate is each thread's FLOPs divided by its own CPU
time (CLOCK_THREAD_CPUTIME_ID), summed over threads: on a shared machine other processes take
turns on the cores, and wall time would count their turns (the wall-clock rate is printed too).
Each figure is the best of `--reps` runs (a peak is a best case). One thread gives the per-core peak; one thread per core gives
the all-cores peak (lower when the cores slow down under AVX-512 load, or when other processes
hold a core). The same program with `-DFORCE_LANES=8` gives the 256-bit figure, for reference.

    python benchmarks/peak.py [--reps 5] [--seconds 0.3] [--markdown]
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from table import print_rows  # noqa: E402

from targets.cpu.calibrate import probe_binary  # noqa: E402


@dataclass(frozen=True)
class Peak:
    lanes: int
    chains: int
    threads: int
    gflops: float  # from each thread's CPU time
    wall_gflops: float  # FLOPs / wall time of the whole run

    @property
    def per_core(self) -> float:
        return self.gflops / self.threads


def measure_peak(threads: int = 1, reps: int = 5, seconds: float = 0.3,
                 lanes: int | None = None) -> Peak:
    """Best of `reps` runs of `threads` FMA threads, `seconds` each."""
    best: Peak | None = None
    for _ in range(reps):
        out = subprocess.run([str(probe_binary(lanes)), "fma", str(threads), str(seconds)], check=True,
                             capture_output=True, text=True).stdout.split()
        width, chains, n, flops, wall, on_cpu = (int(out[0]), int(out[1]), int(out[2]),
                                                 float(out[3]), float(out[4]), float(out[5]))
        p = Peak(width, chains, n, on_cpu, flops / wall / 1e9)
        if best is None or p.gflops > best.gflops:
            best = p
    assert best is not None
    return best


@functools.cache
def cached_peak(threads: int, lanes: int | None = None) -> Peak:
    """The peak for `threads` threads (at `lanes` floats per FMA, default the widest),
    measured once per process (for bench_ops)."""
    return measure_peak(threads, reps=3, seconds=0.2, lanes=lanes)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    rows = []
    native = measure_peak(1, 1, 0.01).lanes
    for lanes in (None, 8) if native > 8 else (None,):
        for threads in sorted({1, cores}):
            p = measure_peak(threads, args.reps, args.seconds, lanes)
            rows.append((f"{p.lanes * 32}-bit", p.chains, threads, f"{p.gflops:.1f}",
                         f"{p.per_core:.1f}", f"{p.wall_gflops:.1f}"))
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print_rows(("vector FMA", "chains", "threads", "GFLOP/s", "GFLOP/s per core",
                "GFLOP/s by wall time"), rows, args.markdown)


if __name__ == "__main__":
    main()
