"""aotc never deletes a file it did not write: `-o` folders it refuses, as a user meets them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "models" / "mlp.onnx"


def aotc(*args: object, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text
    assert "Traceback" not in text and "internal error" not in text
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A user's folder: the model and a file of theirs."""
    shutil.copy(MLP, tmp_path / "mlp.onnx")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.npy").write_bytes(b"keep")
    return tmp_path


@pytest.mark.parametrize("emit", ["c", "onnx"])
def test_current_folder_is_refused(workdir: Path, emit: str) -> None:
    before = _tree(workdir)
    _refused(aotc("optimize", "mlp.onnx", "-o", ".", "--emit", emit, cwd=workdir),
             "current folder")
    assert _tree(workdir) == before


def test_parents_of_the_current_folder_are_refused(workdir: Path) -> None:
    before = _tree(workdir)
    for output in ("..", str(workdir.parent), "data/.."):
        _refused(aotc("optimize", workdir / "mlp.onnx", "-o", output, cwd=workdir / "data"),
                 "current folder")
    assert _tree(workdir) == before


def test_folder_holding_the_model_is_refused(workdir: Path, tmp_path_factory) -> None:
    before = _tree(workdir)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    _refused(aotc("optimize", workdir / "mlp.onnx", "-o", workdir, cwd=elsewhere),
             "holds the input mlp.onnx")
    assert _tree(workdir) == before


def test_folder_with_the_users_files_is_refused(workdir: Path) -> None:
    before = _tree(workdir)
    _refused(aotc("optimize", "mlp.onnx", "-o", "data", cwd=workdir), "did not write")
    assert _tree(workdir) == before


def test_a_bundle_with_a_users_file_added_is_refused(workdir: Path) -> None:
    assert aotc("optimize", "mlp.onnx", "-o", "bundle", cwd=workdir).returncode == 0
    assert subprocess.run(["make", "-s", "-C", str(workdir / "bundle")]).returncode == 0
    (workdir / "bundle" / "main.c").write_text("int main(void) { return 0; }")
    before = _tree(workdir)
    _refused(aotc("optimize", "mlp.onnx", "-o", "bundle", cwd=workdir), "main.c")
    assert _tree(workdir) == before
    (workdir / "bundle" / "main.c").unlink()  # a built bundle alone is replaced
    proc = aotc("optimize", "mlp.onnx", "-o", "bundle", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert not (workdir / "bundle" / "run_model").exists()
    assert (workdir / "notes.txt").read_text() == "mine"


def test_existing_file_as_output_is_refused(workdir: Path) -> None:
    _refused(aotc("optimize", "mlp.onnx", "-o", "notes.txt", cwd=workdir), "not a folder")
    assert (workdir / "notes.txt").read_text() == "mine"


def test_emit_onnx_replaces_only_its_own_folder(workdir: Path) -> None:
    assert aotc("optimize", "mlp.onnx", "-o", "rewritten", "--emit", "onnx",
                cwd=workdir).returncode == 0
    manifest = json.loads((workdir / "rewritten" / "aotc_bundle.json").read_text())
    assert manifest["kind"] == "onnx" and "model.onnx" in manifest["files"]
    assert aotc("optimize", "mlp.onnx", "-o", "rewritten", "--emit", "onnx",
                cwd=workdir).returncode == 0
    _refused(aotc("optimize", "mlp.onnx", "-o", "data", "--emit", "onnx", cwd=workdir),
             "did not write")


def _external_weights_model(folder: Path) -> Path:
    model = onnx.load(str(MLP))
    onnx.save_model(model, str(folder / "ext.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    return folder / "ext.onnx"


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_emit_onnx_of_a_model_with_external_weights(tmp_path: Path) -> None:
    """The rewritten model holds its own weights (embedded when small) and runs elsewhere."""
    src = tmp_path / "src"
    src.mkdir()
    model = _external_weights_model(src)
    proc = aotc("optimize", model, "-o", tmp_path / "out", "--emit", "onnx")
    assert proc.returncode == 0, proc.stderr
    moved = tmp_path / "moved"
    shutil.move(tmp_path / "out", moved)  # nothing in it may point back to src/
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    want = _ort(model, x)
    (src / "ext.onnx.data").rename(src / "gone.data")
    np.testing.assert_allclose(_ort(moved / "model.onnx", x), want, rtol=1e-5, atol=1e-5)
    assert sorted(p.name for p in moved.iterdir()) == ["aotc_bundle.json", "model.onnx"]


def test_emit_onnx_writes_large_weights_beside_the_model(tmp_path: Path, monkeypatch) -> None:
    from aotc import driver

    src = tmp_path / "src"
    src.mkdir()
    model = _external_weights_model(src)
    monkeypatch.setattr(driver, "EMBED_WEIGHTS_LIMIT", 1024)
    driver.emit_onnx(model, tmp_path / "out", input_shapes=[], name="big")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["aotc_bundle.json", "big.onnx",
                                                     "big.onnx.data"]
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    want = _ort(model, x)
    (src / "ext.onnx.data").unlink()
    np.testing.assert_allclose(_ort(out / "big.onnx", x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_pytorch_default_export_with_external_weights(tmp_path: Path) -> None:
    """torch.onnx.export's default exporter keeps the weights in model.onnx.data: the C bundle
    verifies, and --emit onnx gives a model that runs from another folder in onnxruntime."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 10)).eval()
    src = tmp_path / "export"
    src.mkdir()
    batch = torch.export.Dim("batch")
    torch.onnx.export(net, (torch.randn(2, 64),), str(src / "net.onnx"),
                      dynamic_shapes=({0: batch},), external_data=True)
    assert (src / "net.onnx.data").is_file()
    name = onnx.load(str(src / "net.onnx"), load_external_data=False).graph.input[0].name
    shape = f"{name}=3,64"
    proc = aotc("optimize", src / "net.onnx", "-o", tmp_path / "c", "--input-shape", shape)
    assert proc.returncode == 0, proc.stderr
    proc = aotc("verify", src / "net.onnx", tmp_path / "c", "--input-shape", shape)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = aotc("optimize", src / "net.onnx", "-o", tmp_path / "o", "--emit", "onnx",
                "--input-shape", shape)
    assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    want = _ort(src / "net.onnx", x)
    shutil.rmtree(src)
    np.testing.assert_allclose(_ort(tmp_path / "o" / "model.onnx", x), want, rtol=1e-5,
                               atol=1e-5)
