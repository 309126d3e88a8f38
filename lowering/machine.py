"""The machine model every cost model reads: a CPU's vector unit, caches, memory and cores.

A target (`targets/cpu/target.py`) carries one. Named targets document their values below;
`--target cpu` reads this machine's (cache sizes from sysfs, the vector unit from its
instruction sets, the rest from the table of known cores or from `aotc calibrate`). Cost models
take clocks, capacities and bandwidths from it and from nowhere else, so that a kernel's
schedule is chosen for the CPU it will run on, and a bundle's bytes depend only on the model,
the flags and the target.

Bandwidths are what one core streams from each level with every core busy (bytes per second);
`cores` is how many threads a bundle's parallel loops are ranked for.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from lowering.intrinsics import IntDot


@dataclass(frozen=True)
class Machine:
    name: str  # the core's microarchitecture, e.g. "cascadelake", "znver3"
    ghz: float  # sustained clock under vector load
    vector_bits: int  # the widest vector the kernels use
    vector_registers: int
    fma_per_cycle: float  # vector FMA instructions issued per cycle at vector_bits
    fma_latency: int  # cycles before an FMA's (or add's) result can be used
    loads_per_cycle: float  # vector loads per cycle
    l1: int  # data cache bytes per core
    l2: int
    l3: int  # this core's share of the last level
    line: int  # cache line bytes
    l1_bandwidth: float
    l2_bandwidth: float
    l3_bandwidth: float
    memory_bandwidth: float
    cores: int
    # measured by `aotc calibrate`: each GEMM register block ("6x4") and the fraction of the
    # peak it sustains on cache-resident operands; the GEMM cost model estimates the others
    block_efficiency: tuple[tuple[str, float], ...] = ()
    # measured likewise for pixel mode's convolution micro-kernel (pixels x channel vectors),
    # a routine of its own: it reads its rows at one pointer plus offsets, so the tall blocks
    # that lose a GEMM kernel register pressure (A's row pointers) run at other rates there
    pixel_efficiency: tuple[tuple[str, float], ...] = ()
    # the share of `l2_bandwidth` at which the GEMM cost model lets pixel mode stream its
    # operands from L2 (per k step a tile reads NR weights and a line of each of its pixel
    # rows, one input plane further than the step before). Fitted per machine row to the
    # schedules it ranks best (benchmarks/RESULTS.md); a machine file without it takes the
    # Cascade Lake value
    pixel_stream: float = 60 / 143
    # the share of pixel mode's weight stream that tap-by-tap calls (kc < K) take from L1
    # in the GEMM cost model: a call's chunk of weights, read from L2 by a block's first
    # tile, stays in L1 for the others. That holds where the L2 stream limits pixel mode
    # (Zen 3); on the cores where tap-by-tap calls measured no faster than one call per tile
    # (Zen 4, AVX-512 code) the rows keep 0 (benchmarks/RESULTS.md)
    pixel_chunk_reuse: float = 0.0

    @property
    def lanes_f32(self) -> int:
        return self.vector_bits // 32

    @property
    def hz(self) -> float:
        return self.ghz * 1e9

    @property
    def peak_flops(self) -> float:
        """fp32 floating-point operations per second of one core (an FMA is two)."""
        return self.hz * self.fma_per_cycle * self.lanes_f32 * 2

    def bandwidth(self, resident_bytes: float) -> float:
        """The rate at which a working set of `resident_bytes` is re-read: from the smallest
        level it fits in."""
        if resident_bytes <= self.l1:
            return self.l1_bandwidth
        if resident_bytes <= self.l2:
            return self.l2_bandwidth
        if resident_bytes <= self.l3:
            return self.l3_bandwidth
        return self.memory_bandwidth

    def with_cores(self, cores: int) -> Machine:
        return dataclasses.replace(self, cores=cores)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    def efficiency_of(self, block: str) -> float | None:
        return dict(self.block_efficiency).get(block)

    def pixel_efficiency_of(self, block: str) -> float | None:
        return dict(self.pixel_efficiency).get(block)

    @classmethod
    def from_json(cls, text: str, where: str = "machine file") -> Machine:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{where} holds no JSON object")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        missing = {n for n, f in fields.items()
                   if f.default is dataclasses.MISSING and n not in data}
        if missing:
            raise ValueError(f"{where} lacks {', '.join(sorted(missing))}")
        values = {k: data[k] for k in fields if k in data}
        for table in ("block_efficiency", "pixel_efficiency"):
            values[table] = tuple((str(b), float(e)) for b, e in values.get(table, ()))
        for name in ("ghz", "fma_per_cycle", "loads_per_cycle", "l1_bandwidth", "l2_bandwidth",
                     "l3_bandwidth", "memory_bandwidth", "pixel_stream"):
            if name not in values:  # a field with a default, absent from an older file
                continue
            values[name] = float(values[name])
            if not values[name] > 0:
                raise ValueError(f"{where}: {name} must be positive")
        if "pixel_chunk_reuse" in values:
            values["pixel_chunk_reuse"] = float(values["pixel_chunk_reuse"])
            if not 0 <= values["pixel_chunk_reuse"] <= 1:
                raise ValueError(f"{where}: pixel_chunk_reuse must lie in [0, 1]")
        for name in ("vector_bits", "vector_registers", "fma_latency", "l1", "l2", "l3", "line",
                     "cores"):
            if not isinstance(values[name], int) or values[name] <= 0:
                raise ValueError(f"{where}: {name} must be a positive integer")
        if values["vector_bits"] not in (128, 256, 512):
            raise ValueError(f"{where}: vector_bits must be 128, 256 or 512")
        return cls(**values)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())


class GpuTarget(Protocol):
    """What lowering reads of a GPU target (targets/gpu/target.py) besides `Target`'s names:
    its machine model, the architecture its matrix and dot instructions depend on, and
    whether float32 products may run in tf32."""

    name: str
    machine: GpuMachine
    arch: str | None  # CUDA's "sm_90"; None where the device compiles the source (OpenCL)
    allow_tf32: bool


class Target(Protocol):
    """What lowering reads of a target (targets/*/target.py): names for the tuning log, the
    vector unit, the machine model, and a way to measure kernels where it runs."""

    name: str
    cpu: str
    machine: Machine

    @property
    def vector_bits(self) -> int: ...

    @property
    def vector_lanes_f32(self) -> int: ...

    @property
    def vector_registers(self) -> int: ...

    @property
    def masked_vectors(self) -> bool:
        """Whether a vector loop's partial last vector runs under a mask for about the price
        of a whole vector (rather than as a scalar remainder)."""
        ...

    @property
    def int_dots(self) -> tuple[IntDot, ...]:
        """The integer dot-product instructions it has, preferred first."""
        ...

    def runs_here(self) -> bool:
        """Whether this machine runs the target's code (for measuring it)."""
        ...

    def measurer(self, space: object, *, seed: int = 0, samples: int = 5) -> object:
        """A `lowering.search.measure.KernelMeasurer` of `space`'s kernels on this machine."""
        ...


KIB, MIB = 1 << 10, 1 << 20

# The AVX2 register blocks' throughput as the GEMM cost model should see it. `aotc calibrate`
# (best of three runs, cache-resident operands, AVX2 code on a Zen 4 core, whose two 256-bit
# FMA pipes and two loads per cycle are Zen 3's) measures 4x3 0.96, 6x2 0.92, 2x5 0.89, 2x4
# 0.88, 14x1 0.61, 1x6 0.45. Inside a layer, B's micro-panels stream from L2 and 4x3 loads a
# line and a half of them per k step where 6x2 loads one, which the model's traffic terms do
# not charge to the load ports: 6x2 then runs 10-15 % faster (96x576 at 14x14 packed in the
# M-outer order 317 against 360 us, 256x512 stride 2 at 56x56 2.70 against 3.11 ms). So 4x3
# stands at 0.90 here, the value that minimised the regret of the model's pick over the
# measured configurations of the 22 layers of benchmarks/rank_check.py (geomean 1.094 ->
# 1.052; ResNet-50 compiled for cpu-avx2 0.95x the time, MobileNetV2 0.975x, RegNetY 0.93x).
# Both AVX2 rows take it. An AVX2 machine's own `aotc calibrate` replaces it with the
# cache-resident figures.
AVX2_BLOCK_EFFICIENCY = (("4x3", 0.90), ("6x2", 0.92), ("2x5", 0.89), ("2x4", 0.88),
                         ("14x1", 0.61), ("1x6", 0.45))
# Pixel mode's AVX2 blocks measured likewise (`aotc calibrate`'s `pixel_efficiency`, best of
# three runs each, AVX2 code on a Zen 4 core). The estimate from loads per FMA puts 4x3 14 %
# above 6x2 where they measure within 5 % (6x2 ahead), so both AVX2 rows, generic or Zen 3,
# had ranked 4x3 first on 3x3 layers that run 1.1-1.3x faster with 6x2; and 14x1 at 0.49
# where it measures 0.79.
AVX2_PIXEL_EFFICIENCY = (("4x3", 0.81), ("6x2", 0.85), ("2x5", 0.53), ("2x4", 0.50),
                         ("14x1", 0.79), ("1x6", 0.39))

# Documented values of the cores aotc knows by name. Clocks are sustained all-core vector
# clocks; bandwidths per core with all cores streaming. Sources: the vendors' optimization
# manuals (vector units, latencies, caches) and aotc's own measurements where one was made
# (benchmarks/RESULTS.md): the Cascade Lake figures are those the GEMM cost model was fitted
# to, the Zen 3 and Zen 4 clocks come from `benchmarks/peak.py` and the Zen 5 one from
# `aotc calibrate`, on 2-core cloud instances.
MACHINES: dict[str, Machine] = {
    # Intel Skylake-SP / Cascade Lake Xeon Gold: AVX-512, two 512-bit FMA units
    "cascadelake": Machine("cascadelake", 2.5, 512, 32, 2, 4, 2, 32 * KIB, 1 * MIB,
                           1408 * KIB, 64, 180e9, 143e9, 40e9, 13.5e9, 4),
    # any x86-64 core with AVX2 and FMA: the Cascade Lake rates the cost models were fitted
    # with, at 256 bits and 16 registers (the choices they make for AVX2 code were measured on
    # Zen 3 hosts and on AVX2 code run by AVX-512 hosts, benchmarks/RESULTS.md), the AVX2
    # blocks' efficiencies (both modes), and pixel mode's stream at 107 GB/s (0.75 of the
    # 143): the share fitted with AVX-512 code (0.42) had ranked direct mode first on 1x1
    # layers at 7x7 that run 2x faster in pixel mode. The share is the middle of the range
    # (0.67-0.9) that minimises the regret over rank_check's layers with the blocks above
    "generic-avx2": Machine("generic-avx2", 2.5, 256, 16, 2, 4, 2, 32 * KIB, 1 * MIB,
                            1408 * KIB, 64, 180e9, 143e9, 40e9, 13.5e9, 4,
                            AVX2_BLOCK_EFFICIENCY, AVX2_PIXEL_EFFICIENCY, pixel_stream=0.75),
    # AMD Zen 1 / Zen+ (EPYC 7001, Ryzen 1000/2000): AVX2 on two 128-bit FMA pipes, so one
    # 256-bit FMA per cycle (each is two halves) at 5 cycles' latency, and two 128-bit loads
    # per cycle, one 256-bit; 8 MiB of L3 per 4-core CCX (2 MiB a core's share). Clock and
    # rates as `aotc calibrate` measured them on a 2-core EPYC guest that LLVM reads as
    # `znver1` (medians of five runs: 36 GFLOP/s per core, 56/47/37 GB/s from L1/L2/L3, 9 GB/s
    # from memory with both cores reading); taken for a Zen 3 before, such a host was planned
    # at 2.8 times its peak. The block tables stay the fitted AVX2 ones, as on Zen 3: the
    # calibrated ones moved by up to 35 points a block between runs, and their medians made
    # ResNet-50 1.11x slower there (benchmarks/RESULTS.md). Pixel mode's stream share is Zen 3's
    "znver1": Machine("znver1", 2.26, 256, 16, 1, 5, 1, 32 * KIB, 512 * KIB, 2 * MIB, 64,
                      56e9, 47e9, 37e9, 9e9, 4,
                      AVX2_BLOCK_EFFICIENCY, AVX2_PIXEL_EFFICIENCY,
                      pixel_stream=1.1, pixel_chunk_reuse=1.0),
    # AMD Zen 3 (EPYC 7003): AVX2, two 256-bit FMA pipes, 32 MiB L3 per 8 cores (4 MiB a
    # core's share). Clock and rates as `aotc calibrate` measured them on a 2-core EPYC 7003
    # instance (median of three runs: 100.6 GFLOP/s per core, 192/98/68 GB/s from L1/L2/L3,
    # 15 GB/s from memory with both cores reading). The block tables stay the fitted AVX2
    # ones: the same calibration's cache-resident efficiencies (4x3 0.86, 6x2 0.83, best of
    # three) ranked rank_check's layers worse there (geomean regret 1.16 against 1.10).
    # Pixel mode streams at 108 GB/s (share 1.1 of 98; the regret over rank_check's layers,
    # AVX2 code on a Zen 4, is lowest from 1.1 to 1.5 of the 90 GB/s documented before)
    "znver3": Machine("znver3", 3.15, 256, 16, 2, 4, 2, 32 * KIB, 512 * KIB, 4 * MIB, 64,
                      192e9, 98e9, 68e9, 15e9, 4, AVX2_BLOCK_EFFICIENCY,
                      AVX2_PIXEL_EFFICIENCY, pixel_stream=1.1, pixel_chunk_reuse=1.0),
    # AMD Zen 4 (EPYC 9004): AVX-512 on two 256-bit FMA pipes (one 512-bit FMA per cycle);
    # clock and rates as `aotc calibrate` measured them on a 2-core EPYC 9004 instance;
    # pixel mode's stream at the same 90 GB/s as AVX2 code's there. Pixel mode's blocks as
    # calibrated there (median of three runs on two instances): its 16x1 micro-kernel runs at
    # 0.99 of peak, where the loads-per-FMA estimate gave 0.49, since a Zen 4 core issues
    # the 16 broadcasts beside the FMAs (that estimate ranked 16x1 below a window schedule
    # measured 2x slower on 16-channel layers). The GEMM blocks as calibrated on a third
    # instance (median of three runs): the estimate read every block at 0.92 but 16x1 at
    # 0.49; measured, the short blocks run at 0.97-0.99 and the tall ones fall to 0.72
    "znver4": Machine("znver4", 3.56, 512, 32, 1, 4, 1, 32 * KIB, 1 * MIB, 4 * MIB, 64,
                      205e9, 105e9, 85e9, 13e9, 4,
                      block_efficiency=(("5x5", 0.97), ("4x6", 0.99), ("6x4", 0.97),
                                        ("9x3", 0.87), ("14x2", 0.83), ("16x1", 0.72)),
                      pixel_efficiency=(("5x5", 0.95), ("4x6", 0.91), ("6x4", 0.97),
                                        ("9x3", 0.98), ("14x2", 0.97), ("16x1", 0.99)),
                      pixel_stream=0.85),
    # AMD Zen 5 (EPYC 9005): AVX-512 on two full 512-bit FMA pipes, twice Zen 4's rate per
    # cycle; 48 KiB L1, 1 MiB L2, 32 MiB L3 per 8 cores. Clock, rates and both block tables
    # as `aotc calibrate` measured them on a 2-core EPYC 9005 instance (median of three runs:
    # 236 GFLOP/s per core, 448/220/95 GB/s from L1/L2/L3, 35 GB/s from memory with both
    # cores reading). The GEMM blocks are measured, not estimated: at two FMAs a cycle the
    # tall blocks' broadcasts (16x1 at 0.59 of peak, 14x2 0.77) cost what they did not on
    # Zen 4. Pixel mode's stream share is Zen 4's
    "znver5": Machine("znver5", 3.68, 512, 32, 2, 4, 2, 48 * KIB, 1 * MIB, 4 * MIB, 64,
                      448e9, 220e9, 95e9, 35e9, 4,
                      block_efficiency=(("5x5", 0.93), ("4x6", 0.96), ("6x4", 0.98),
                                        ("9x3", 0.81), ("14x2", 0.77), ("16x1", 0.59)),
                      pixel_efficiency=(("5x5", 0.91), ("4x6", 0.79), ("6x4", 0.93),
                                        ("9x3", 0.93), ("14x2", 0.98), ("16x1", 0.83)),
                      pixel_stream=0.85),
    # Arm Neoverse N1 (Graviton2, Ampere Altra): NEON, two 128-bit FMA pipes
    "neoverse-n1": Machine("neoverse-n1", 2.5, 128, 32, 2, 4, 2, 64 * KIB, 1 * MIB, 512 * KIB,
                           64, 80e9, 60e9, 30e9, 10e9, 4),
    # a conservative AArch64 core (Cortex-A72 class): NEON, one 128-bit FMA per cycle
    "generic-aarch64": Machine("generic-aarch64", 2.0, 128, 32, 1, 4, 1, 32 * KIB, 256 * KIB,
                               512 * KIB, 64, 32e9, 24e9, 12e9, 6e9, 4),
}


@dataclass(frozen=True)
class GpuMachine:
    """The machine model of a GPU target (targets/gpu/target.py): what its default schedule
    and templates read. Per-device figures, not per-core ones."""

    name: str
    simd_width: int  # threads that issue together (a warp, a sub-group)
    max_block_threads: int  # the most threads one block (work-group) may have
    block_threads: int  # threads per block the default schedule uses
    # bytes of fast on-chip memory a block may stage into (CUDA shared memory); 0 where
    # "local" memory is ordinary cached memory (Mali), so staging through it buys nothing
    local_memory: int
    vector_bytes: int  # the widest load a thread issues in one instruction
    compute_units: int  # SMs / shader cores
    ghz: float
    fp32_lanes: int  # FMA lanes per compute unit
    memory_bandwidth: float  # bytes/s
    # matrix instructions (tensor cores) its kernels may use, by name in
    # lowering.intrinsics.MMA_INSTRUCTIONS (an opt-in one, tf32, only where the user asks),
    # and their dense peak (floating-point operations per second, 16-bit operands; an
    # instruction's `peak_share` scales it); none on a GPU without them
    mma: tuple[str, ...] = ()
    mma_flops: float = 0.0
    # 4-way integer dot products (lowering.intrinsics.GPU_INT_DOTS) its kernels use for int8
    # and uint8 products: Mali's cl_arm_integer_dot_product_int8 (with a portable fallback in
    # the same source for devices without it), CUDA's __dp4a
    dots: tuple[str, ...] = ()

    @property
    def peak_flops(self) -> float:
        return 2 * self.fp32_lanes * self.compute_units * self.ghz * 1e9


# Documented values: NVIDIA's H100 SXM datasheet and CUDA programming guide (warp 32, 1024
# threads per block, 227 KiB of shared memory per block, 132 SMs of 128 FP32 lanes, 989 dense
# FP16/BF16 tensor TFLOPS, reached through WMMA from sm_70/sm_80, TF32 half that from
# sm_80); the Mali-like row is a Valhall-class GPU as Arm's OpenCL guide describes it (warps
# of 16, no dedicated local memory, 128-bit loads, small work-groups); the generic OpenCL row
# assumes only what every OpenCL 1.2 device offers.
GPU_MACHINES: dict[str, GpuMachine] = {
    "sm_90": GpuMachine("sm_90", 32, 1024, 256, 227 * KIB, 16, 132, 1.98, 128, 3.35e12,
                        ("wmma_f16_16x16x16", "wmma_bf16_16x16x16", "wmma_tf32_16x16x8"),
                        989e12,
                        ("dot4_s8", "dot4_u8")),
    "mali-valhall": GpuMachine("mali-valhall", 16, 256, 64, 0, 16, 16, 0.85, 32, 50e9,
                               dots=("dot4_s8", "dot4_u8")),
    "opencl-generic": GpuMachine("opencl-generic", 1, 256, 64, 16 * KIB, 16, 1, 1.0, 1, 10e9),
}
