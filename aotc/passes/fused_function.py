"""Replace a region of nodes by one `ai.aotc` node whose body is a model-local ONNX function.

The region's nodes move, in graph order, into an `ir.Function` of domain `ai.aotc` registered in
`model.functions`; the graph gets one call node in their place. The function's inputs are the
values the region reads from outside (graph inputs, initializers, other nodes' outputs), its
single output is the region's one value used outside. Body values keep their names, dtypes and
static shapes, so the lowering reads them as it reads graph values, and the rewritten model
still passes `onnx.checker` and runs in onnxruntime (which expands model-local functions).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx_ir as ir

from aotc.frontend.irutil import bypass, numbered

DOMAIN = "ai.aotc"
DOMAIN_VERSION = 1
_MAX_NAMED_OPS = 5


def external_inputs(nodes: Sequence[ir.Node]) -> list[ir.Value]:
    """Values the region reads but does not produce, in first-use order, each once."""
    produced = {id(o) for n in nodes for o in n.outputs}
    seen: dict[int, ir.Value] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None and id(v) not in produced and id(v) not in seen:
                seen[id(v)] = v
    return list(seen.values())


def _copy_value(v: ir.Value, name: str | None = None) -> ir.Value:
    """A new value with `v`'s type and (its own copy of) `v`'s shape."""
    shape = v.shape.copy() if v.shape is not None else None
    return ir.Value(name=name or v.name, shape=shape, type=v.type)


def _body_signature(nodes: Sequence[ir.Node], inputs: Sequence[ir.Value]) -> tuple:
    """What makes two bodies the same function: ops, attributes, wiring and input types (not
    names). Types count because the body keeps static shapes, which the compiler reads."""
    index = {id(v): ("in", i) for i, v in enumerate(inputs)}
    sig: list[tuple] = [(v.dtype, tuple(v.shape or ())) for v in inputs]
    for k, n in enumerate(nodes):
        for j, o in enumerate(n.outputs):
            index[id(o)] = ("node", k, j)
        attrs = tuple(sorted((a.name, repr(a.value)) for a in n.attributes.values()))
        wiring = tuple(None if v is None else index[id(v)] for v in n.inputs)
        sig.append((n.op_type, attrs, wiring, len(n.outputs)))
    return tuple(sig)


def _function_name(model: ir.Model, nodes: Sequence[ir.Node], signature: tuple) -> str:
    """`Fused_Conv_Add_Relu` (numbered when another body already has that name)."""
    ops = [n.op_type for n in nodes]
    base = "Fused_" + "_".join(ops[:_MAX_NAMED_OPS])
    if len(ops) > _MAX_NAMED_OPS:
        base += f"_and{len(ops) - _MAX_NAMED_OPS}"

    def free_or_same(name: str) -> bool:
        function = model.functions.get((DOMAIN, name, ""))
        return function is None or function.meta.get("aotc_signature") == signature

    return next(filter(free_or_same, numbered(base)))


def _build_function(model: ir.Model, name: str, nodes: Sequence[ir.Node],
                    inputs: Sequence[ir.Value], output: ir.Value, signature: tuple) -> None:
    mapping: dict[int, ir.Value] = {}
    fn_inputs = []
    for i, v in enumerate(inputs):
        fv = _copy_value(v, v.name or f"in{i}")
        mapping[id(v)] = fv
        fn_inputs.append(fv)
    body = []
    for n in nodes:
        outs = [_copy_value(o) for o in n.outputs]
        for o, fo in zip(n.outputs, outs, strict=True):
            mapping[id(o)] = fo
        body.append(ir.Node(
            n.domain, n.op_type, [None if v is None else mapping[id(v)] for v in n.inputs],
            list(n.attributes.values()), outputs=outs, name=n.name, version=n.version,
        ))
    graph = ir.Graph(fn_inputs, [mapping[id(output)]], nodes=body, name=name,
                     opset_imports={"": model.opset_imports[""]})
    function = ir.Function(DOMAIN, name, graph=graph, attributes=[])
    function.meta["aotc_signature"] = signature
    model.functions[function.identifier()] = function


def fuse_region(model: ir.Model, nodes: Sequence[ir.Node], label: str) -> ir.Node:
    """Replace `nodes` (one graph, every value but the last node's output used only inside)
    by a call to a new (or identical existing) `ai.aotc` function; returns the call node."""
    graph = model.graph
    order = {id(n): i for i, n in enumerate(graph)}
    nodes = sorted(nodes, key=lambda n: order[id(n)])
    sink = nodes[-1]
    output = sink.outputs[0]
    inputs = external_inputs(nodes)
    signature = _body_signature(nodes, inputs)
    name = _function_name(model, nodes, signature)
    if (DOMAIN, name, "") not in model.functions:
        _build_function(model, name, nodes, inputs, output, signature)
    model.opset_imports.setdefault(DOMAIN, DOMAIN_VERSION)
    value_name = output.name
    result = _copy_value(output)
    result.name = None  # named after the old output once that one gives its name up
    call = ir.Node(DOMAIN, name, list(inputs), outputs=[result],
                   name=f"{label}_{sink.name or value_name}")
    sink.prepend(call)
    bypass(output, result)
    output.name = None
    result.name = value_name
    graph.remove(nodes, safe=True)
    return call
