"""CPU targets as data: triple, CPU name, instruction sets, and the machine model
(`lowering.machine.Machine`: vector unit, caches, bandwidths, cores) the cost models read.

Named targets carry documented machines; `cpu` is this machine: its LLVM CPU name and features,
its caches from sysfs, its core count, and the rest from the known core it is (or from
`aotc calibrate`'s measurements, see `targets/cpu/calibrate.py`). Schedules and the code
generator read these fields; nothing tests a target's name.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm

from aotc.errors import AotcError
from lowering.intrinsics import INT_DOTS, IntDot
from lowering.machine import MACHINES, Machine

# x86 features the bundle checks at create time (__builtin_cpu_supports, or CPUID where older
# compilers' builtin does not know them: aotc/package/cpu_check.py).
_RUNTIME_CHECKED = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                    "avx512vnni", "avx512bf16", "avx512fp16")


@dataclass(frozen=True)
class CpuTarget:
    name: str
    triple: str
    cpu: str
    features: str  # LLVM feature string, "+avx2,+fma,..."
    runtime_features: tuple[str, ...]  # checked by the bundle before it runs a kernel
    machine: Machine

    @property
    def vector_bits(self) -> int:
        """The vector width schedules plan for."""
        return self.machine.vector_bits

    @property
    def vector_registers(self) -> int:
        return self.machine.vector_registers

    @property
    def vector_lanes_f32(self) -> int:
        return self.machine.lanes_f32

    @property
    def is_x86(self) -> bool:
        return self.triple.startswith("x86_64")

    @property
    def scales_by_instruction(self) -> bool:
        """Whether x * 2^n is one vector instruction (AVX-512's vscalefps, which `llvm.ldexp`
        becomes); elsewhere LLVM would turn `llvm.ldexp` into `ldexpf` calls."""
        return self.is_x86 and "avx512f" in enabled_features(self.features)

    @property
    def masked_vectors(self) -> bool:
        """Whether a vector loop's partial last vector costs about one vector under a mask
        (AVX-512's mask registers). AVX2's masked moves are microcoded on AMD cores and NEON
        has none, so there a scalar remainder is cheaper."""
        return self.is_x86 and "avx512f" in enabled_features(self.features)

    @property
    def widest_vector_bits(self) -> int:
        """The widest vector its instruction sets have."""
        if not self.is_x86:
            return 128
        on = enabled_features(self.features)
        return 512 if "avx512f" in on else 256 if "avx2" in on or "avx" in on else 128

    @property
    def int_dots(self) -> tuple[IntDot, ...]:
        """Integer dot instructions by instruction set: VNNI's u8 x s8 dot of four where the
        core has it, else the exact s16 pair product every AVX2/AVX-512BW core has; on
        AArch64 `sdot` with the dot-product extension, else NEON's widening multiply."""
        on = enabled_features(self.features)
        wide = self.vector_bits == 512
        if self.is_x86:
            out = []
            if "avx512vnni" in on and wide:
                out.append(INT_DOTS["vnni512"])
            elif "avxvnni" in on or ("avx512vnni" in on and "avx512vl" in on):
                out.append(INT_DOTS["vnni256"])
            if wide and "avx512bw" in on:
                out.append(INT_DOTS["pmaddwd512"])
            elif "avx2" in on:
                out.append(INT_DOTS["pmaddwd256"])
            return tuple(out)
        return (INT_DOTS["sdot"], INT_DOTS["smull"]) if "dotprod" in on else \
            (INT_DOTS["smull"],)

    def runs_here(self) -> bool:
        from targets.cpu.measure import runs_on_host

        return runs_on_host(self)

    def measurer(self, space, *, seed: int = 0, samples: int = 5):
        from targets.cpu.measure import Measurer

        return Measurer(space, seed=seed, samples=samples)

    def with_machine(self, machine: Machine) -> CpuTarget:
        """This target's instruction sets on another machine model (`--machine FILE`)."""
        if machine.vector_bits > self.widest_vector_bits:
            raise AotcError(f"the machine model '{machine.name}' plans {machine.vector_bits}-bit "
                            f"vectors; target {self.name} has {self.widest_vector_bits}-bit ones",
                            hint="calibrate on a machine of the target's kind")
        return dataclasses.replace(self, machine=machine)


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    # x86's cmov converter turns a conditional move on a loop-carried chain into a branch,
    # betting that the branch is predictable; the kernels' data-dependent choices (a merge's
    # next element by score) are not, and mispredicted they cost several times the chain
    llvm.set_option("", "--x86-cmov-converter=false")


def enabled_features(features: str) -> set[str]:
    """The features an LLVM feature string turns on ("+avx2,-avx512f" -> {"avx2"})."""
    return {f[1:] for f in features.split(",") if f.startswith("+")}


# LLVM CPU names -> the known core whose machine model a host of that kind starts from
_X86_512 = {"znver4": "znver4", "znver5": "znver5"}
_X86_256 = {"znver1": "znver1", "znver2": "znver3", "znver3": "znver3"}
_ARM = {"neoverse-n1": "neoverse-n1", "neoverse-n2": "neoverse-n1",
        "neoverse-v1": "neoverse-n1", "neoverse-v2": "neoverse-n1"}


def known_core(triple: str, cpu: str, features: set[str]) -> Machine:
    """The documented machine closest to a CPU (by LLVM name, else by vector unit)."""
    if triple.startswith(("aarch64", "arm64")):
        return MACHINES[_ARM.get(cpu, "generic-aarch64")]
    if "avx512f" in features:
        return MACHINES[_X86_512.get(cpu, "cascadelake")]
    base = MACHINES[_X86_256.get(cpu, "generic-avx2")]
    if "avx2" in features and "fma" in features:
        return base
    return dataclasses.replace(base, vector_bits=128, fma_per_cycle=1)  # SSE only


SYSFS_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def _sysfs_caches(root: Path = SYSFS_CACHES) -> dict[str, int]:
    """Data cache sizes of cpu0 from sysfs: l1, l2 and l3 (this core's share) and line bytes;
    what cannot be read is left out."""
    found: dict[str, int] = {}
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return found
    for entry in entries:
        try:
            level = int((entry / "level").read_text())
            kind = (entry / "type").read_text().strip()
            size = _size((entry / "size").read_text().strip())
            line = int((entry / "coherency_line_size").read_text())
            sharing = _count_cpus((entry / "shared_cpu_list").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind not in ("Data", "Unified") or not 1 <= level <= 3 or size <= 0:
            continue
        found[f"l{level}"] = size // max(1, sharing) if level == 3 else size
        found["line"] = line
    return found


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _count_cpus(text: str) -> int:
    """How many CPUs a sysfs list names ("0-3,8" -> 5)."""
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return count


def host_machine(triple: str, cpu: str, features: str,
                 cache_root: Path = SYSFS_CACHES) -> Machine:
    """This machine's model: the known core it is, with its vector unit, its caches and its
    core count as read here. The last level's share is at most the known core's documented
    one: sysfs divides it among the CPUs this system sees, and a virtual machine sees only its
    own (a 2-core guest on a Zen 3 reads 16 of a 32 MiB cache that 8 busy cores share). A
    GEMM ranked as if 16 MiB were its own re-read its 16 MiB operand from "L3": 46 against
    72 GFLOP/s at 2048 on such a guest (benchmarks/RESULTS.md)."""
    on = enabled_features(features)
    base = known_core(triple, cpu, on)
    if triple.startswith("x86_64"):
        bits = 512 if "avx512f" in on else 256 if "avx2" in on else 128
        regs = 32 if "avx512f" in on else 16
    else:
        bits, regs = 128, 32
    caches = _sysfs_caches(cache_root)
    return dataclasses.replace(
        base, name=cpu or base.name, vector_bits=bits, vector_registers=regs,
        l1=caches.get("l1", base.l1), l2=caches.get("l2", base.l2),
        l3=min(caches.get("l3", base.l3), base.l3), line=caches.get("line", base.line),
        cores=max(1, os.cpu_count() or 1))


@functools.cache
def host_target() -> CpuTarget:
    _init_llvm()
    triple = llvm.get_process_triple()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    on = enabled_features(features)
    runtime = tuple(f for f in _RUNTIME_CHECKED if f in on) if triple.startswith("x86_64") else ()
    machine = host_machine(triple, cpu, features)
    calibrated = _calibrated(cpu, machine)
    return CpuTarget("cpu", triple, cpu, features, runtime, calibrated or machine)


def _calibrated(cpu: str, read: Machine) -> Machine | None:
    """The machine `aotc calibrate` measured here, if its file is in the user's cache and
    describes this machine's vector unit and caches (else it is ignored: a stale file)."""
    from targets.cpu.calibrate import machine_file_path

    path = machine_file_path(cpu)
    if os.environ.get("AOTC_NO_MACHINE_FILE") or not path.is_file():
        return None
    try:
        m = Machine.from_json(path.read_text(), where=str(path))
    except (OSError, ValueError, TypeError):
        return None
    same = (m.vector_bits, m.vector_registers, m.l1, m.l2, m.line) == \
        (read.vector_bits, read.vector_registers, read.l1, read.l2, read.line)
    return m if same else None


_X86 = "x86_64-unknown-linux-gnu"
_AARCH64 = "aarch64-unknown-linux-gnu"
_AVX2_FEATURES = "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+popcnt,+sse4.2,+lzcnt,+movbe"
_AVX512_FEATURES = _AVX2_FEATURES + ",+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd"
_AVX2_CHECKED = ("avx", "avx2", "fma")
_AVX512_CHECKED = (*_AVX2_CHECKED, "avx512f", "avx512bw", "avx512dq", "avx512vl")

NAMED_TARGETS: dict[str, CpuTarget] = {
    # any x86-64 CPU with AVX2 and FMA (Intel since Haswell, AMD since Zen)
    "cpu-avx2": CpuTarget("cpu-avx2", _X86, "haswell", _AVX2_FEATURES, _AVX2_CHECKED,
                          MACHINES["generic-avx2"]),
    # any x86-64 CPU with AVX-512 F/BW/DQ/VL (Intel Xeon since Skylake-SP, AMD since Zen 4)
    "cpu-avx512": CpuTarget("cpu-avx512", _X86, "skylake-avx512", _AVX512_FEATURES,
                            _AVX512_CHECKED, MACHINES["cascadelake"]),
    "skylake-avx512": CpuTarget("skylake-avx512", _X86, "skylake-avx512", _AVX512_FEATURES,
                                _AVX512_CHECKED, MACHINES["cascadelake"]),
    "zen1": CpuTarget("zen1", _X86, "znver1", _AVX2_FEATURES, _AVX2_CHECKED,
                      MACHINES["znver1"]),
    "zen3": CpuTarget("zen3", _X86, "znver3", _AVX2_FEATURES, _AVX2_CHECKED,
                      MACHINES["znver3"]),
    "zen4": CpuTarget("zen4", _X86, "znver4", _AVX512_FEATURES + ",+avx512vnni",
                      (*_AVX512_CHECKED, "avx512vnni"),
                      MACHINES["znver4"]),
    "zen5": CpuTarget("zen5", _X86, "znver5", _AVX512_FEATURES + ",+avx512vnni",
                      (*_AVX512_CHECKED, "avx512vnni"),
                      MACHINES["znver5"]),
    # any AArch64 CPU (NEON)
    "aarch64": CpuTarget("aarch64", _AARCH64, "generic", "+neon,+fp-armv8", (),
                         MACHINES["generic-aarch64"]),
    "neoverse-n1": CpuTarget("neoverse-n1", _AARCH64, "neoverse-n1",
                             "+neon,+fp-armv8,+fullfp16,+dotprod", ("fullfp16", "dotprod"),
                             MACHINES["neoverse-n1"]),
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
