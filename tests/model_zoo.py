"""Test helper for the sample models: paths, random inputs, onnxruntime runs, torch exports."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = ROOT / "models"
MAKE_MODELS = MODELS_DIR / "make_models.py"

SAMPLE_NAMES = ("mlp", "resnet_tiny", "mobilenet_tiny", "transformer_tiny", "unet_tiny")
SAMPLE_MODELS: dict[str, Path] = {name: MODELS_DIR / f"{name}.onnx" for name in SAMPLE_NAMES}

DEFAULT_INT_HIGH = 100
TORCH_TEST_BATCH = 3  # differs from make_models.TORCH_EXPORT_BATCH on purpose

ModelLike = str | Path | bytes | onnx.ModelProto


@functools.cache
def make_models() -> ModuleType:
    """``models/make_models.py`` imported as a module (``models/`` is not a package)."""
    spec = importlib.util.spec_from_file_location("aotc_make_models", MAKE_MODELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(model: ModelLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(str(model), load_external_data=False)


def _gather_index_bound(graph: onnx.GraphProto, name: str) -> int | None:
    """Smallest gathered-axis size over the Gathers that index a constant table with ``name``."""
    tables = {t.name: list(t.dims) for t in graph.initializer}
    bounds = []
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
            dims = tables.get(node.input[0])
            if dims:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                bounds.append(dims[axis])
    return min(bounds) if bounds else None


def random_inputs(model_path: ModelLike, shapes: dict[str, tuple[int, ...]] | None = None,
                  seed: int = 0, int_high: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs for every graph input, by the dtype the model declares.

    Floats are N(0, 1); integers are drawn in ``[0, int_high)`` (default: the table size when
    the input indexes a constant Gather table, else 100); bools are fair coin flips. ``shapes``
    overrides an input's shape; a symbolic or unknown dim without an override raises.
    """
    model = _load(model_path)
    graph = model.graph
    shapes = shapes or {}
    inits = {t.name for t in graph.initializer}
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for inp in graph.input:
        if inp.name in inits:
            continue
        ttype = inp.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type))
        if inp.name in shapes:
            shape = tuple(int(d) for d in shapes[inp.name])
        else:
            dims = list(ttype.shape.dim) if ttype.HasField("shape") else None
            if dims is None or any(not d.HasField("dim_value") for d in dims):
                raise ValueError(f"input {inp.name!r} has a dynamic shape: pass shapes=")
            shape = tuple(d.dim_value for d in dims)
        if dtype.kind == "f":
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            high = int_high or _gather_index_bound(graph, inp.name) or DEFAULT_INT_HIGH
            feeds[inp.name] = rng.integers(0, high, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[inp.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise ValueError(f"input {inp.name!r}: unsupported dtype {dtype}")
    return feeds


def ort_run(model_path_or_bytes: ModelLike, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Runs the model in onnxruntime (CPU, one thread) and returns all outputs in order."""
    model = model_path_or_bytes
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif isinstance(model, Path):
        model = str(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return list(sess.run(None, inputs))


def torch_models(tmp_dir: str | Path) -> dict[str, tuple[Path, dict[str, tuple[int, ...]]]]:
    """Exports the torch sample modules into ``tmp_dir`` (skips the test without torch).

    Returns ``{name: (path, {input: shape})}``: the shape binding (``--input-shape``) puts
    ``TORCH_TEST_BATCH`` on the dynamic batch dimension, a batch the export never saw.
    """
    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    paths = make_models().export_torch_models(Path(tmp_dir))
    out: dict[str, tuple[Path, dict[str, tuple[int, ...]]]] = {}
    for name, path in paths.items():
        model = onnx.load(str(path), load_external_data=False)
        inits = {t.name for t in model.graph.initializer}
        binding = {}
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            dims = inp.type.tensor_type.shape.dim
            binding[inp.name] = tuple(d.dim_value if d.HasField("dim_value") else
                                      TORCH_TEST_BATCH for d in dims)
        out[name] = (path, binding)
    return out


def torch_reference(name: str, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of the torch module behind export ``name`` (e.g. ``cnn_ts``) on ``inputs``."""
    import torch

    module_name = name.rsplit("_", 1)[0]
    module: Any = make_models().torch_modules()[module_name][0]
    with torch.no_grad():
        args = [torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()]
        result = module(*args)
    results = result if isinstance(result, tuple | list) else (result,)
    return [r.numpy() for r in results]
