"""Waiting for a process's spinning worker threads to stop, before timing a run: the benchmarks'
turns and `--measure-islands` alternate engines whose thread pools spin after a run
(onnxruntime's workers ~30 ms of CPU, OpenBLAS's longer, aotc's 0.2 ms; benchmarks/spin_study.py),
and a spinning worker of the engine that just ran holds the core the next run needs."""

from __future__ import annotations

import time


def quiesce(step: float = 0.005, idle: float = 0.0005, limit: float = 1.0) -> None:
    """Sleeps until this process's other threads stop burning CPU: until a `step`-second sleep
    adds less than `idle` seconds to the process CPU time (all threads), at most `limit` seconds.
    A fixed pause that covers the spinning on an idle machine does not on a loaded one, where a
    spinning thread gets only part of a core and so spins for longer."""
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        c0 = time.process_time()
        time.sleep(step)
        if time.process_time() - c0 < idle:
            return
