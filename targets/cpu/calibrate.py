"""`aotc calibrate`: measure this machine into the machine model the cost models read.

Measured, with `probes.c` built by the system compiler for this machine:
- the fp32 FMA peak of one core (independent FMA chains, no memory traffic): the sustained
  clock is that peak over the documented FMAs per cycle and lanes;
- the read bandwidth of each cache level and of memory: one core summing a buffer half the size
  of L1, of L2 and of its L3 share; memory with every core reading a buffer four times the size
  of L3 (per core, as the model's bandwidths are);
- each GEMM micro-kernel's throughput on operands that stay in cache, as a fraction of that peak
  (`Machine.block_efficiency`, read by the GEMM cost model instead of its fitted estimate), and
  likewise each block of pixel mode's convolution micro-kernel (`Machine.pixel_efficiency`).

The result is written as JSON to the user's cache (`machine_file_path()`), which `--target cpu`
reads from then on, or to a file that `aotc optimize --machine FILE` reads, on this machine or
another, so that a compile is reproducible anywhere.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from aotc.errors import AotcError
from lowering.machine import Machine

PROBES = Path(__file__).resolve().parent / "probes.c"


def cache_dir() -> Path:
    """aotc's folder in the user's cache (XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aotc"


def machine_file_path(cpu: str) -> Path:
    """Where `aotc calibrate` keeps this machine's model: one file per LLVM CPU name."""
    return cache_dir() / f"machine-{cpu or 'unknown'}.json"


def load_machine_file(path: Path) -> Machine:
    """A machine file, or a user error naming it."""
    try:
        return Machine.from_json(Path(path).read_text(), where=str(path))
    except OSError as e:
        raise AotcError(f"cannot read the machine file: {e.strerror or e}", file=str(path)) \
            from None
    except (ValueError, TypeError) as e:
        raise AotcError(f"not a machine file: {e}", file=str(path),
                        hint="write one with `aotc calibrate --output FILE`") from None


@functools.cache
def probe_binary(lanes: int | None = None) -> Path:
    """`probes.c` built for this machine (at `lanes` floats per vector, default the widest the
    compiler targets here)."""
    folder = tempfile.mkdtemp(prefix="aotc_probes_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = Path(folder) / "probes"
    cmd = ["cc", "-O2", "-march=native", "-pthread", "-o", str(out), str(PROBES)]
    if lanes is not None:
        cmd.insert(3, f"-DFORCE_LANES={lanes}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AotcError("cannot build the machine probes with cc",
                        hint=proc.stderr.strip()[-500:])
    return out


def _probe(*args: object) -> list[str]:
    proc = subprocess.run([str(probe_binary()), *map(str, args)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise AotcError(f"the machine probe '{args[0]}' failed", hint=proc.stderr.strip())
    return proc.stdout.split()


def fma_peak(threads: int = 1, reps: int = 3, seconds: float = 0.2) -> tuple[int, float]:
    """(lanes, best fp32 FLOP/s of `threads` threads per thread)."""
    best = (0, 0.0)
    for _ in range(reps):
        out = _probe("fma", threads, seconds)
        lanes, rate = int(out[0]), float(out[5]) * 1e9 / threads
        best = max(best, (lanes, rate), key=lambda x: x[1])
    return best


def read_bandwidth(size: int, threads: int = 1, reps: int = 3, seconds: float = 0.2) -> float:
    """Best bytes per second one of `threads` threads reads from a working set of `size`."""
    best = 0.0
    for _ in range(reps):
        out = _probe("read", max(4096, size), threads, seconds)
        best = max(best, float(out[2]) * 1e9 / threads)
    return best


# Independent measurements of each micro-kernel, the best of which is kept: a kernel's time
# depends on where its buffers lie relative to each other (on a Zen 4 core the same pixel-mode
# kernel measured 0.57 or 0.81 of peak from one allocation to the next), and the efficiency is
# the throughput the kernel can reach, not that of one draw of addresses.
EFFICIENCY_RUNS = 3


def _efficiencies(target, blocks: list[str] | None, samples: int, kernel_of
                  ) -> tuple[tuple[str, float], ...]:
    """Each register block's throughput as a fraction of the target's peak, measured on the
    kernel `kernel_of(block, rng)` gives: (a GEMM space, the configuration to time), or None
    where the block has no such kernel. The best of EFFICIENCY_RUNS measurements, each on
    buffers of its own."""
    from lowering.intrinsics import gemm_blocks
    from targets.cpu.measure import Measurer, runs_on_host

    if not runs_on_host(target):
        raise AotcError(f"cannot measure {target.name}'s micro-kernels on this machine")
    rng = np.random.default_rng(0)
    found: list[tuple[str, float]] = []
    for blk in gemm_blocks(target):
        if blocks is not None and blk.name not in blocks:
            continue
        kernel = kernel_of(blk, rng)
        if kernel is None:
            continue
        space, config = kernel
        seconds = min(Measurer(space, samples=samples, seed=run).measure([config])[0].seconds
                      for run in range(EFFICIENCY_RUNS))
        found.append((blk.name, round(space.flops() / seconds / target.machine.peak_flops, 3)))
    return tuple(found)


def block_efficiency(target, blocks: list[str] | None = None,
                     samples: int = 5) -> tuple[tuple[str, float], ...]:
    """Each register block's GEMM throughput on cache-resident operands, as a fraction of the
    target's peak: a GEMM of 8 M tiles x 4 N panels, K 256, B constant, one K block."""
    from lowering import te
    from lowering.ops.linalg.product import matrix_product
    from lowering.templates.gemm import GemmTemplate

    def gemm(blk, rng):
        m, n, k = 8 * blk.mr, 4 * blk.nr, 256
        a = te.placeholder((m, k), "float32", "a")
        b = te.placeholder((k, n), "float32", "b")
        space = GemmTemplate.match([a, b], [matrix_product(a, b)],
                                   [None, rng.standard_normal((k, n)).astype(np.float32)],
                                   target)
        if space is None:
            return None
        return space, {**space.default_config(), "block": blk.name, "kc": k, "a": "pack",
                       "parallel": "n"}

    return _efficiencies(target, blocks, samples, gemm)


def pixel_efficiency(target, blocks: list[str] | None = None,
                     samples: int = 5) -> tuple[tuple[str, float], ...]:
    """Each register block's throughput in pixel mode (output pixels as rows, channel vectors
    as columns) on cache-resident operands, as a fraction of the target's peak: a 1x1
    convolution of one image row of 8 tiles x 4 channel tiles, 256 input channels, one K
    block."""
    from lowering import te
    from lowering.ops import OPS, OpContext
    from lowering.templates.gemm import GemmTemplate

    def conv(blk, rng):
        cin, cout, width = 256, 4 * blk.nr, 8 * blk.mr
        x = te.placeholder((1, cin, 1, width), "float32", "x")
        w = te.placeholder((cout, cin, 1, 1), "float32", "w")
        wv = rng.standard_normal(w.shape).astype(np.float32)
        ctx = OpContext(node="calibrate", op_type="Conv", attrs={}, inputs=[x, w],
                        consts=[None, wv], out_shapes=[(1, cout, 1, width)],
                        out_dtypes=["float32"])
        space = GemmTemplate.match([x, w], OPS["Conv"](ctx), [None, wv], target)
        if space is None or "pixels" not in next(k.options for k in space.knobs
                                                 if k.name == "b"):
            return None
        return space, {**space.default_config(), "block": blk.name, "kc": cin,
                       "b": "pixels", "parallel": "n"}

    return _efficiencies(target, blocks, samples, conv)


def calibrate(target, report: Callable[[str, str], None] | None = None,
              seconds: float = 0.2) -> Machine:
    """This machine's model: `target` (the host) with its clock, bandwidths and micro-kernel
    throughputs measured. `report(what, figure)` is told each figure as it is measured."""
    say = report or (lambda what, figure: None)
    m = target.machine
    lanes, peak = fma_peak(seconds=seconds)
    # the probe's vector width is the compiler's widest; the model's may differ
    ghz = peak / (m.fma_per_cycle * lanes * 2) / 1e9
    say("FMA peak, one core", f"{peak / 1e9:.1f} GFLOP/s at {lanes * 32} bits "
        f"(clock {ghz:.2f} GHz at {m.fma_per_cycle:g} FMA/cycle)")
    bandwidth = {}
    for level, size in (("l1", m.l1 // 2), ("l2", m.l2 // 2), ("l3", m.l3 // 2)):
        bandwidth[level] = read_bandwidth(size, seconds=seconds)
        say(f"read bandwidth {level.upper()} ({size // 1024} KiB)",
            f"{bandwidth[level] / 1e9:.1f} GB/s")
    cores = max(1, os.cpu_count() or 1)
    big = max(256 << 20, 4 * m.l3 * cores)
    bandwidth["memory"] = read_bandwidth(big // cores, threads=cores, seconds=seconds)
    say(f"read bandwidth memory ({cores} cores)", f"{bandwidth['memory'] / 1e9:.1f} GB/s per core")
    measured = dataclasses.replace(
        m, ghz=round(ghz, 3), l1_bandwidth=round(bandwidth["l1"], -6),
        l2_bandwidth=round(bandwidth["l2"], -6), l3_bandwidth=round(bandwidth["l3"], -6),
        memory_bandwidth=round(bandwidth["memory"], -6), cores=cores)
    efficiency = block_efficiency(target.with_machine(measured))
    for name, eff in efficiency:
        say(f"GEMM micro-kernel {name}", f"{eff:.0%} of peak")
    pixels = pixel_efficiency(target.with_machine(measured))
    for name, eff in pixels:
        say(f"pixel-mode micro-kernel {name}", f"{eff:.0%} of peak")
    return dataclasses.replace(measured, block_efficiency=efficiency, pixel_efficiency=pixels)
