"""`aotc calibrate` and machine files: the probes measure, the file round-trips, `--target cpu`
and `--machine FILE` compile for the machine it describes, and bad files are user errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aotc.errors import AotcError
from lowering import te
from lowering.machine import MACHINES, Machine
from lowering.ops import OPS, OpContext
from lowering.ops.linalg.product import matrix_product
from lowering.templates.gemm import GemmTemplate
from targets.cpu.calibrate import fma_peak, load_machine_file, read_bandwidth
from targets.cpu.target import NAMED_TARGETS

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "models" / "mlp.onnx"


def _aotc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def test_probes_measure_positive_rates() -> None:
    lanes, peak = fma_peak(reps=1, seconds=0.02)
    assert lanes in (4, 8, 16) and peak > 1e9
    small, big = read_bandwidth(16 << 10, seconds=0.02), read_bandwidth(64 << 20, seconds=0.05)
    assert small > 1e9 and big > 1e8


def test_machine_file_round_trip_and_refusals(tmp_path: Path) -> None:
    m = dataclasses.replace(MACHINES["znver4"], block_efficiency=(("6x4", 0.9), ("14x2", 0.8)),
                            pixel_efficiency=(("14x2", 0.97),))
    path = tmp_path / "m.json"
    m.save(path)
    assert load_machine_file(path) == m
    data = json.loads(path.read_text())
    for bad in ({**data, "l2": -1}, {**data, "vector_bits": 384}, {**data, "ghz": "fast"},
                {k: v for k, v in data.items() if k != "l1"}, [1, 2]):
        path.write_text(json.dumps(bad))
        with pytest.raises(AotcError, match="m.json"):
            load_machine_file(path)
    with pytest.raises(AotcError, match="cannot read"):
        load_machine_file(tmp_path / "missing.json")
    with pytest.raises(AotcError, match="512-bit"):
        NAMED_TARGETS["cpu-avx2"].with_machine(MACHINES["znver4"])


def _gemm_space(target):
    a = te.placeholder((256, 512), "float32", "a")
    b = te.placeholder((512, 256), "float32", "b")
    return GemmTemplate.match([a, b], [matrix_product(a, b)], [None, None], target)


def test_measured_block_efficiency_drives_the_block_choice() -> None:
    """A block the machine file measured slow is not chosen; one measured fast is."""
    target = NAMED_TARGETS["cpu-avx512"]
    chosen = _gemm_space(target).default_config()["block"]
    slow = target.machine
    slow = dataclasses.replace(slow, block_efficiency=((str(chosen), 0.2),))
    assert _gemm_space(target.with_machine(slow)).default_config()["block"] != chosen
    fast = dataclasses.replace(slow, block_efficiency=(("16x1", 0.99),) + tuple(
        (b.name, 0.3) for b in _gemm_space(target).blocks if (b.mr, b.nv) != (16, 1)))
    assert _gemm_space(target.with_machine(fast)).default_config()["block"] == "16x1"


def _conv_1x1_space(target, cin: int = 1024, cout: int = 256, side: int = 14):
    """A 1x1 convolution's space; by default ResNet-50's 1024->256 at 14x14, whose best
    schedule is pixel mode."""
    x = te.placeholder((1, cin, side, side), "float32", "x")
    w = te.placeholder((cout, cin, 1, 1), "float32", "w")
    wv = np.random.default_rng(0).standard_normal(w.shape).astype(np.float32)
    ctx = OpContext(node="conv", op_type="Conv", attrs={}, inputs=[x, w], consts=[None, wv],
                    out_shapes=[(1, cout, side, side)], out_dtypes=["float32"])
    return GemmTemplate.match([x, w], OPS["Conv"](ctx), [None, wv], target)


def test_pixel_mode_reads_its_own_measured_efficiency() -> None:
    """Pixel mode is ranked by its own micro-kernel's figures, not the GEMM kernel's: a GEMM
    block measured slow leaves pixel mode's pick alone, a pixel block measured slow moves it."""
    target = NAMED_TARGETS["cpu-avx512"]
    base = dataclasses.replace(target.machine, block_efficiency=(), pixel_efficiency=())
    picked = _conv_1x1_space(target.with_machine(base)).default_config()
    assert picked["b"] == "pixels"
    gemm_slow = dataclasses.replace(base, block_efficiency=((str(picked["block"]), 0.5),))
    assert _conv_1x1_space(target.with_machine(gemm_slow)).default_config() == picked
    pixel_slow = dataclasses.replace(base, pixel_efficiency=tuple(
        (b.name, 0.3) for b in _conv_1x1_space(target).blocks))
    assert _conv_1x1_space(target.with_machine(pixel_slow)).default_config()["b"] != "pixels"


