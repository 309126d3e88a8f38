"""Run loop-IR kernels for tests: the object the bundle would ship, linked into a shared library
with a serial `aotc_parallel_for`, called through ctypes with numpy arrays."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from lowering import te
from lowering.default_schedule import default_schedule
from lowering.loop_ir import Kernel
from lowering.lower import lower_kernel
from lowering.schedule import StageSchedule
from targets.cpu.codegen import ModuleBuilder, optimize_and_emit
from targets.cpu.measure import kernel_arguments, kernel_function, link_serial
from targets.cpu.target import CpuTarget as Target
from targets.cpu.target import host_target


def run_te(
    inputs: Sequence[te.Tensor],
    outputs: Sequence[te.Tensor],
    arrays: Sequence[np.ndarray],
    schedule=None,
) -> list[np.ndarray]:
    target = host_target()
    sched = schedule or (lambda t: default_schedule(t, target.vector_lanes_f32))
    kernel = lower_kernel("k_test", inputs, outputs, sched)
    return run_kernel(kernel, arrays[: len(inputs)])


def run_kernel(kernel: Kernel, arrays: Sequence[np.ndarray], target: Target | None = None,
               dims: Sequence[int] = ()) -> list[np.ndarray]:
    """Compile `kernel` for `target` (default: the host; it must run here) and run it on
    `arrays` (its inputs) with `dims` (the run-time dimensions' values, for a kernel that reads
    them); returns its outputs (they start as zeros). Float scratch starts as NaN, so a stage
    that reads scratch nobody wrote shows up."""
    target = target or host_target()
    mb = ModuleBuilder(target)
    mb.add_kernel(kernel)
    obj, _ = optimize_and_emit(mb.text(), target)
    lib = link_serial(obj)
    bufs, ptrs = kernel_arguments(kernel, arrays)
    for a, b in zip(bufs, kernel.buffers, strict=True):
        if b.role == "scratch" and a.dtype.kind == "f":
            a.fill(np.nan)
    dims_arg = (ctypes.c_int64 * len(dims))(*dims) if dims else None
    assert kernel_function(lib, kernel.name)(None, ptrs, dims_arg) == 0
    return [a for a, b in zip(bufs, kernel.buffers, strict=True) if b.role == "output"]


def schedule_with(fn):
    """A schedule function for run_te from a callback that edits a fresh StageSchedule."""

    def make(t: te.Tensor) -> StageSchedule:
        s = StageSchedule(t)
        fn(s)
        return s

    return make
