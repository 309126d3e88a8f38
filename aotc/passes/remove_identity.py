"""Pass `remove_identity`: drop nodes that pass their input through unchanged.

Identity; Dropout in inference mode; Cast/CastLike to the input's own dtype; Reshape, Flatten,
Squeeze, Unsqueeze and Expand whose output shape equals the input's; Transpose with the
identity permutation. Graph input and output names never change: when the removed value is a
graph output, the value feeding it takes its name; when that value is a graph input, an
initializer, another output or comes from an outer graph, an Identity stays (a copy).
"""

from __future__ import annotations

import onnx_ir as ir

from aotc.frontend.irutil import all_nodes, bypass, const_array, get_attr, static_dims

_SAME_SHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand"})


def _unused(value: ir.Value) -> bool:
    return not value.uses() and not value.is_graph_output()


def _is_noop(node: ir.Node) -> bool:
    if node.domain != "" or not node.inputs or node.inputs[0] is None:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if not all(_unused(o) for o in node.outputs[1:]):
        return False
    op = node.op_type
    if op == "Identity":
        return True
    if op == "Dropout":
        training = const_array(node.inputs[2]) if len(node.inputs) > 2 else None
        if len(node.inputs) > 2 and node.inputs[2] is not None and training is None:
            return False
        if training is not None and bool(training):
            ratio = const_array(node.inputs[1]) if len(node.inputs) > 1 else None
            return ratio is not None and float(ratio) == 0.0
        return True
    if op in ("Cast", "CastLike"):
        target = get_attr(node, "to") if op == "Cast" else node.inputs[1].dtype
        return x.dtype is not None and target is not None and int(target) == int(x.dtype)
    if op in _SAME_SHAPE_OPS:
        shape = static_dims(x.shape)
        return shape is not None and shape == static_dims(y.shape)
    if op == "Transpose":
        perm = get_attr(node, "perm")
        rank = len(x.shape) if x.shape is not None else None
        if perm is None:
            return rank is not None and rank <= 1
        return list(perm) == list(range(len(perm)))
    return False


def _make_identity(node: ir.Node) -> None:
    node.op_type = "Identity"
    node.attributes.clear()
    node.resize_inputs(1)
    node.resize_outputs(1)


def _remove(node: ir.Node) -> None:
    graph = node.graph
    x, y = node.inputs[0], node.outputs[0]
    if y.is_graph_output():
        producer = x.producer()
        if (producer is None or producer.graph is not graph or x.is_graph_output()):
            if node.op_type != "Identity":
                _make_identity(node)
            return
    bypass(y, x)
    graph.remove(node, safe=True)


def remove_identity(model: ir.Model) -> ir.Model:
    for node in all_nodes(model.graph):
        if _is_noop(node):
            _remove(node)
    return model
