"""CPU targets as data: triple, CPU name, features, vector width, registers.

Schedules and the code generator read these fields; nothing tests a target's name.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

from aotc.errors import AotcError

# x86 features the bundle checks at create time with __builtin_cpu_supports (names it knows).
_RUNTIME_CHECKED = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")


@dataclass(frozen=True)
class CpuTarget:
    name: str
    triple: str
    cpu: str
    features: str  # LLVM feature string, "+avx2,+fma,..."
    vector_bits: int  # width the schedules plan for
    vector_registers: int
    runtime_features: tuple[str, ...]  # checked by the bundle before it runs a kernel

    @property
    def vector_lanes_f32(self) -> int:
        return self.vector_bits // 32

    @property
    def is_x86(self) -> bool:
        return self.triple.startswith("x86_64")

    @property
    def scales_by_instruction(self) -> bool:
        """Whether x * 2^n is one vector instruction (AVX-512's vscalefps, which `llvm.ldexp`
        becomes); elsewhere LLVM would turn `llvm.ldexp` into `ldexpf` calls."""
        return self.is_x86 and "avx512f" in enabled_features(self.features)


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def enabled_features(features: str) -> set[str]:
    """The features an LLVM feature string turns on ("+avx2,-avx512f" -> {"avx2"})."""
    return {f[1:] for f in features.split(",") if f.startswith("+")}


@functools.cache
def host_target() -> CpuTarget:
    _init_llvm()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    on = enabled_features(features)
    if triple.startswith("x86_64"):
        bits = 512 if "avx512f" in on else 256 if "avx2" in on else 128
        regs = 32 if "avx512f" in on else 16
    else:
        bits, regs = 128, 32
    runtime = tuple(f for f in _RUNTIME_CHECKED if f in on) if triple.startswith("x86_64") else ()
    return CpuTarget("cpu", triple, cpu, features, bits, regs, runtime)


_AVX2_FEATURES = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+lzcnt,+movbe"

NAMED_TARGETS: dict[str, CpuTarget] = {
    "cpu-avx2": CpuTarget(
        "cpu-avx2", "x86_64-unknown-linux-gnu", "haswell", _AVX2_FEATURES, 256, 16,
        ("avx", "avx2", "fma"),
    ),
    "cpu-avx512": CpuTarget(
        "cpu-avx512", "x86_64-unknown-linux-gnu", "skylake-avx512",
        _AVX2_FEATURES + ",+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd", 512, 32,
        ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"),
    ),
    "aarch64": CpuTarget(
        "aarch64", "aarch64-unknown-linux-gnu", "generic", "+neon,+fp-armv8", 128, 32, (),
    ),
}


def get_target(name: str) -> CpuTarget:
    if name in ("cpu", "host"):
        return host_target()
    if name in NAMED_TARGETS:
        return NAMED_TARGETS[name]
    known = ", ".join(["cpu", *NAMED_TARGETS])
    raise AotcError(f"unknown target '{name}'", hint=f"choose one of: {known}")


def target_machine(t: CpuTarget) -> llvm.TargetMachine:
    """A target machine for `t`, emitting position-independent code (links into PIE and .so)."""
    _init_llvm()
    return llvm.Target.from_triple(t.triple).create_target_machine(
        cpu=t.cpu, features=t.features, opt=3, reloc="pic", codemodel="default"
    )