def test_pixel_mode_streams_at_the_machines_rate() -> None:
    """Pixel mode's stream rate is the machine's: cpu-avx2's row ranks pixel mode first on
    MobileNetV2's 576->160 1x1 at 7x7 (1.2-1.6x faster than direct mode as AVX2 code on a
    Zen 4), the Cascade Lake share it had before ranks direct mode first; a file without the
    field takes that share."""
    target = NAMED_TARGETS["cpu-avx2"]
    layer = {"cin": 576, "cout": 160, "side": 7}
    assert _conv_1x1_space(target, **layer).default_config()["b"] == "pixels"
    slow = dataclasses.replace(target.machine, pixel_stream=60 / 143)
    assert _conv_1x1_space(target.with_machine(slow), **layer).default_config()["b"] != "pixels"
    data = json.loads(target.machine.to_json())
    assert data["pixel_stream"] == 0.75
    del data["pixel_stream"]
    assert Machine.from_json(json.dumps(data)).pixel_stream == 60 / 143
    with pytest.raises(ValueError, match="pixel_stream"):
        Machine.from_json(json.dumps({**data, "pixel_stream": 0}))


def test_tap_by_tap_weight_reuse_is_the_machines() -> None:
    """Where the machine keeps a call's chunk of weights in L1 for a block's later tiles (the
    Zen 3 row), pixel mode on ResNet-50's 2048->512 1x1 at 7x7 splits K into tap-by-tap
    calls (measured 1.2x faster there); without that reuse it keeps the whole K in one call
    per tile (one core: more cores cut the image into smaller blocks, and so less reuse). The
    field round-trips, defaults to 0 and must lie in [0, 1]."""
    target = NAMED_TARGETS["zen3"]
    target = target.with_machine(target.machine.with_cores(1))
    layer = {"cin": 2048, "cout": 512, "side": 7}
    split = _conv_1x1_space(target, **layer).default_config()
    assert split["b"] == "pixels" and int(split["kc"]) < 2048
    whole = dataclasses.replace(target.machine, pixel_chunk_reuse=0.0)
    assert int(_conv_1x1_space(target.with_machine(whole), **layer).default_config()["kc"]) \
        == 2048
    data = json.loads(target.machine.to_json())
    assert Machine.from_json(json.dumps(data)).pixel_chunk_reuse == 1.0
    del data["pixel_chunk_reuse"]
    assert Machine.from_json(json.dumps(data)).pixel_chunk_reuse == 0.0
    with pytest.raises(ValueError, match="pixel_chunk_reuse"):
        Machine.from_json(json.dumps({**data, "pixel_chunk_reuse": 1.5}))


