"""What bench_ops and bench_models share: engines as zero-argument callables, timed interleaved.

An engine is set up once (inputs and outputs bound, nothing allocated per call) and each call runs
one inference. `interleave` gives every engine the same conditions: after a warm-up the engines
take turns in blocks of `block` runs, so slow drifts of the shared machine (other processes,
frequency) land on all of them alike; before each turn it waits until the previous engine's
worker threads have stopped spinning (`quiesce`; spin_study.py and RESULTS.md say why: a worker
that spins after a run holds a core that the next engine needs).
"""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from aotc.package.loaded import LoadedBundle, _pointer_array
from aotc.quiesce import quiesce

Engine = Callable[[], object]


def fixed_pause(seconds: float) -> Callable[[], None]:
    return lambda: time.sleep(seconds)


def no_pause() -> None:
    pass


def flush_files() -> None:
    """Writes the files compiling left dirty to disk now: left to the kernel, the writeback of
    a big bundle (BERT's: ~0.5 GB of weights and objects) starts ~30 s later on either core,
    in the middle of the timed runs (`resnet_tiny` at 2 threads read 0.103-0.107 ms there
    against 0.063-0.065 ms otherwise, aotc and onnxruntime alike)."""
    if hasattr(os, "sync"):
        os.sync()


def settle_by_name(name: str) -> Callable[[], None]:
    """'quiesce', 'none', or a pause in seconds ('0.02')."""
    if name == "quiesce":
        return quiesce
    if name == "none":
        return no_pause
    return fixed_pause(float(name))


def interleave(engines: dict[str, Engine], runs: int, block: int = 5, warmup: int = 3,
               settle: Callable[[], None] = quiesce,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each engine: `warmup` untimed calls each, then turns of `block` calls
    until every engine has `runs` timings, `settle()` before each turn. `clock` is wall time, or
    `time.thread_time` (see CLOCKS)."""
    for fn in engines.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in engines}
    block = max(1, min(block, runs))
    for _ in range(math.ceil(runs / block)):
        for name, fn in engines.items():
            settle()
            samples = times[name]
            for _ in range(block):
                t0 = clock()
                fn()
                samples.append(clock() - t0)
    return times


def load_average() -> str:
    """The 1-minute load average: how busy the shared machine was around a measurement."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


# "thread": the calling thread's CPU time, which leaves out the time other processes hold its
# core; only meaningful when the engines run on the calling thread alone (1 thread: aotc, and
# onnxruntime with intra_op_num_threads=1, run inline), so the scripts allow it at 1 thread only.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "thread": time.thread_time}


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def ort_session(model: Path | onnx.ModelProto, threads: int,
                spinning: bool = True, library: Path | None = None) -> ort.InferenceSession:
    """onnxruntime with all graph optimisations, `threads` intra-op threads, one inter-op, and
    the custom-op `library` of `aotc optimize --emit ort` if given."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if library is not None:
        so.register_custom_ops_library(str(library))
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])


HUGE_PAGE = 2 << 20
Allocate = Callable[[tuple[int, ...], np.dtype], np.ndarray]


def huge_pages_empty(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """An uninitialised array in memory advised for transparent huge pages (2 MB; a hint
    that the kernel may ignore), like the workspace aotc's runtime keeps a network's
    activations in: a layer timed on such buffers reads and writes them as it would inside
    a network (in 4 KB pages, a kernel that reads rows far apart, as a 1x1 convolution read
    in place does, takes a TLB miss per row)."""
    dtype = np.dtype(dtype)
    nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=flags) if flags else \
        mmap.mmap(-1, nbytes + HUGE_PAGE)
    raw = np.frombuffer(region, np.uint8)  # keeps `region` alive
    start = (-raw.ctypes.data) % HUGE_PAGE
    if hasattr(region, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def in_huge_pages(a: np.ndarray) -> np.ndarray:
    out = huge_pages_empty(a.shape, a.dtype)
    out[...] = a
    return out


def ort_engine(sess: ort.InferenceSession, inputs: Sequence[np.ndarray],
               allocate: Allocate | None = None) -> tuple[Engine, list[np.ndarray]]:
    """A call of `sess` through an IO binding with preallocated outputs (the least per-call
    overhead the Python API offers; `allocate` makes them, default np.empty); returns the
    engine and its output arrays."""
    names = [meta.name for meta in sess.get_inputs()]
    binding = sess.io_binding()
    for name, x in zip(names, inputs, strict=True):
        binding.bind_cpu_input(name, x)
    outs = []
    # one plain run gives the output shapes and dtypes, whatever the graph declares
    first = sess.run(None, dict(zip(names, inputs, strict=True)))
    for meta, ref in zip(sess.get_outputs(), first, strict=True):
        ref = np.asarray(ref)
        out = (allocate or np.empty)(ref.shape, ref.dtype)
        binding.bind_output(meta.name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
        outs.append(out)
    run = sess.run_with_iobinding
    return (lambda: run(binding)), outs


def aotc_engine(bundle: LoadedBundle, inputs: Sequence[np.ndarray],
                allocate: Allocate | None = None, length: int | None = None
                ) -> tuple[Engine, list[np.ndarray]]:
    """A call of the bundle's NAME_run_context, or of NAME_run_context_dims at `length` for a
    bundle compiled with a length range (create() the context first; `allocate` makes the
    outputs, default 64-byte aligned); returns the engine and its output arrays. Raises if
    a call fails."""
    ins, outs = bundle._prepare(list(inputs), length)
    if allocate is not None:
        outs = [allocate(o.shape, o.dtype) for o in outs]
    pin, pout = _pointer_array(ins), _pointer_array(outs)
    ctx = bundle._ctx
    keep = (ins, outs, pin, pout)  # what the pointer arrays point into: alive with the engine
    if length is None:
        run = bundle._run_context

        def call() -> None:
            if run(ctx, pin, pout) != 0:
                raise RuntimeError(f"{bundle.name}_run_context failed ({len(keep)} buffers)")

        return call, outs
    run_dims, dims = bundle._run_context_dims, (ctypes.c_int64 * 1)(length)

    def call_dims() -> None:
        if run_dims(ctx, dims, pin, pout) != 0:
            raise RuntimeError(f"{bundle.name}_run_context_dims failed at {length} "
                               f"({len(keep)} buffers)")

    # dense at the length: a prefix of each bound-sized output
    return call_dims, [o.reshape(-1)[:math.prod(t.at_length(length))].reshape(t.at_length(length))
                       for o, t in zip(outs, bundle.outputs, strict=True)]


def set_blas_threads(threads: int) -> bool:
    """Sets numpy's OpenBLAS thread count if numpy bundles OpenBLAS; False if it cannot."""
    libs = Path(np.__file__).parent.parent / "numpy.libs"
    for lib in sorted(libs.glob("*openblas*.so*")) if libs.is_dir() else []:
        dll = ctypes.CDLL(str(lib))
        for sym in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                    "openblas_set_num_threads"):
            if hasattr(dll, sym):
                getattr(dll, sym)(ctypes.c_int(threads))
                return True
    return False
