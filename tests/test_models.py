"""Every sample model end to end: aotc optimize → make → run_model (own process) → onnxruntime."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from model_zoo import SAMPLE_MODELS, random_inputs, torch_models  # noqa: E402
from program_runner import assert_close, ort_outputs  # noqa: E402

from aotc.driver import optimize_model  # noqa: E402
from aotc.package.build import build_bundle, run_model_process  # noqa: E402
from aotc.package.loaded import LoadedBundle  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _inputs(path: Path, shapes=None) -> list[np.ndarray]:
    model = onnx.load(str(path))
    arrays = random_inputs(path, shapes, seed=1)
    inits = {i.name for i in model.graph.initializer}
    return [arrays[i.name] for i in model.graph.input if i.name not in inits]


def _reference(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return ort_outputs(onnx.load(str(path)), inputs)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, path in SAMPLE_MODELS.items():
        d = tmp_path_factory.mktemp(name) / "bundle"
        optimize_model(path, d, input_shapes=[])
        out[name] = d
    return out


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_model_bundle_matches_onnxruntime(name: str, bundles: dict[str, Path]) -> None:
    d = bundles[name]
    build_bundle(d)
    inputs = _inputs(SAMPLE_MODELS[name])
    got = run_model_process(d, inputs)
    for g, w in zip(got, _reference(SAMPLE_MODELS[name], inputs), strict=True):
        assert_close(g, w)
    # arena reuse is real: the plan is never above the no-reuse sum, never below the bound
    import json

    meta = json.loads((d / "aotc_bundle.json").read_text())
    assert meta["arena_lower_bound"] <= meta["arena_size"] <= meta["arena_no_reuse"]


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_model_under_sanitizers(name: str, bundles: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "asan"
    shutil.copytree(bundles[name], d)
    san = "-fsanitize=address,undefined -fno-sanitize-recover=all"
    build_bundle(d, cflags=f"-O1 -g {san}", ldflags=san)
    inputs = _inputs(SAMPLE_MODELS[name])
    got = run_model_process(d, inputs, threads=2, env={"ASAN_OPTIONS": "detect_leaks=1"})
    for g, w in zip(got, _reference(SAMPLE_MODELS[name], inputs), strict=True):
        assert_close(g, w)


def test_two_threads_two_contexts(bundles: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "shared"
    shutil.copytree(bundles["resnet_tiny"], d)
    build_bundle(d, target="shared")
    path = SAMPLE_MODELS["resnet_tiny"]
    sets = [_inputs(path), [np.random.default_rng(7).standard_normal((1, 3, 32, 32),
                                                                        dtype=np.float32)]]
    want = [_reference(path, s) for s in sets]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            with LoadedBundle(d) as b:
                b.create(threads=2)
                for _ in range(20):
                    for g, w in zip(b.run(sets[k]), want[k], strict=True):
                        assert_close(g, w)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.cross
def test_aarch64_bundle_under_qemu(tmp_path: Path) -> None:
    if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
        pytest.skip("aarch64-linux-gnu-gcc / qemu-aarch64 not installed")
    path = SAMPLE_MODELS["mobilenet_tiny"]
    d = tmp_path / "bundle"
    result = optimize_model(path, d, input_shapes=[], target="aarch64")
    assert result.program.triple.startswith("aarch64")
    build_bundle(d, cc="aarch64-linux-gnu-gcc")
    inputs = _inputs(path)
    got = run_model_process(d, inputs, runner=["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"])
    for g, w in zip(got, _reference(path, inputs), strict=True):
        assert_close(g, w)


@pytest.mark.cross
@pytest.mark.parametrize("target,model", [("aarch64", "resnet_tiny"), ("cpu-avx2", "unet_tiny")])
def test_pixel_mode_convolutions_on_narrower_vectors(tmp_path: Path, target: str,
                                                     model: str) -> None:
    """Convolutions take pixel mode on NEON (4 lanes) and AVX2 (8 lanes) too, with blocks
    taller than a vector (their tiles transpose in several L x L blocks); the bundle runs
    (under qemu for AArch64) and matches onnxruntime."""
    import re
    runner = None
    if target == "aarch64":
        if not (shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64")):
            pytest.skip("aarch64-linux-gnu-gcc / qemu-aarch64 not installed")
        runner = ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
    elif "avx2" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this machine cannot run AVX2 code")
    path = SAMPLE_MODELS[model]
    d = tmp_path / "bundle"
    result = optimize_model(path, d, input_shapes=[], target=target)
    blocks = {(int(m), int(v), int(lanes)) for m, v, lanes in re.findall(
        r"define internal void @aotc_conv_f32_(\d+)x(\d+)v(\d+)", result.program.kernel_ll)}
    assert blocks, "no pixel-mode kernel"
    assert any(mr > lanes for mr, _, lanes in blocks), blocks
    if target == "aarch64":
        build_bundle(d, cc="aarch64-linux-gnu-gcc")
    else:
        build_bundle(d)
    inputs = _inputs(path)
    got = run_model_process(d, inputs, runner=runner)
    for g, w in zip(got, _reference(path, inputs), strict=True):
        assert_close(g, w)


@pytest.mark.torch
def test_torch_exported_models(tmp_path: Path) -> None:
    models = torch_models(tmp_path / "torch")
    assert models, "no torch models exported"
    for name, (path, shapes) in models.items():
        d = tmp_path / f"b_{name}"
        spec = [f"{k}={','.join(map(str, v))}" for k, v in shapes.items()]
        optimize_model(path, d, input_shapes=spec)
        build_bundle(d)
        inputs = _inputs(path, shapes)
        got = run_model_process(d, inputs)
        for g, w in zip(got, _reference(path, inputs), strict=True):
            assert_close(g, w)
