"""What the tuner asks of a target's measurements: a measurer runs configurations of one schedule
space on the machine and returns each one's median time and outputs. Targets implement it
(`Target.measurer`; the CPU's is `targets/cpu/measure.py`), so that lowering needs no target.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lowering.loop_ir import format_kernel
from lowering.search.space import BuiltKernel, Config, ScheduleSpace


@dataclass
class Measurement:
    seconds: float  # median time of one call
    outputs: list[np.ndarray]


class KernelMeasurer(Protocol):
    def measure(self, configs: Sequence[Config]) -> list[Measurement]:
        """One measurement per configuration, in order (configurations that build the same
        kernel are timed once)."""
        ...


class BatchMeasurer:
    """What every target's measurer shares: inputs drawn once (all candidates see the same
    data), configurations that build the same kernel timed once, and samples interleaved
    across candidates. A target implements `_measure` (build a batch, time it)."""

    def __init__(self, space: ScheduleSpace, *, seed: int = 0, sample_seconds: float = 2e-3,
                 samples: int = 5) -> None:
        self.space = space
        self.sample_seconds = sample_seconds
        self.samples = samples
        self.inputs = draw_inputs(space, seed)
        self._seen: dict[str, Measurement] = {}  # canonical kernel text -> its measurement

    def measure(self, configs: Sequence[Config]) -> list[Measurement]:
        """One measurement per configuration. Configurations that build the same kernel (knob
        values a space ignores in some modes) are compiled and timed once, in this call or an
        earlier one."""
        built_all = [self.space.build(c, "cand") for c in configs]
        texts = [format_kernel(b.kernel, canonical=True) for b in built_all]
        fresh: dict[str, BuiltKernel] = {}
        for t, b in zip(texts, built_all, strict=True):
            if t not in self._seen and t not in fresh:
                fresh[t] = b
        if fresh:
            for t, m in zip(fresh, self._measure(list(fresh.values())), strict=True):
                self._seen[t] = m
        return [self._seen[t] for t in texts]

    def _measure(self, built: list[BuiltKernel]) -> list[Measurement]:
        raise NotImplementedError

    def timed(self, runs: list[tuple[Callable[[], None], int, list[np.ndarray]]]
              ) -> list[Measurement]:
        """The median time of each (call, repetitions per sample, outputs), its samples
        interleaved across the candidates: a burst of load elsewhere on the machine then
        slows all of them, not the one that happened to run during it."""
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(self.samples):
            for i, (call, reps, _) in enumerate(runs):
                t0 = time.perf_counter()
                for _ in range(reps):
                    call()
                times[i].append((time.perf_counter() - t0) / reps)
        return [Measurement(statistics.median(t), outs)
                for t, (_, _, outs) in zip(times, runs, strict=True)]


def draw_inputs(space: object, seed: int = 0) -> list[np.ndarray]:
    """Inputs every candidate of `space` (a ScheduleSpace) is measured on: its constant
    inputs' values, random floats, and integers 0 (they may be indices: 0 is in range)."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for t, const in zip(space.inputs, space.consts, strict=True):  # type: ignore[attr-defined]
        dtype = np.dtype(t.dtype)
        if const is not None:
            out.append(np.asarray(const))
        elif t.dtype in ("float32", "float64"):
            out.append(rng.standard_normal(t.shape).astype(dtype))
        else:
            out.append(np.zeros(t.shape, dtype=dtype))
    return out


def same_outputs(a: list[np.ndarray], b: list[np.ndarray], tol: float = 1e-3) -> bool:
    """Whether two candidates computed the same thing (up to reassociation of float sums)."""
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if x.dtype.kind == "f":
            scale = max(1.0, float(np.max(np.abs(y))) if y.size else 1.0)
            if not np.allclose(x, y, rtol=tol, atol=tol * scale, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True
