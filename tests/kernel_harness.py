"""Run loop-IR kernels for tests: the object the bundle would ship, linked into a shared library
with a serial `aotc_parallel_for`, called through ctypes with numpy arrays."""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lowering import te
from lowering.default_schedule import default_schedule
from lowering.lower import lower_kernel
from lowering.schedule import StageSchedule
from targets.cpu.codegen import ModuleBuilder, optimize_and_emit
from targets.cpu.target import host_target

_SERIAL_RUNTIME = r"""
#include <stdint.h>
void aotc_parallel_for(void *ctx, void (*body)(void *, int64_t, int64_t), void *env, int64_t n) {
    (void)ctx;
    /* split in uneven chunks so that tests catch bodies that ignore lo */
    int64_t mid = n / 3;
    if (mid > 0) body(env, 0, mid);
    body(env, mid, n);
}
"""

def link_serial(kernel_object: bytes) -> ctypes.CDLL:
    """The kernel object linked with a serial aotc_parallel_for into a loaded shared library."""
    tmp = Path(tempfile.mkdtemp(prefix="aotc_k_"))
    (tmp / "k.o").write_bytes(kernel_object)
    (tmp / "rt.c").write_text(_SERIAL_RUNTIME)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp / "k.so"), str(tmp / "rt.c"),
                    str(tmp / "k.o"), "-lm"], check=True)
    return ctypes.CDLL(str(tmp / "k.so"))


NP_DTYPE = {"float32": np.float32, "float64": np.float64, "int64": np.int64,
            "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def run_te(
    inputs: Sequence[te.Tensor],
    outputs: Sequence[te.Tensor],
    arrays: Sequence[np.ndarray],
    schedule=None,
) -> list[np.ndarray]:
    target = host_target()
    sched = schedule or (lambda t: default_schedule(t, target.vector_lanes_f32))
    kernel = lower_kernel("k_test", inputs, outputs, sched)
    mb = ModuleBuilder(target)
    mb.add_kernel(kernel)
    obj, _ = optimize_and_emit(mb.text(), target)
    lib = link_serial(obj)
    bufs = []
    keep: list[np.ndarray] = []
    for b in kernel.buffers:
        if b.role == "input":
            a = np.ascontiguousarray(arrays[len(keep)], dtype=NP_DTYPE[b.dtype])
        else:
            a = np.zeros(b.shape, dtype=NP_DTYPE[b.dtype])
        keep.append(a)
        bufs.append(a.ctypes.data)
    arr = (ctypes.c_void_p * len(bufs))(*bufs)
    fn = lib.k_test
    fn.restype = ctypes.c_int32
    rc = fn(None, arr, None)
    assert rc == 0
    n_in = len(inputs)
    return [keep[n_in + i] for i in range(len(outputs))]


def schedule_with(fn):
    """A schedule function for run_te from a callback that edits a fresh StageSchedule."""

    def make(t: te.Tensor) -> StageSchedule:
        s = StageSchedule(t)
        fn(s)
        return s

    return make
