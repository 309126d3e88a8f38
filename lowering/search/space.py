"""A kernel's schedule space: named knobs with finite options, a builder and a cost model.

Every kernel the compiler emits comes from a `ScheduleSpace`. A configuration (one option per
knob, a JSON-serialisable dict) builds a loop-IR kernel; the cost model estimates its run time
without running it; the tuner (`lowering.search.tuner`) may measure configurations instead.
Spaces come from static analysis of the computation (`space_for`), never from operator names.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lowering import te
from lowering.loop_ir import Kernel, format_kernel
from lowering.machine import Target

Config = dict[str, object]


@dataclass(frozen=True)
class Knob:
    name: str
    options: tuple[object, ...]  # JSON-serialisable values; the first is a sensible default


@dataclass
class BuiltKernel:
    """A kernel plus what the compiler must do to constant inputs before it runs (pre-packed
    weights): `const_transforms[i]` maps input i's compile-time value to the array the kernel
    reads (its shape is then `kernel.buffers[i].shape`)."""

    kernel: Kernel
    const_transforms: dict[int, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)


class ScheduleSpace(ABC):
    """Schedules of one computation (`inputs` -> `outputs`) on one target."""

    def __init__(self, inputs: Sequence[te.Tensor], outputs: Sequence[te.Tensor],
                 consts: Sequence[np.ndarray | None], target: Target) -> None:
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.consts = list(consts)
        self.target = target
        self.knobs: list[Knob] = []

    @property
    @abstractmethod
    def kind(self) -> str:
        """Which family of schedules this is ("default", "gemm", ...)."""

    @abstractmethod
    def build(self, config: Config, name: str = "k") -> BuiltKernel:
        """The kernel for `config` (every knob set to one of its options)."""

    @abstractmethod
    def cost(self, config: Config) -> float:
        """Estimated run time in seconds on one core (the cost model)."""

    def canonical(self, config: Config) -> Config:
        """A representative of the configurations that build the same kernel as `config`:
        the search measures each such class once. The identity unless a space knows better."""
        return config

    def threaded_cost(self, config: Config, one_core: float | None = None) -> float:
        """Estimated run time on the bundle's threads: the one-core time (`one_core`, e.g.
        measured; else the cost model) times the modelled speedup of the kernel's parallel
        loops. Tuning compares candidates by this, so that a schedule is not chosen for a serial
        gain that costs its parallelism."""
        from lowering.search.cost_model import stage_seconds, threaded_seconds

        kernel = self.build(config).kernel
        stages = stage_seconds(kernel, self.target.machine)
        serial = sum(stages)
        ratio = threaded_seconds(kernel, stages, self.target.machine.cores) / serial \
            if serial > 0 else 1.0
        return (self.cost(config) if one_core is None else one_core) * ratio

    def in_place_input(self, config: Config) -> int | None:
        """The input (its position) whose memory the kernel built with `config` may write its
        output over, when nothing reads that input afterwards; None: no input."""
        return None

    def flops(self) -> float:
        """Arithmetic work of the computation (for splitting a tuning budget)."""
        return float(sum(int(np.prod(t.shape)) for t in self.outputs))

    def default_config(self) -> Config:
        """The first option of every knob."""
        return {k.name: k.options[0] for k in self.knobs}

    def model_best_config(self) -> Config:
        """The configuration the cost model ranks best over the whole space (for the small
        template spaces: their `default_config`). A bundle runs at its compiled thread count
        or, overridden at run time, at one thread: the rank is the sum of both times, so that
        balancing tiles over the threads does not buy a configuration that is much slower on
        one core. Ranked once per space and knobs (each candidate's threaded cost builds its
        kernel; the tuner and the tuning log's key both ask)."""
        knobs = tuple((k.name, k.options) for k in self.knobs)
        memo = getattr(self, "_model_best", None)
        if memo is None or memo[0] != knobs:
            best: tuple[float, Config] | None = None
            for combo in itertools.product(*[k.options for k in self.knobs]):
                cfg = {k.name: v for k, v in zip(self.knobs, combo, strict=True)}
                one_core = self.cost(cfg)
                c = one_core + self.threaded_cost(cfg, one_core)
                if best is None or c < best[0]:
                    best = (c, cfg)
            assert best is not None
            memo = self._model_best = (knobs, best[1])
        return dict(memo[1])

    def key(self) -> str:
        """What the tuning log is keyed by: the computation (kernel text at the default
        configuration, names canonical), the space kind and the target."""
        text = format_kernel(self.build(self.default_config()).kernel, canonical=True)
        return f"{self.kind}|{self.target.name}|{self.target.cpu}|{text}"
