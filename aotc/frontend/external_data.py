"""External data: checks, before any byte is read, that every tensor kept outside the .onnx file
names a file inside the model's folder that holds all of the tensor's bytes.

A location that is absolute or leads out of the folder (`../../etc/passwd`, a symbolic link to
elsewhere) is refused: a model file must not make aotc read arbitrary files. A weights file that
is missing or shorter than its tensors (a truncated download) is refused with the tensor's name,
instead of failing later inside a library.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx

from aotc.errors import AotcError

_HINT = "keep the model's external-data files in its folder, complete, with the names it gives"


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attr in node.attribute:
        if attr.HasField("t"):
            yield attr.t
        yield from attr.tensors
        if attr.HasField("g"):
            yield from _graph_tensors(attr.g)
        for g in attr.graphs:
            yield from _graph_tensors(g)


def model_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of the model: initializers, constants and attributes, subgraphs and
    functions included."""
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _node_tensors(node)


def _expected_bytes(tensor: onnx.TensorProto) -> int | None:
    try:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None  # strings and unknown types: the loader reports those
    if tensor.data_type in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4):
        return None
    return int(np.prod(tensor.dims, dtype=np.int64)) * itemsize


def _int_field(tensor: onnx.TensorProto, info: dict[str, str], key: str, file: str) -> int | None:
    if key not in info:
        return None
    try:
        value = int(info[key])
    except ValueError:
        value = -1
    if value < 0:
        raise AotcError(f"tensor '{tensor.name}' has an invalid external-data {key} "
                        f"'{info[key]}'", file=file, hint=_HINT)
    return value


def check_external_data(model: onnx.ModelProto, path: Path) -> None:
    """Raises AotcError unless every external tensor of `model` (loaded from `path` without its
    external data) lies wholly inside a file within path's folder."""
    folder = path.resolve().parent
    file = str(path)
    for tensor in model_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        where = f"tensor '{tensor.name}' keeps its data in '{location}'"
        if not location or Path(location).is_absolute():
            raise AotcError(f"{where}: external data must be a path relative to the model's "
                            "folder", file=file, hint=_HINT)
        data = (folder / location).resolve()
        if folder not in data.parents:
            raise AotcError(f"{where}, which lies outside the model's folder {folder}",
                            file=file, hint=_HINT)
        if not data.is_file():
            raise AotcError(f"{where}, which is missing", file=file,
                            hint="copy the external-data file next to the model")
        offset = _int_field(tensor, info, "offset", file) or 0
        length = _int_field(tensor, info, "length", file)
        expected = _expected_bytes(tensor)
        if length is not None and expected is not None and length != expected:
            raise AotcError(f"{where}: its length {length} does not match its shape and type "
                            f"({expected} bytes)", file=file, hint=_HINT)
        need = length if length is not None else expected
        size = data.stat().st_size
        if need is not None and offset + need > size:
            raise AotcError(f"{where}, bytes {offset}..{offset + need}, but that file has only "
                            f"{size} bytes (truncated?)", file=file, hint=_HINT)
