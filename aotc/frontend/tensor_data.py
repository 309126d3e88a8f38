"""The bytes behind every tensor of a model, checked before any library reads them.

A tensor stored in the file must hold exactly the bytes (or values) its shape and type call for:
an exporter's or a download's damage is reported with the tensor's name, not as numpy's error
deep inside a pass. A tensor kept outside the .onnx file must name a file inside the model's
folder that holds all of its bytes: a location that is absolute or leads out of the folder
(`../../etc/passwd`, a symbolic link to elsewhere) is refused, since a model file must not make
aotc read arbitrary files, and a missing or short weights file (a truncated download) is named.
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


_T = onnx.TensorProto
# The typed field that holds a tensor's values when it has no raw_data, and how many entries
# one element takes there.
_FIELDS = {
    _T.FLOAT: ("float_data", 1), _T.DOUBLE: ("double_data", 1), _T.INT64: ("int64_data", 1),
    _T.UINT32: ("uint64_data", 1), _T.UINT64: ("uint64_data", 1),
    _T.COMPLEX64: ("float_data", 2), _T.COMPLEX128: ("double_data", 2),
    **{t: ("int32_data", 1) for t in (_T.INT32, _T.INT16, _T.INT8, _T.UINT16, _T.UINT8,
                                      _T.BOOL, _T.FLOAT16, _T.BFLOAT16)},
}


def _elements(tensor: onnx.TensorProto) -> int:
    return int(np.prod(tensor.dims, dtype=np.int64))


def element_size(data_type: int) -> int | None:
    """Bytes per element of an ONNX element type (a byte for 4- and 2-bit types, which raw
    data packs two or four to a byte and aotc keeps one a byte); None for strings and unknown
    types."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return None


# Elements per byte of ONNX's packed raw data for the types narrower than a byte.
_PACKED = {_T.INT4: 2, _T.UINT4: 2, _T.FLOAT4E2M1: 2, _T.INT2: 4, _T.UINT2: 4}


def _expected_bytes(tensor: onnx.TensorProto) -> int | None:
    if tensor.data_type in _PACKED:
        per = _PACKED[tensor.data_type]
        return (_elements(tensor) + per - 1) // per
    size = element_size(tensor.data_type)
    return None if size is None else _elements(tensor) * size  # strings: the loader reports


def _check_stored(tensor: onnx.TensorProto, file: str) -> None:
    """A tensor stored in the file holds exactly what its dims and type call for."""
    kind = (_T.DataType.Name(tensor.data_type) if tensor.data_type in _T.DataType.values()
            else f"type {tensor.data_type}")
    where = f"tensor '{tensor.name}' ({kind}{list(tensor.dims)})"
    if any(d < 0 for d in tensor.dims):
        raise AotcError(f"{where} has a negative dimension", file=file)
    if tensor.HasField("raw_data"):
        expected = _expected_bytes(tensor)
        if expected is not None and len(tensor.raw_data) != expected:
            raise AotcError(f"{where} holds {len(tensor.raw_data)} bytes, its shape and type "
                            f"need {expected}", file=file, hint=_DAMAGED)
        return
    field, per = _FIELDS.get(tensor.data_type, (None, 1))
    if field is None:
        return
    count = len(getattr(tensor, field))
    if count != _elements(tensor) * per:
        raise AotcError(f"{where} holds {count // per} values, its shape needs "
                        f"{_elements(tensor)}", file=file, hint=_DAMAGED)


_DAMAGED = "the model file is damaged or was written wrongly: export it again"


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


def check_tensor_data(model: onnx.ModelProto, path: Path) -> None:
    """Raises AotcError unless every tensor of `model` (loaded from `path` without its external
    data) holds what its shape and type need, in the file or in a file within path's folder."""
    for tensor in model_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            _check_external(tensor, path)
        else:
            _check_stored(tensor, str(path))


def _check_external(tensor: onnx.TensorProto, path: Path) -> None:
    folder = path.resolve().parent
    file = str(path)
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
