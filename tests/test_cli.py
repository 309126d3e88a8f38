"""The `aotc` command as a user runs it: success paths, and every user error → exit 2, one
clear message, no traceback, no output folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "models" / "mlp.onnx"


def aotc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aotc", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    model.ir_version = 10
    onnx.save(model, path)
    return path


def _user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text
    for n in needles:
        assert n in text, f"{n!r} not in:\n{text}"


def test_optimize_verify_inspect(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    proc = aotc("optimize", MLP, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "arena" in proc.stdout and "lower bound" in proc.stdout
    assert (out / "model.h").is_file() and (out / "Makefile").is_file()
    proc = aotc("verify", MLP, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match onnxruntime" in proc.stdout
    proc = aotc("inspect", MLP)
    assert proc.returncode == 0
    assert "Gemm" in proc.stdout and "ready to compile" in proc.stdout


def test_malformed_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\x01\x02")
    out = tmp_path / "bundle"
    _user_error(aotc("optimize", bad, "-o", out), "broken.onnx")
    assert not out.exists()


def test_unsupported_operators_all_listed(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["d"], name="uniform_node"),
        helper.make_node("Relu", ["x"], ["r"], name="relu_node"),
        helper.make_node("RandomNormalLike", ["r"], ["y"], name="random_node"),
    ]
    g = helper.make_graph(nodes, "g", [x], [y, helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 3])])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
                 tmp_path / "unsup.onnx")
    out = tmp_path / "bundle"
    _user_error(aotc("optimize", path, "-o", out), "uniform_node", "RandomUniformLike", "random_node",
                "RandomNormalLike")
    assert not out.exists()


def _dynamic_model(tmp_path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
                 tmp_path / "dyn.onnx")


def test_unbound_dimension(tmp_path: Path) -> None:
    path = _dynamic_model(tmp_path)
    out = tmp_path / "bundle"
    _user_error(aotc("optimize", path, "-o", out), "x", "--input-shape")
    assert not out.exists()
    proc = aotc("optimize", path, "-o", out, "--input-shape", "x=3,4")
    assert proc.returncode == 0, proc.stderr
    assert aotc("verify", path, out, "--input-shape", "x=3,4").returncode == 0


@pytest.mark.parametrize("spec", ["x=3,a", "x", "nope=1,4", "x=1,2,3", "x=0,4", "x=3,5"])
def test_bad_input_shape(tmp_path: Path, spec: str) -> None:
    path = _dynamic_model(tmp_path)
    out = tmp_path / "bundle"
    _user_error(aotc("optimize", path, "-o", out, "--input-shape", spec), "input")
    assert not out.exists()


def test_unwritable_output(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    _user_error(aotc("optimize", MLP, "-o", blocker / "bundle"), "a_file")


def test_unknown_target_and_pass(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _user_error(aotc("optimize", MLP, "-o", out, "--target", "z80"), "z80")
    _user_error(aotc("optimize", MLP, "-o", out, "--disable-pass", "nope"), "nope")
    assert not out.exists()


def test_existing_bundle_kept_on_failure(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert aotc("optimize", MLP, "-o", out).returncode == 0
    before = sorted(p.name for p in out.iterdir())
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"garbage")
    _user_error(aotc("optimize", bad, "-o", out), "broken.onnx")
    assert sorted(p.name for p in out.iterdir()) == before


# ---- user mistakes are user errors (exit 2, a message), never an "internal error" ----


def test_version_and_bad_choices() -> None:
    proc = aotc("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("aotc ")
    _user_error(aotc("optimize", MLP, "-o", "unused", "--emit", "banana"), "'c'", "'onnx'")
    _user_error(aotc("verify", MLP, "unused", "--runs", "0"), "--runs")


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mlp") / "bundle"
    proc = aotc("optimize", MLP, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_verify_with_another_model(mlp_bundle: Path) -> None:
    _user_error(aotc("verify", ROOT / "models" / "resnet_tiny.onnx", mlp_bundle),
                "input 'input'", "in the bundle")


def test_verify_with_a_runner_that_does_not_exist(mlp_bundle: Path) -> None:
    _user_error(aotc("verify", MLP, mlp_bundle, "--runner", "no-such-emulator -L /x"),
                "no-such-emulator")


def _copy_with_manifest(bundle: Path, dest: Path, **changes: object) -> Path:
    import json
    import shutil

    shutil.copytree(bundle, dest)
    manifest = json.loads((dest / "aotc_bundle.json").read_text())
    manifest.update(changes)
    (dest / "aotc_bundle.json").write_text(json.dumps(manifest))
    return dest


def test_verify_on_a_cpu_that_lacks_the_kernels_features(mlp_bundle: Path,
                                                          tmp_path: Path) -> None:
    bundle = _copy_with_manifest(mlp_bundle, tmp_path / "b", cpu_features=["avx2", "amx-fp64"])
    _user_error(aotc("verify", MLP, bundle), "amx-fp64", "lacks")


def test_verify_of_another_architecture(mlp_bundle: Path, tmp_path: Path) -> None:
    import platform

    other = "x86_64-unknown-linux-gnu" if platform.machine() in ("aarch64", "arm64") \
        else "aarch64-unknown-linux-gnu"
    bundle = _copy_with_manifest(mlp_bundle, tmp_path / "b", triple=other)
    _user_error(aotc("verify", MLP, bundle), f"compiled for {other}", "--runner")


def test_scalar_input_compiles_and_verifies(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Mul", ["x", "v"], ["y"], name="scale")], "g",
                          [x, v], [y])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]),
                 tmp_path / "scalar.onnx")
    out = tmp_path / "bundle"
    assert aotc("optimize", path, "-o", out).returncode == 0
    proc = aotc("verify", path, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import numpy as np

    from aotc.package.build import LoadedBundle, build_bundle

    build_bundle(out, target="shared")
    with LoadedBundle(out) as b:  # a 0-d array stays 0-d
        b.create(1)
        (got,) = b.run([np.array(2.0, np.float32), np.arange(3, dtype=np.float32)])
    np.testing.assert_array_equal(got, [0.0, 2.0, 4.0])


def test_inspect_shows_symbolic_dimensions(tmp_path: Path) -> None:
    proc = aotc("inspect", _dynamic_model(tmp_path))
    assert proc.returncode == 0 and "[N, 4]" in proc.stdout


def test_sequence_input_is_named(tmp_path: Path) -> None:
    s = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Identity", ["s"], ["y"], name="id")], "g", [s], [y])
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                 tmp_path / "seq.onnx")
    proc = aotc("optimize", path, "-o", tmp_path / "out")
    _user_error(proc, "input 's'", "Sequence")
    assert "--input-shape" not in proc.stderr
    proc = aotc("inspect", path)
    assert proc.returncode == 0 and "sequence<float32>" in proc.stdout
    assert "ready to compile" not in proc.stdout


def test_split_to_sequence_with_a_split_ignores_keepdims(tmp_path: Path) -> None:
    """keepdims applies only without a split input (onnxscript's folding applied it anyway;
    onnxruntime 1.32 refuses such a model, so onnx's reference evaluator is the oracle)."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    from aotc.package.build import build_bundle, run_model_process

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    inits = [helper.make_tensor("split", TensorProto.INT64, [], [2]),
             helper.make_tensor("pos", TensorProto.INT64, [], [1])]
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["s"], name="sts", keepdims=0),
             helper.make_node("SequenceAt", ["s", "pos"], ["y"], name="at")]
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    path = _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                 tmp_path / "sts.onnx")
    out = tmp_path / "bundle"
    proc = aotc("optimize", path, "-o", out)
    assert proc.returncode == 0, proc.stderr
    build_bundle(out)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    want = ReferenceEvaluator(str(path)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run_model_process(out, [x])[0], want)


def test_a_compiler_bug_names_the_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception (a bug, not a user error) says which node it was compiling."""
    from aotc.driver import compile_file
    from aotc.errors import AotcError, CompilerBug
    from lowering.ops import OPS

    def broken(ctx):
        raise ValueError("boom")

    monkeypatch.setitem(OPS, "Tanh", broken)  # (alone, or inside its fused region)
    with pytest.raises(CompilerBug, match="ValueError while compiling node '[^']*/act2/Tanh' "
                                          r"\([^)]*Tanh\): boom") as err:
        compile_file(MLP, input_shapes=[])
    assert not isinstance(err.value, AotcError)
