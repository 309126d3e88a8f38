"""What a model file declares, checked before any library reads it: element types that ONNX
defines and names that are text.

onnx.checker lets an element type of 99 through and protobuf keeps a name that is not UTF-8 as
bytes; onnx_ir then fails deep inside with no name of the value. Here the value is named.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from aotc.errors import AotcError
from aotc.frontend.tensor_data import model_tensors

_DAMAGED = "the model file is damaged or was written wrongly"


def _graph_value_infos(graph: onnx.GraphProto) -> Iterator[onnx.ValueInfoProto]:
    yield from (*graph.input, *graph.output, *graph.value_info)
    for node in graph.node:
        for attr in node.attribute:
            for g in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _graph_value_infos(g)


def check_element_types(proto: onnx.ModelProto, path: Path) -> None:
    """Every declared element type is one ONNX defines."""
    known = set(onnx.TensorProto.DataType.values())
    for vi in _graph_value_infos(proto.graph):
        t = vi.type
        while t.WhichOneof("value") in ("sequence_type", "optional_type"):
            t = t.sequence_type.elem_type if t.HasField("sequence_type") else \
                t.optional_type.elem_type
        if t.HasField("tensor_type") and t.tensor_type.elem_type not in known:
            raise AotcError(f"value '{vi.name}' has element type {t.tensor_type.elem_type}, "
                            "which ONNX does not define", file=str(path), hint=_DAMAGED)
    for tensor in model_tensors(proto):
        if tensor.data_type not in known:
            raise AotcError(f"tensor '{tensor.name}' has element type {tensor.data_type}, "
                            "which ONNX does not define", file=str(path), hint=_DAMAGED)


def _fields(msg: Message) -> Iterator[tuple[FieldDescriptor, object]]:
    if isinstance(msg, onnx.TensorProto):  # never copy a tensor's data: its text is its name
        yield msg.DESCRIPTOR.fields_by_name["name"], msg.name
        yield from ((msg.DESCRIPTOR.fields_by_name["external_data"], e)
                    for e in msg.external_data)
        return
    for field, value in msg.ListFields():
        if field.is_repeated:
            yield from ((field, v) for v in value)  # type: ignore[attr-defined]
        else:
            yield field, value


def check_text(proto: onnx.ModelProto, path: Path) -> None:
    """Every string field (names, domains, op types, metadata) holds UTF-8 text."""
    todo: list[Message] = [proto]
    while todo:
        msg = todo.pop()
        for field, value in _fields(msg):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                todo.append(value)  # type: ignore[arg-type]
            elif field.type == FieldDescriptor.TYPE_STRING and not isinstance(value, str):
                shown = bytes(value).decode("utf-8", "replace")  # type: ignore[arg-type]
                raise AotcError(f"the {type(msg).__name__.removesuffix('Proto')}'s "
                                f"{field.name} '{shown}' is not UTF-8 text", file=str(path),
                                hint=_DAMAGED)
