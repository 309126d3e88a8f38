"""Measure candidate kernels on an OpenCL device (the GPU targets' side of the tuner's
`KernelMeasurer`, lowering/search/measure.py): the candidates of one batch rendered into one
program, built once, each run on the same random inputs; the median time of a sample of
launches, the device synchronised at its end, interleaved across candidates."""

from __future__ import annotations

import time

import numpy as np

from lowering.search.measure import BatchMeasurer, Measurement
from lowering.search.space import BuiltKernel
from targets.gpu.opencl_device import device_buffers, opencl_queue, read_outputs
from targets.gpu.render import render_kernel, render_module


class OpenclMeasurer(BatchMeasurer):
    def _measure(self, built: list[BuiltKernel]) -> list[Measurement]:
        import pyopencl as cl

        ctx, queue = opencl_queue()
        for i, b in enumerate(built):
            b.kernel.name = f"cand{i}"
        rendered = [render_kernel(b.kernel) for b in built]
        program = cl.Program(ctx, render_module(rendered, "opencl")).build()
        runs = []
        for b, r in zip(built, rendered, strict=True):
            inputs = [b.const_transforms[i](a) if i in b.const_transforms else a
                      for i, a in enumerate(self.inputs)]
            mems = device_buffers(b.kernel, inputs)
            launches = []
            for launch in r.launches:
                fn = cl.Kernel(program, launch.function)
                args: list[object] = []
                for m in mems:
                    args += [m, np.int64(0)]
                fn.set_args(*args)
                launches.append((fn, (launch.blocks * launch.threads,), (launch.threads,)))

            def call(launches=launches, keep=mems) -> None:  # `keep`: buffers stay alive
                for fn, grid, block in launches:
                    cl.enqueue_nd_range_kernel(queue, fn, grid, block)
                queue.finish()  # type: ignore[attr-defined]

            t0 = time.perf_counter()
            call()
            once = max(time.perf_counter() - t0, 1e-7)
            runs.append((call, max(1, int(self.sample_seconds / once)),
                         read_outputs(b.kernel, mems)))
        return self.timed(runs)
