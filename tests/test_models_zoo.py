"""The sample models: reproducible from make_models.py, valid, static, small, runnable; torch
exports load in onnxruntime and match torch at a batch size the export never saw."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_zoo import (
    SAMPLE_MODELS,
    make_models,
    ort_run,
    random_inputs,
    torch_models,
    torch_reference,
)

MAX_MODEL_BYTES = 600 * 1024
MAX_TOTAL_BYTES = 3 * 1024 * 1024

# Operators each model must contain (what it is there to exercise).
REQUIRED_OPS = {
    "mlp": {"Gemm", "MatMul", "Add", "Relu", "Tanh", "Sigmoid", "Softmax"},
    "resnet_tiny": {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add",
                    "GlobalAveragePool", "Flatten", "Gemm"},
    "mobilenet_tiny": {"Conv", "BatchNormalization", "Clip", "HardSwish", "Add",
                       "GlobalAveragePool", "Flatten", "Gemm"},
    "transformer_tiny": {"Gather", "Add", "MatMul", "Reshape", "Transpose", "Div", "Mul",
                         "Softmax", "LayerNormalization", "Erf", "Shape", "Unsqueeze",
                         "Concat", "Constant"},
    "unet_tiny": {"Conv", "Relu", "MaxPool", "ConvTranspose", "Resize", "Concat", "Sigmoid"},
}

names = pytest.mark.parametrize("name", list(SAMPLE_MODELS))


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(SAMPLE_MODELS[name]))


def test_sample_list_matches_script() -> None:
    assert list(SAMPLE_MODELS) == list(make_models().SAMPLE_BUILDERS)


def test_committed_models_are_what_the_script_builds() -> None:
    built = make_models().build_sample_models()
    assert built == make_models().build_sample_models(), "make_models.py is not deterministic"
    for name, data in built.items():
        committed = SAMPLE_MODELS[name].read_bytes()
        if committed != data:  # same content serialized differently still passes
            assert onnx.load_from_string(committed) == onnx.load_from_string(data), (
                f"{name}.onnx is stale: run `python models/make_models.py`")


def test_script_writes_files(tmp_path: Path) -> None:
    paths = make_models().write_sample_models(tmp_path)
    assert sorted(p.name for p in paths) == sorted(p.name for p in SAMPLE_MODELS.values())


def test_sizes() -> None:
    sizes = {name: path.stat().st_size for name, path in SAMPLE_MODELS.items()}
    assert all(size < MAX_MODEL_BYTES for size in sizes.values()), sizes
    assert sum(sizes.values()) < MAX_TOTAL_BYTES, sizes


@names
def test_checker_static_shapes_and_ops(name: str) -> None:
    model = _load(name)
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain: o.version for o in model.opset_import}.get("", 0) >= 17
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), value
        assert dims[0].dim_value == 1, f"{value.name}: batch must be 1"
    for init in model.graph.initializer:
        assert init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64), init.name
    ops = Counter(n.op_type for n in model.graph.node)
    assert REQUIRED_OPS[name] <= set(ops), REQUIRED_OPS[name] - set(ops)


@names
def test_runs_in_onnxruntime(name: str) -> None:
    model = _load(name)
    outs = ort_run(SAMPLE_MODELS[name], random_inputs(SAMPLE_MODELS[name]))
    for value, out in zip(model.graph.output, outs, strict=True):
        expected = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        assert out.shape == expected and out.dtype == np.float32
        assert np.isfinite(out).all()
        assert np.abs(out).max() > 1e-3 and out.std() > 1e-3, "degenerate output"
        assert np.abs(out).max() < 1e3, "activations are not O(1)"


def test_random_inputs() -> None:
    path = SAMPLE_MODELS["transformer_tiny"]
    ids = random_inputs(path, seed=3)["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (1, 16)
    assert ids.min() >= 0 and ids.max() < 100
    assert np.array_equal(ids, random_inputs(path, seed=3)["input_ids"])
    x = random_inputs(SAMPLE_MODELS["mlp"], {"input": (4, 64)})["input"]
    assert x.dtype == np.float32 and x.shape == (4, 64)


# ---- torch exports ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, tuple[Path, dict[str, tuple[int, ...]]]]:
    return torch_models(tmp_path_factory.mktemp("torch_models"))


@pytest.mark.torch
def test_torch_exports_match_torch(
        exported: dict[str, tuple[Path, dict[str, tuple[int, ...]]]]) -> None:
    assert sorted(exported) == ["attention_dynamo", "attention_ts", "cnn_dynamo", "cnn_ts"]
    for name, (path, binding) in exported.items():
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
        batch_dims = [i.type.tensor_type.shape.dim[0] for i in model.graph.input]
        assert all(d.HasField("dim_param") for d in batch_dims), f"{name}: batch not dynamic"
        assert all(shape[0] == 3 for shape in binding.values())
        feeds = random_inputs(path, binding, seed=1)
        got = ort_run(path, feeds)
        want = torch_reference(name, feeds)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape, name
            scale = max(1.0, float(np.abs(w).max()))
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-4 * scale, err_msg=name)
