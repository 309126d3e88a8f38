"""`aotc inspect`: what a model needs before it compiles (shapes, operators, dimensions)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

from aotc.errors import AotcError

# Operators with no kernel definition of their own: the frontend removes Constant (and an If
# whose condition is known), the compiler runs If, Scan and Loop around their compiled bodies.
FRONTEND_HANDLED = {"Constant", "If", "Scan", "Loop"}


@dataclass
class ModelDescription:
    opset: int
    ir_version: int
    producer: str
    num_nodes: int
    inputs: list[tuple[str, str, list[object]]]
    outputs: list[tuple[str, str, list[object]]]
    op_histogram: list[tuple[str, int]]
    unsupported_ops: set[str]
    unsupported: list[tuple[str, str]]
    unbound: list[tuple[str, int, str]]
    not_tensors: list[tuple[str, str]]  # (input/output name, its type) aotc cannot pass


def _elem_name(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "?"
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type) if elem_type in \
            onnx.TensorProto.DataType.values() else "?"


def _type_name(t: onnx.TypeProto) -> str:
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        return _elem_name(t.tensor_type.elem_type)
    if kind == "sequence_type":
        return f"sequence<{_type_name(t.sequence_type.elem_type)}>"
    if kind == "optional_type":
        return f"optional<{_type_name(t.optional_type.elem_type)}>"
    if kind == "map_type":
        return f"map<{_elem_name(t.map_type.key_type)}, {_type_name(t.map_type.value_type)}>"
    return kind or "?"


def is_tensor(vi: onnx.ValueInfoProto) -> bool:
    return vi.type.WhichOneof("value") in ("tensor_type", None)


def value_type(vi: onnx.ValueInfoProto) -> tuple[str, list[object] | None]:
    """(dtype name, dims: ints, symbol names or '?'; None when the shape is unknown)."""
    t = vi.type.tensor_type
    if not is_tensor(vi) or not t.HasField("shape"):
        return _type_name(vi.type), None
    return _type_name(vi.type), [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                 for d in t.shape.dim]


def _row(vi: onnx.ValueInfoProto) -> tuple[str, str, list[object]]:
    dtype, dims = value_type(vi)
    return vi.name, dtype, (dims if dims is not None else ["?"] if is_tensor(vi) else ["-"])


def load_checked(path: Path, with_data: bool = False) -> onnx.ModelProto:
    """The model's protobuf, checked (aotc.frontend.load.checked_proto); with `with_data` its
    external data is loaded too."""
    from aotc.frontend.load import checked_proto

    model = checked_proto(path)
    if with_data:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as e:  # OSError
            raise AotcError(f"cannot read the model's external data: {e}",
                            file=str(path)) from None
    return model


def _rewritten(node: onnx.NodeProto, opset: int) -> bool:
    """Whether the frontend rewrites `node` into operators it compiles: an ai.onnx.ml
    operator of `aotc.frontend.onnx_ml`, or one whose ONNX schema defines it as a function."""
    from aotc.frontend.onnx_ml import BUILDERS
    from aotc.frontend.schema_functions import ONNX_DOMAINS, _schema

    if node.domain == "ai.onnx.ml":
        return node.op_type in BUILDERS
    domain = ONNX_DOMAINS.get(node.domain)
    schema = _schema(node.op_type, opset, domain) if domain is not None else None
    return schema is not None and (schema.has_function or schema.has_context_dependent_function)


def describe_model(path: Path) -> ModelDescription:
    from lowering.ops import OPS

    model = load_checked(Path(path))
    g = model.graph
    inits = {i.name for i in g.initializer}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    hist: Counter[str] = Counter()
    unsupported: list[tuple[str, str]] = []
    # a call of a model-local function (e.g. an `ai.aotc` fused region) is inlined by the
    # frontend: it is supported when the nodes of its body are
    local = {(f.domain, f.name): f for f in model.functions}
    for n in g.node:
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        hist[op] += 1
        body = local.get((n.domain, n.op_type))
        if body is not None:
            bad = [b.op_type for b in body.node if b.domain not in ("", "ai.onnx")
                   or (b.op_type not in OPS and b.op_type not in FRONTEND_HANDLED)]
            if bad:
                unsupported.append((f"{n.name or '<unnamed>'} (body: {', '.join(bad)})", op))
        elif op not in OPS and op not in FRONTEND_HANDLED and not _rewritten(n, opset):
            unsupported.append((n.name or "<unnamed>", op))
    graph_inputs = [i for i in g.input if i.name not in inits]
    unbound = [(name, axis, str(d)) for name, _, dims in map(_row, filter(is_tensor, graph_inputs))
               for axis, d in enumerate(dims) if not isinstance(d, int) or d <= 0]
    not_tensors = [(v.name, _type_name(v.type)) for v in (*graph_inputs, *g.output)
                   if not is_tensor(v)]
    return ModelDescription(
        opset=opset, ir_version=model.ir_version, producer=model.producer_name,
        num_nodes=len(g.node), inputs=[_row(i) for i in graph_inputs],
        outputs=[_row(o) for o in g.output],
        op_histogram=hist.most_common(), unsupported_ops={op for _, op in unsupported},
        unsupported=unsupported, unbound=unbound, not_tensors=not_tensors,
    )
