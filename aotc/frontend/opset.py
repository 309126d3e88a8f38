"""Bring the default ONNX domain to aotc's canonical opset, one node at a time.

The canonical opset is the newest the required onnx (>= 1.23) defines, so models are only ever
converted up: an older model's nodes take their newest form, and a new model (opset 22-28:
Attention, RMSNormalization, RotaryEmbedding, signed BitShift, the ceil-mode pooling sizes of
opset 22) is read as written. Converting down instead lost what opset 22+ added.

onnx's version converter is all-or-nothing and onnxscript's only goes 18→, so aotc normalises
per operator: a node whose schema is the same at its opset and at the canonical opset is
relabelled; an operator whose form changed (attributes that became inputs, changed semantics)
goes through its rule in `opset_rules`; any other change is accepted only when the node's
attributes, defaults and input/output counts are valid for the canonical schema unchanged.
Afterwards every default-domain node is checked against the canonical schema.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend import irutil
from aotc.frontend.opset_rules import RULES

CANONICAL_OPSET: int = 28

# Attributes of opset < 7 that carry no meaning for inference.
_OBSOLETE_ATTRS = ("consumed_inputs", "is_test")


def _schema(op: str, version: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op, version, "")
    except onnx.defs.SchemaError:
        return None


def _incompatibility(node: ir.Node, old: onnx.defs.OpSchema, new: onnx.defs.OpSchema) -> str | None:
    """Why `node` (valid for `old`) is not valid unchanged for `new`; None when it is."""
    for name, attr in node.attributes.items():
        spec = new.attributes.get(name)
        if spec is None:
            return f"attribute '{name}' does not exist at opset {CANONICAL_OPSET}"
        if not attr.is_ref() and int(attr.type) != int(spec.type):
            return f"attribute '{name}' changed type"
    for name, spec in old.attributes.items():
        if name in node.attributes or name not in new.attributes:
            continue
        if spec.default_value.SerializeToString() != \
                new.attributes[name].default_value.SerializeToString():
            return f"the default of attribute '{name}' changed"
    for name, spec in new.attributes.items():
        if spec.required and name not in node.attributes:
            return f"attribute '{name}' is required at opset {CANONICAL_OPSET}"
    n_in = len(node.inputs)
    if not new.min_input <= n_in <= new.max_input:
        return f"{n_in} inputs, opset {CANONICAL_OPSET} takes {new.min_input}..{new.max_input}"
    n_out = len(node.outputs)
    if not new.min_output <= n_out <= new.max_output:
        return f"{n_out} outputs, opset {CANONICAL_OPSET} has {new.min_output}..{new.max_output}"
    return None


def _normalise_node(node: ir.Node, version: int) -> str | None:
    """Rewrite one default-domain node from `version` to the canonical opset; a reason on failure."""
    old = _schema(node.op_type, version)
    if old is None:
        return f"unknown operator {node.op_type} at opset {version}"
    new = _schema(node.op_type, CANONICAL_OPSET)
    if version < CANONICAL_OPSET:
        for name in _OBSOLETE_ATTRS:
            if name in old.attributes and (new is None or name not in new.attributes):
                node.attributes.pop(name, None)
        rule = RULES.get(node.op_type)
        if rule is not None and rule(node, old.since_version):
            return None  # rewritten into canonical form (checked against the schema later)
    if new is None or new.deprecated:
        return f"{node.op_type} does not exist at opset {CANONICAL_OPSET}"
    if new.since_version == old.since_version:
        return None
    return _incompatibility(node, old, new)


def _check_node(node: ir.Node, ctx: onnx.checker.C.CheckerContext) -> str | None:
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
           for a in node.attributes.values()):
        return None  # its subgraphs' nodes are checked one by one; outer names need context
    try:
        onnx.checker.check_node(ir.serde.serialize_node(node), ctx)
    except Exception as e:  # onnx raises ValidationError (C++), keep the first line
        return str(e).strip().splitlines()[0]
    return None


def normalise_opset(model: ir.Model) -> None:
    """Rewrite every default-domain node of `model` (and subgraphs) to CANONICAL_OPSET."""
    default = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if default is None:
        model.opset_imports[""] = CANONICAL_OPSET
        return
    problems: list[tuple[ir.Node, str]] = []
    for node in irutil.all_nodes(model.graph):
        if node.domain != "":
            continue
        version = node.version if node.version is not None else default
        if version != CANONICAL_OPSET:
            reason = _normalise_node(node, version)
            if reason is not None:
                problems.append((node, f"{node.op_type}-{version}: {reason}"))
        node.version = None
    if problems:
        _raise(problems, "cannot convert to the canonical opset")
    model.opset_imports.pop("ai.onnx", None)
    model.opset_imports[""] = CANONICAL_OPSET
    model.ir_version = max(model.ir_version or 0, 10)

    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {"": CANONICAL_OPSET}
    for node in irutil.all_nodes(model.graph):
        if node.domain == "" and (reason := _check_node(node, ctx)) is not None:
            problems.append((node, reason))
    if problems:
        _raise(problems, f"not valid at opset {CANONICAL_OPSET} after conversion")


def _raise(problems: list[tuple[ir.Node, str]], what: str) -> None:
    first = problems[0][0]
    lines = "\n".join(f"  - node '{n.name}': {reason}" for n, reason in problems)
    raise AotcError(
        f"{len(problems)} node(s) {what}:\n{lines}",
        node=first.name, op=first.op_type,
        hint=f"re-export the model at opset {CANONICAL_OPSET} (or 13..{CANONICAL_OPSET})",
    )
