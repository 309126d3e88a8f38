"""Small helpers for editing onnx_ir graphs: constants, new nodes, attribute access."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import onnx_ir as ir


def constant_node(array: np.ndarray | Sequence, dtype: np.dtype | type | None = None,
                  name: str | None = None) -> ir.Node:
    """A `Constant` node whose output carries its value (const_value, dtype and shape)."""
    arr = np.asarray(array, dtype=dtype)
    tensor = ir.tensor(arr, name=name)
    out = ir.Value(name=name, shape=ir.Shape(arr.shape), type=ir.TensorType(tensor.dtype),
                   const_value=tensor)
    return ir.Node("", "Constant", [], [ir.AttrTensor("value", tensor)], outputs=[out])


def insert_constant(before: ir.Node, array: np.ndarray | Sequence,
                    dtype: np.dtype | type | None = None, name: str | None = None) -> ir.Value:
    """Insert a `Constant` node just before `before` (in its own graph) and return its value."""
    node = constant_node(array, dtype, name)
    before.prepend(node)
    return node.outputs[0]


def insert_node(before: ir.Node, op_type: str, inputs: Sequence[ir.Value | None],
                attributes: dict | None = None, num_outputs: int = 1,
                name: str | None = None) -> ir.Node:
    """Insert a default-domain node just before `before` and return it."""
    node = ir.node(op_type, list(inputs), attributes or {}, num_outputs=num_outputs, name=name)
    before.prepend(node)
    return node


def numbered(base: str) -> Iterator[str]:
    """`base`, `base_2`, `base_3`, ...: the candidates for a new name, first to last."""
    yield base
    k = 2
    while True:
        yield f"{base}_{k}"
        k += 1


def new_initializer(graph: ir.Graph, array: np.ndarray, name: str) -> ir.Value:
    """Register `array` as a new initializer of `graph` under a name not used there yet."""
    name = next(n for n in numbered(name) if n not in graph.initializers)
    tensor = ir.tensor(np.asarray(array, order="C"), name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype),
                     const_value=tensor)
    graph.register_initializer(value)
    return value


def set_input(node: ir.Node, index: int, value: ir.Value | None) -> None:
    """Set input `index` of `node`, growing its input list when needed."""
    if index >= len(node.inputs):
        node.resize_inputs(index + 1)
    node.replace_input_with(index, value)


def bypass(old: ir.Value, new: ir.Value) -> None:
    """Make every user of `old` read `new`; a graph output keeps its name (now on `new`)."""
    if old.is_graph_output():
        name = old.name
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        old.name = None
        new.name = name
    else:
        old.replace_all_uses_with(new)


def trim_inputs(node: ir.Node) -> None:
    """Drop trailing missing (None) inputs."""
    n = len(node.inputs)
    while n and node.inputs[n - 1] is None:
        n -= 1
    node.resize_inputs(n)


def pop_attr(node: ir.Node, name: str, default=None):
    """Remove attribute `name` from `node` and return its value (or `default`)."""
    attr = node.attributes.pop(name, None)
    if attr is None:
        return default
    return attr.value


def get_attr(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant data as numpy (initializer or Constant output), else None."""
    if value is None or value.const_value is None:
        return None
    return value.const_value.numpy()


def static_dims(shape: ir.Shape | None) -> tuple[int, ...] | None:
    """The shape as a tuple of ints, or None when a dimension is unknown."""
    if shape is None or not all(isinstance(d, int) for d in shape.dims):
        return None
    return tuple(int(d) for d in shape.dims)


def graph_values(graph: ir.Graph) -> Iterable[ir.Value]:
    """Every value of `graph` (not its subgraphs): inputs, initializers, node outputs."""
    seen: set[int] = set()
    for v in (*graph.inputs, *graph.initializers.values(),
              *(o for n in graph for o in n.outputs)):
        if id(v) not in seen:
            seen.add(id(v))
            yield v


def value_names(graph: ir.Graph) -> set[str]:
    """The names of `graph`'s values (not its subgraphs')."""
    return {v.name for v in graph_values(graph) if v.name}


def fresh_name(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, ...: the first not in `taken` (a graph's `value_names`),
    which it is then added to."""
    out = next(n for n in numbered(name) if n not in taken)
    taken.add(out)
    return out


def all_graphs(graph: ir.Graph) -> Iterable[ir.Graph]:
    """`graph` and, recursively, every subgraph held in a node attribute."""
    yield graph
    for node in graph:
        for attr in node.attributes.values():
            if attr.is_ref():
                continue
            if attr.type == ir.AttributeType.GRAPH:
                yield from all_graphs(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.as_graphs():
                    yield from all_graphs(g)


def all_nodes(graph: ir.Graph) -> list[ir.Node]:
    """Every node of `graph` and its subgraphs (a snapshot list: safe to mutate while looping)."""
    return [n for g in all_graphs(graph) for n in g]
