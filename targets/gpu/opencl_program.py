"""Running a compiled GPU `Program` through OpenCL from Python (pyopencl): the same buffers
and launches as the bundle's host code (one arena, one weights buffer, a buffer per input and
output, each laid out for the bound of a run-time dimension; each step's launches with
(buffer, byte offset) pairs, then the run-time lengths), for tests on PoCL."""

from __future__ import annotations

import math

import numpy as np

from aotc.package.program import DTYPES, Program, Step, dtype_size


def run_program(program: Program, inputs: list[np.ndarray],
                length: int | None = None) -> list[np.ndarray]:
    """The program's outputs on `inputs`; with a run-time dimension, at `length` (default its
    bound): the inputs are dense at that length (written at the start of their buffers, as
    the bundle's `NAME_run_context_dims` does) and so are the outputs returned."""
    import pyopencl as cl

    from targets.gpu.opencl_device import _context

    assert program.gpu is not None and program.gpu.dialect == "opencl", "an OpenCL program"
    got = _context()
    assert got is not None, "no OpenCL device"
    ctx, queue = got
    n = program.dims[0].hi if program.dims and length is None else length
    if program.dims:
        assert n is not None and program.dims[0].lo <= n <= program.dims[0].hi, n
    for a, t in zip(inputs, program.inputs, strict=True):
        want = t.at_length(n) if n is not None else t.shape
        assert tuple(a.shape) == tuple(want), (t.name, a.shape, want)
    built = cl.Program(ctx, program.gpu.source).build()
    flags = cl.mem_flags

    def buffer(data: bytes | None, size: int) -> object:
        if data:
            return cl.Buffer(ctx, flags.READ_WRITE | flags.COPY_HOST_PTR,
                             hostbuf=np.frombuffer(data, np.uint8).copy())
        return cl.Buffer(ctx, flags.READ_WRITE, size=max(size, 1))

    arena = buffer(None, program.arena_size)
    weights = buffer(bytes(program.weights), len(program.weights))
    ins = []
    for a, t in zip(inputs, program.inputs, strict=True):  # a prefix of the bound's layout
        data = np.ascontiguousarray(a, DTYPES[t.dtype][1]).tobytes()
        ins.append(buffer(data + bytes(t.nbytes - len(data)), t.nbytes))
    lengths = [np.int64(n) for _ in program.dims]
    outs = [buffer(None, t.nbytes) for t in program.outputs]
    storage = {"arena": lambda r: (arena, r.offset), "weight": lambda r: (weights, r.offset),
               "input": lambda r: (ins[r.offset], 0), "output": lambda r: (outs[r.offset], 0)}
    entry: dict[str, object] = {}
    for item in program.steps:
        if not isinstance(item, Step):
            raise ValueError("a GPU program has kernel steps only")
        args: list[object] = []
        for ref in item.args:
            mem, off = storage[ref.storage](ref)
            args += [mem, np.int64(off)]
        for launch in program.gpu.launches[item.kernel]:
            if launch.function not in entry:
                entry[launch.function] = cl.Kernel(built, launch.function)
            fn = entry[launch.function]
            fn.set_args(*args, *lengths)  # type: ignore[attr-defined]
            cl.enqueue_nd_range_kernel(queue, fn, (launch.blocks * launch.threads,),
                                       (launch.threads,))
    result = []
    for mem, t in zip(outs, program.outputs, strict=True):
        host = np.empty(t.nbytes, np.uint8)
        cl.enqueue_copy(queue, host, mem)
        shape = t.at_length(n) if n is not None else t.shape
        count = math.prod(shape)
        result.append(host.view(DTYPES[t.dtype][1])[:count].reshape(shape))
    queue.finish()  # type: ignore[attr-defined]
    return result


__all__ = ["run_program", "dtype_size"]