def test_calibrate_writes_a_machine_file_that_optimize_reads(tmp_path: Path) -> None:
    path = tmp_path / "here.json"
    proc = _aotc("calibrate", "-o", str(path), "--seconds", "0.02")
    assert proc.returncode == 0, proc.stderr
    m = load_machine_file(path)
    assert m.peak_flops > 1e9 and m.l1_bandwidth > 0 and m.block_efficiency
    assert all(0 < e < 1.5 for _, e in m.block_efficiency)
    assert m.pixel_efficiency and all(0 < e < 1.5 for _, e in m.pixel_efficiency)
    assert "FMA peak" in proc.stdout and "micro-kernel" in proc.stdout
    proc = _aotc("optimize", str(MLP), "-o", str(tmp_path / "b"), "--machine", str(path))
    assert proc.returncode == 0, proc.stderr
    # --target cpu reads the file calibrate keeps in the user's cache
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache), "AOTC_NO_MACHINE_FILE": ""}
    proc = _aotc("calibrate", "--seconds", "0.02", env=env)
    assert proc.returncode == 0, proc.stderr
    kept = next((cache / "aotc").glob("machine-*.json"))
    probe = subprocess.run(
        [sys.executable, "-c", "from targets.cpu.target import host_target; "
         "print(host_target().machine.ghz)"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    assert float(probe.stdout) == load_machine_file(kept).ghz


def test_bad_machine_file_is_a_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = _aotc("optimize", str(MLP), "-o", str(tmp_path / "b"), "--machine", str(bad))
    assert proc.returncode == 2 and "bad.json" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "b").exists()
    znver4 = tmp_path / "zen4.json"
    MACHINES["znver4"].save(znver4)
    proc = _aotc("optimize", str(MLP), "-o", str(tmp_path / "b"), "--target", "cpu-avx2",
                 "--machine", str(znver4))
    assert proc.returncode == 2 and "512-bit" in proc.stderr


def test_named_machines_are_consistent() -> None:
    for name, m in MACHINES.items():
        assert m.name == name and m.l1 < m.l2 and m.line == 64
        assert m.l1_bandwidth >= m.l2_bandwidth >= m.l3_bandwidth >= m.memory_bandwidth
        assert Machine.from_json(m.to_json()) == m


def test_host_last_level_share_is_at_most_the_known_cores(tmp_path: Path) -> None:
    """A 2-vCPU guest's sysfs says its two CPUs share a 32 MiB L3 (16 MiB each); the cost
    models take Zen 3's documented share (4 MiB: 32 MiB over 8 cores) instead, and a smaller
    share read from sysfs as it is."""
    from targets.cpu.target import host_machine

    def sysfs(l3: str, sharing: str) -> Path:
        root = tmp_path / f"{l3}_{sharing}"
        for i, (level, kind, size, cpus) in enumerate([
                (1, "Data", "32K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "512K", "0"),
                (3, "Unified", l3, sharing)]):
            entry = root / f"index{i}"
            entry.mkdir(parents=True)
            for name, text in (("level", str(level)), ("type", kind), ("size", size),
                               ("coherency_line_size", "64"), ("shared_cpu_list", cpus)):
                (entry / name).write_text(text + "\n")
        return root

    guest = host_machine("x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma",
                         sysfs("32768K", "0-1"))
    assert (guest.l1, guest.l2, guest.l3) == (32 << 10, 512 << 10, MACHINES["znver3"].l3)
    small = host_machine("x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma",
                         sysfs("8192K", "0-7"))
    assert small.l3 == 1 << 20


def test_a_zen1_host_is_planned_at_its_own_vector_unit(tmp_path: Path) -> None:
    """LLVM reads a first-generation EPYC as `znver1`: AVX2 on two 128-bit FMA pipes, one
    256-bit FMA and one 256-bit load a cycle, 5 cycles' latency, a 2 MiB share of L3. Taken
    for a Zen 3 it was planned at twice its FMAs and loads per cycle."""
    from targets.cpu.target import host_machine

    zen1 = host_machine("x86_64-unknown-linux-gnu", "znver1", "+avx2,+fma", tmp_path)
    assert zen1 == dataclasses.replace(MACHINES["znver1"], cores=zen1.cores)
    assert (zen1.fma_per_cycle, zen1.loads_per_cycle, zen1.fma_latency) == (1, 1, 5)
    assert zen1.l3 == 2 << 20
    assert zen1.peak_flops < 0.5 * MACHINES["znver3"].peak_flops
    assert NAMED_TARGETS["zen1"].machine is MACHINES["znver1"]


@pytest.mark.parametrize("row", [name for name, m in MACHINES.items() if m.pixel_efficiency])
def test_measured_pixel_tables_cover_every_block_of_their_vector_unit(row: str) -> None:
    """A documented row that carries measured pixel-mode efficiencies has one for every
    register block its vector unit offers: a block left to the loads-per-FMA estimate would be
    ranked on another scale (on a Zen 4 core the estimate put 16x1 at 0.49 of peak, measured
    0.99)."""
    target = next(t for t in NAMED_TARGETS.values() if t.machine.name == row)
    blocks = {b.name for b in _conv_1x1_space(target).blocks}
    assert blocks <= {name for name, _ in MACHINES[row].pixel_efficiency}


@pytest.mark.parametrize("row", [name for name, m in MACHINES.items() if m.block_efficiency
                                 and any(t.machine.name == name for t in NAMED_TARGETS.values())])
def test_measured_gemm_tables_cover_every_block_of_their_vector_unit(row: str) -> None:
    """Likewise for the GEMM micro-kernel's table: a row that measured some blocks measured
    them all (on a Zen 5 core 16x1 runs at 0.59 of peak, where the estimate says more)."""
    target = next(t for t in NAMED_TARGETS.values() if t.machine.name == row)
    blocks = {b.name for b in _conv_1x1_space(target).blocks}
    assert blocks <= {name for name, _ in MACHINES[row].block_efficiency}


def test_a_zen5_host_is_ranked_at_two_512_bit_fmas_a_cycle(tmp_path: Path) -> None:
    """LLVM's znver5 takes its own row, not Zen 4's: the same 16 lanes, but two FMA pipes of
    512 bits where Zen 4 splits one FMA over two 256-bit pipes. Ranked as a Zen 4, a Zen 5
    core's compute looks half as fast against its caches as it is."""
    from targets.cpu.target import host_machine

    features = "+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl"
    zen5 = host_machine("x86_64-unknown-linux-gnu", "znver5", features, tmp_path / "none")
    zen4 = host_machine("x86_64-unknown-linux-gnu", "znver4", features, tmp_path / "none")
    assert zen5.name == "znver5" and zen5.lanes_f32 == zen4.lanes_f32 == 16
    assert zen5.fma_per_cycle == 2 * zen4.fma_per_cycle
    assert zen5.peak_flops / zen5.hz == 2 * zen4.peak_flops / zen4.hz
    assert NAMED_TARGETS["zen5"].machine == MACHINES["znver5"]
