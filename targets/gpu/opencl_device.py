"""Running GPU kernels through OpenCL from Python (pyopencl): how tests execute every GPU
kernel on PoCL (OpenCL on this CPU), and how a tuner would measure on a device."""

from __future__ import annotations

from functools import cache

import numpy as np

from lowering.loop_ir import Kernel
from targets.gpu.render import render_kernel, render_module


@cache
def _context() -> tuple[object, object] | None:
    try:
        import pyopencl as cl
    except ImportError:
        return None
    try:
        devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error:
        return None
    if not devices:
        return None
    ctx = cl.Context([devices[0]])
    return ctx, cl.CommandQueue(ctx)


def opencl_available() -> bool:
    """Whether pyopencl and an OpenCL device are present."""
    return _context() is not None


def device_name() -> str:
    got = _context()
    assert got is not None, "no OpenCL device"
    return got[0].devices[0].name  # type: ignore[attr-defined]


def opencl_queue() -> tuple[object, object]:
    """The (context, queue) of the first OpenCL device."""
    got = _context()
    if got is None:
        raise RuntimeError("no OpenCL device (pyopencl and an ICD such as PoCL are needed)")
    return got


def device_buffers(kernel: Kernel, inputs: list[np.ndarray]) -> list[object]:
    """A device buffer per kernel buffer in ABI order: the inputs copied in, outputs and
    scratch uninitialised."""
    import pyopencl as cl

    ctx, _ = opencl_queue()
    flags = cl.mem_flags
    ins = [b for b in kernel.buffers if b.role == "input"]
    if len(ins) != len(inputs):
        raise ValueError(f"{kernel.name} takes {len(ins)} inputs, got {len(inputs)}")
    mems = []
    it = iter(inputs)
    for b in kernel.buffers:
        if b.role == "input":
            a = np.ascontiguousarray(next(it), _numpy_dtype(b.dtype)).reshape(-1)
            host = a.view(np.uint8) if a.size else np.zeros(1, np.uint8)
            mems.append(cl.Buffer(ctx, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=host))
        else:
            mems.append(cl.Buffer(ctx, flags.READ_WRITE,
                                  size=max(b.size * _itemsize(b.dtype), 1)))
    return mems


def read_outputs(kernel: Kernel, mems: list[object]) -> list[np.ndarray]:
    """The kernel's outputs, copied back from their device buffers."""
    import pyopencl as cl

    _, queue = opencl_queue()
    result = []
    for b, m in zip(kernel.buffers, mems, strict=True):
        if b.role == "output":
            host = np.empty(b.size * _itemsize(b.dtype), np.uint8)
            cl.enqueue_copy(queue, host, m)
            result.append(host.view(_numpy_dtype(b.dtype)).reshape(b.shape))
    queue.finish()  # type: ignore[attr-defined]
    return result


def run_kernel(kernel: Kernel, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run `kernel` (its stages in order) on the OpenCL device with `inputs` (in ABI order);
    returns its outputs. Scratch buffers are allocated and discarded."""
    import pyopencl as cl

    ctx, queue = opencl_queue()
    rendered = render_kernel(kernel)
    program = cl.Program(ctx, render_module([rendered], "opencl")).build()
    mems = device_buffers(kernel, inputs)
    args: list[object] = []
    for m in mems:
        args += [m, np.int64(0)]
    for launch in rendered.launches:
        fn = cl.Kernel(program, launch.function)
        fn.set_args(*args)
        cl.enqueue_nd_range_kernel(queue, fn, (launch.blocks * launch.threads,),
                                   (launch.threads,))
    return read_outputs(kernel, mems)


def _itemsize(dtype: str) -> int:
    from lowering import te

    return te.ITEMSIZE[dtype]


def _numpy_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)
