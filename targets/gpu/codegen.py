"""A model's kernels as one GPU module: the source in the target's dialect and, per kernel,
the entry points to launch in order (targets/gpu/render.py), plus CUDA's compile to PTX."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import AotcError
from lowering.loop_ir import Kernel
from targets.gpu.prelude import prelude
from targets.gpu.render import Launch, RenderedKernel, render_kernel, render_module
from targets.gpu.target import GpuTarget


@dataclass
class GpuModule:
    dialect: str
    source: str
    launches: dict[str, list[Launch]]  # kernel symbol -> its entry points, in order
    uses_f64: bool = False
    mma: tuple[str, ...] = ()  # matrix instructions the kernels call (prelude.mma_source)
    dots: tuple[str, ...] = ()  # integer dot products the kernels call (prelude.dot_source)

    def in_dialect(self, dialect: str) -> GpuModule:
        """The same kernels in another dialect: only the prelude changes (render.py), so a
        CUDA module's kernels run on any OpenCL device in this form (the tests run them on
        PoCL)."""
        head = prelude(self.dialect, self.uses_f64, self.mma, self.dots)
        if not self.source.startswith(head):
            raise ValueError("the module does not start with its dialect's prelude")
        return GpuModule(dialect, prelude(dialect, self.uses_f64, self.mma, self.dots)
                         + self.source[len(head):], self.launches, self.uses_f64, self.mma,
                         self.dots)


def build_module(kernels: Iterable[Kernel], target: GpuTarget) -> GpuModule:
    return module_of([render_kernel(k) for k in kernels], target.dialect)


def module_of(rendered: list[RenderedKernel], dialect: str) -> GpuModule:
    return GpuModule(dialect, render_module(rendered, dialect),
                     {r.name: r.launches for r in rendered},
                     any(r.uses_f64 for r in rendered),
                     tuple(sorted({i for r in rendered for i in r.mma})),
                     tuple(sorted({i for r in rendered for i in r.dots})))


def cuda_to_ptx(source: str, arch: str) -> str:
    """PTX of a CUDA module for `arch` (nvcc -ptx), checked by ptxas when it is installed."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise AotcError("the cuda target needs nvcc (the CUDA toolkit) to compile its kernels",
                        hint="install the CUDA toolkit, or put nvcc on PATH")
    with tempfile.TemporaryDirectory(prefix="aotc-cuda-") as d:
        src, ptx = Path(d) / "kernels.cu", Path(d) / "kernels.ptx"
        src.write_text(source)
        r = subprocess.run([nvcc, "-ptx", f"-arch={arch}", "-O3", "-o", str(ptx), str(src)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed on the generated kernels:\n{r.stderr[-4000:]}")
        ptxas = shutil.which("ptxas")
        if ptxas is not None:
            r = subprocess.run([ptxas, f"-arch={arch}", "-o", str(Path(d) / "k.cubin"),
                                str(ptx)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"ptxas rejected the generated PTX:\n{r.stderr[-4000:]}")
        return ptx.read_text()
