"""The tuner: picks each kernel's configuration, from the tuning log, from measurements within a
time budget, or from the cost model alone.

The compiler hands it every kernel's space first (`tune`), then asks for one configuration per
kernel while it builds them (`choose`). Identical kernels (same `space.key()`) are tuned once.
The budget is split across kernels in proportion to their estimated time, heaviest first; each
kernel tuned measures at least its start points. Results go to the tuning log.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import AotcError
from lowering.search.anneal import (
    AnnealResult,
    anneal,
    choose_by_model,
    config_key,
    random_config,
    space_size,
)
from lowering.search.measure import Measurement, same_outputs
from lowering.search.space import Config, ScheduleSpace
from lowering.search.tuning_log import TuningLog, space_hash


@dataclass
class TuneProgress:
    """What the tuner reports after each measured batch (and once when it starts a kernel)."""

    elapsed: float  # seconds of the budget spent
    budget: float
    kernel: int  # 1-based index of the kernel being tuned
    kernels: int
    label: str
    default_seconds: float  # measured, on the bundle's threads (estimated from one core)
    best_seconds: float
    measured: int  # configurations measured for this kernel


@dataclass
class KernelResult:
    label: str
    default_seconds: float
    best_seconds: float
    measured: int


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def label_of(space: ScheduleSpace) -> str:
    shape = "x".join(map(str, space.outputs[0].shape)) if space.outputs else "?"
    return f"{space.kind} [{shape}]"


class Tuner:
    def __init__(self, budget_seconds: float = 0.0, log_path: Path | None = None,
                 progress: Callable[[TuneProgress], None] | None = None, *,
                 warn: Callable[[str], None] | None = None, seed: int = 0) -> None:
        if not math.isfinite(budget_seconds) or budget_seconds < 0:
            raise AotcError(f"--tune must be a number of seconds ≥ 0, got {budget_seconds}")
        self.budget = float(budget_seconds)
        self.progress = progress
        self.warn = warn or _warn
        self.seed = seed
        self.log = TuningLog(log_path, self.warn) if log_path is not None else None
        self.chosen: dict[str, Config] = {}  # space hash -> measured best, this run
        self.by_model: dict[str, Config] = {}  # space hash -> the cost model's choice
        self.results: list[KernelResult] = []
        self.measure_calls = 0  # compiles of candidate batches (tests count them)
        self.reused = 0  # kernels whose configuration came from the log

    @property
    def wants_spaces(self) -> bool:
        """Whether `tune` needs every kernel's space before the compiler builds them."""
        return self.budget > 0

    # phase 1 -------------------------------------------------------------------------------
    def tune(self, spaces: Sequence[ScheduleSpace]) -> None:
        if self.budget <= 0 or not spaces:
            return
        target = spaces[0].target
        if not target.runs_here():
            raise AotcError(f"--tune measures kernels on this machine, which cannot run code for "
                            f"target '{target.name}'",
                            hint="tune with --target cpu (or a target this CPU supports), or "
                                 "drop --tune")
        groups: dict[str, tuple[ScheduleSpace, int]] = {}
        for s in spaces:
            if not s.knobs or space_size(s.knobs) < 2:
                continue
            key = space_hash(s)
            space, count = groups.get(key, (s, 0))
            groups[key] = (space, count + 1)
        todo = []
        for key, (space, count) in groups.items():
            if self.log is not None and self.log.lookup(space, key) is not None:
                self.reused += 1
                continue
            todo.append((space.threaded_cost(space.default_config()) * count, key, space))
        todo.sort(key=lambda w: -w[0])
        t0 = time.perf_counter()
        weight_left = sum(w for w, _, _ in todo)
        for i, (weight, key, space) in enumerate(todo, 1):
            left = self.budget - (time.perf_counter() - t0)
            if left <= 0:
                break
            share = left * weight / weight_left if weight_left > 0 else left / (len(todo) - i + 1)
            weight_left -= weight
            self._tune_one(space, key, share, i, len(todo), t0)

    def _tune_one(self, space: ScheduleSpace, key: str, share: float, index: int, count: int,
                  t0: float) -> None:
        label = label_of(space)
        measurer = space.target.measurer(space, seed=self.seed)
        reference: list[Measurement] = []
        default = space.default_config()

        def evaluate(configs: list[Config]) -> list[float]:
            self.measure_calls += 1
            try:
                runs = measurer.measure(configs)
            except Exception as e:  # a candidate that does not build or link: skip the batch
                self.warn(f"tuning {label}: a batch of candidates failed ({e}); skipped")
                return [math.inf] * len(configs)
            if not reference:  # candidates are checked against the default's outputs
                if config_key(configs[0]) != config_key(default):
                    return [math.inf] * len(configs)
                reference.append(runs[0])
            out = []
            for c, m in zip(configs, runs, strict=True):
                if not same_outputs(m.outputs, reference[0].outputs):
                    self.warn(f"tuning {label}: configuration {config_key(c)} computes "
                              "different results; rejected")
                    out.append(math.inf)
                else:
                    out.append(space.threaded_cost(c, m.seconds))
            return out

        default_seconds = math.inf

        def report(r: AnnealResult) -> None:
            nonlocal default_seconds
            default_seconds = r.measured.get(config_key(default), default_seconds)
            if self.progress:
                self.progress(TuneProgress(time.perf_counter() - t0, self.budget, index, count,
                                           label, default_seconds, r.seconds, len(r.measured)))

        rng = random.Random(self.seed)
        starts = [default, choose_by_model(space, self.seed)]
        starts += [random_config(space.knobs, rng) for _ in range(2)]
        unique = list({config_key(space.canonical(c)): c for c in starts}.values())
        result = anneal(space.knobs, evaluate, space.threaded_cost, unique, budget_s=share,
                        rng=rng, on_round=report, canonical=space.canonical)
        if not math.isfinite(result.seconds):
            return  # nothing ran: the cost model decides this kernel
        self.chosen[key] = result.best
        self.results.append(KernelResult(label, default_seconds, result.seconds,
                                         len(result.measured)))
        if self.log is not None:
            self.log.add(key, space, result.best, result.seconds, default_seconds)

    def summary(self) -> str:
        """One line for the compile report."""
        parts = []
        if self.results:
            before = sum(r.default_seconds for r in self.results)
            after = sum(r.best_seconds for r in self.results)
            parts.append(f"{len(self.results)} kernels measured "
                         f"({before / after:.2f}x faster than their defaults)")
        elif self.budget > 0:
            parts.append("no kernel measured")
        if self.reused:
            parts.append(f"{self.reused} from the log")
        if self.log is not None:
            parts.append(f"log {self.log.path}")
        return ", ".join(parts)

    # phase 2 -------------------------------------------------------------------------------
    def choose(self, space: ScheduleSpace) -> Config:
        if not space.knobs:
            return space.default_config()
        key = space_hash(space)
        if key in self.chosen:
            return self.chosen[key]
        if self.log is not None:
            logged = self.log.lookup(space, key)
            if logged is not None:
                return logged
        if key not in self.by_model:  # identical kernels are ranked once
            self.by_model[key] = choose_by_model(space, self.seed)
        return self.by_model[key]
