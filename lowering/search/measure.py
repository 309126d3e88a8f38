"""What the tuner asks of a target's measurements: a measurer runs configurations of one schedule
space on the machine and returns each one's median time and outputs. Targets implement it
(`Target.measurer`; the CPU's is `targets/cpu/measure.py`), so that lowering needs no target.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lowering.search.space import Config


@dataclass
class Measurement:
    seconds: float  # median time of one call
    outputs: list[np.ndarray]


class KernelMeasurer(Protocol):
    def measure(self, configs: Sequence[Config]) -> list[Measurement]:
        """One measurement per configuration, in order (configurations that build the same
        kernel are timed once)."""
        ...


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
