"""Measure candidate kernels on this machine (the CPU target's side of the tuner's
`KernelMeasurer`, lowering/search/measure.py): several configurations of one space compiled
into one module (one LLVM and one cc run per batch), linked with a serial `aotc_parallel_for`,
run on random inputs through ctypes; the median time of each and its outputs (to check them).
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import ml_dtypes  # noqa: F401 (numpy's dtype "bfloat16")
import numpy as np

from lowering import te
from lowering.loop_ir import Kernel, kernel_dims
from lowering.search.measure import BatchMeasurer, Measurement
from lowering.search.space import BuiltKernel
from targets.cpu.codegen import ModuleBuilder, optimize_and_emit
from targets.cpu.target import CpuTarget, enabled_features, host_target

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

NP_DTYPE = {t: np.dtype(t) for t in te.DTYPES}  # te's names are numpy's


def link_serial(kernel_object: bytes) -> ctypes.CDLL:
    """The kernel object linked with a serial aotc_parallel_for into a loaded shared library."""
    with tempfile.TemporaryDirectory(prefix="aotc_k_") as d:
        tmp = Path(d)
        (tmp / "k.o").write_bytes(kernel_object)
        (tmp / "rt.c").write_text(_SERIAL_RUNTIME)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp / "k.so"), str(tmp / "rt.c"),
                        str(tmp / "k.o"), "-lm"], check=True)
        return ctypes.CDLL(str(tmp / "k.so"))  # stays mapped after the file is gone


def kernel_arguments(kernel: Kernel, inputs: Sequence[np.ndarray]
                     ) -> tuple[list[np.ndarray], ctypes.Array]:
    """An array per kernel buffer (the inputs in the buffer's dtype, zeroed outputs and scratch)
    and the `bufs` pointer array of the kernel ABI; keep the arrays alive while calling."""
    arrays = []
    for i, b in enumerate(kernel.buffers):
        if i < len(inputs):
            arrays.append(np.asarray(inputs[i], dtype=NP_DTYPE[b.dtype], order="C"))
        else:
            arrays.append(np.zeros(b.shape, dtype=NP_DTYPE[b.dtype]))
    return arrays, (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def bound_dims(kernel: Kernel) -> ctypes.Array | None:
    """The kernel's `dims` argument with each run-time dimension at its bound (the sizes its
    buffers are laid out for), None for a kernel that reads none."""
    dims = kernel_dims(kernel)
    if not dims:
        return None
    values = [0] * (max(d.index for d in dims) + 1)
    for d in dims:
        values[d.index] = d.hi
    return (ctypes.c_int64 * len(values))(*values)


def kernel_function(lib: ctypes.CDLL, name: str):
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int32
    return fn


def runs_on_host(target: object) -> bool:
    """Whether kernels for `target` can run here (same architecture, no feature missing)."""
    host = host_target()
    if not isinstance(target, CpuTarget):
        return False
    if target.triple.split("-")[0] != host.triple.split("-")[0]:
        return False
    return enabled_features(target.features) <= enabled_features(host.features)


class Measurer(BatchMeasurer):
    """Runs configurations of one space on this CPU."""

    def _measure(self, built: list[BuiltKernel]) -> list[Measurement]:
        for i, b in enumerate(built):
            b.kernel.name = f"cand{i}"
        mb = ModuleBuilder(self.space.target)  # type: ignore[arg-type]
        for b in built:
            mb.add_kernel(b.kernel)
        obj, _ = optimize_and_emit(mb.text(), self.space.target)  # type: ignore[arg-type]
        lib = link_serial(obj)
        return self.timed([self._prepare(lib, b) for b in built])

    def _prepare(self, lib: ctypes.CDLL, built: BuiltKernel
                 ) -> tuple[Callable[[], None], int, list[np.ndarray]]:
        """A call of the candidate on bound arguments, its repetitions per sample, and its
        outputs (from a first call, which also warms the caches)."""
        kernel: Kernel = built.kernel
        inputs = [built.const_transforms[i](a) if i in built.const_transforms else a
                  for i, a in enumerate(self.inputs)]
        arrays, ptrs = kernel_arguments(kernel, inputs)
        fn = kernel_function(lib, kernel.name)
        dims = bound_dims(kernel)

        def call(keep: list[np.ndarray] = arrays) -> None:  # `keep`: the arrays stay alive
            if fn(None, ptrs, dims) != 0:
                raise RuntimeError(f"candidate kernel {kernel.name} returned an error")

        t0 = time.perf_counter()
        call()
        once = max(time.perf_counter() - t0, 1e-7)
        n_in = len(inputs)
        outputs = [arrays[n_in + j].copy() for j in range(len(self.space.outputs))]
        return call, max(1, int(self.sample_seconds / once)), outputs
