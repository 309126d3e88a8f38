"""GPU targets as data: the kernel language (dialect), the architecture kernels are compiled
for, and the machine model (`lowering.machine.GpuMachine`) the schedules read.

`opencl` is any OpenCL 1.2 device (PoCL runs it on this CPU, which is how the suite executes
every GPU kernel); `mali` a Valhall-class Mali GPU through OpenCL; `cuda[:sm_XX]` an NVIDIA
GPU through CUDA (default sm_90; other architectures keep the sm_90 machine model until one
of their own is written). Nothing tests a target's name: schedules read the machine model,
the renderer the dialect. `allow_tf32` (`aotc optimize --allow-tf32`, default off) lets
float32 products run on a matrix instruction that rounds its operands to tf32 where the
machine has one (`GpuMachine.mma`: sm_80 and later); elsewhere it changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aotc.errors import AotcError
from lowering.machine import GPU_MACHINES, GpuMachine


@dataclass(frozen=True)
class GpuTarget:
    name: str
    dialect: str  # "opencl" | "cuda" (targets/gpu/render.py)
    arch: str | None  # CUDA's "sm_90"; None for OpenCL (built from source on the device)
    machine: GpuMachine
    allow_tf32: bool = False  # float32 MatMul/Conv may round operands to tf32 (opt-in MMA)

    @property
    def cpu(self) -> str:
        """The name tuning logs file this target's kernels under."""
        return self.arch or self.machine.name

    def runs_here(self) -> bool:
        """Whether this machine runs the target's kernels: an OpenCL target where an OpenCL
        device is present (tuning then measures on it: on PoCL that is this CPU, whose
        timings say little about a GPU); CUDA kernels are not measured from here yet."""
        if self.dialect != "opencl":
            return False
        from targets.gpu.opencl_device import opencl_available

        return opencl_available()

    def measurer(self, space: object, *, seed: int = 0, samples: int = 5) -> object:
        from targets.gpu.measure import OpenclMeasurer

        return OpenclMeasurer(space, seed=seed, samples=samples)  # type: ignore[arg-type]


GPU_TARGETS: dict[str, GpuTarget] = {
    "opencl": GpuTarget("opencl", "opencl", None, GPU_MACHINES["opencl-generic"]),
    "mali": GpuTarget("mali", "opencl", None, GPU_MACHINES["mali-valhall"]),
    "cuda": GpuTarget("cuda", "cuda", "sm_90", GPU_MACHINES["sm_90"]),
}


def is_gpu_target(name: str) -> bool:
    return name.split(":")[0] in GPU_TARGETS


def gpu_target(name: str) -> GpuTarget:
    """`opencl`, `mali`, `cuda` or `cuda:sm_XX`."""
    base, _, arch = name.partition(":")
    if base not in GPU_TARGETS:
        raise AotcError(f"unknown GPU target '{name}'", hint=f"one of {sorted(GPU_TARGETS)} "
                        "(cuda:sm_XX for another CUDA architecture)")
    t = GPU_TARGETS[base]
    if arch:
        if t.dialect != "cuda" or not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
            raise AotcError(f"'{name}': an architecture is given as cuda:sm_XX (e.g. "
                            "cuda:sm_80)")
        t = GpuTarget(f"cuda:{arch}", "cuda", arch, t.machine)
    return t
