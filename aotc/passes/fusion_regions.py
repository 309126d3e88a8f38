"""Which nodes the fusion passes may put together, and how a region grows.

A region is a set of nodes of the main graph whose values are all used only inside it, except
one: the output of its last node (the sink). Such a region can become one `ai.aotc` node (see
`fused_function.py`) and, in the compiler, one kernel.

Element-wise operators are the ones the `lowering.ops.elementwise` family defines (unary,
binary with broadcasting, comparisons, Where, Cast, Clip, activations, variadic Sum/Max/...):
the table is read from the operator registry, so a new element-wise operator is fusable as soon
as it is defined there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx_ir as ir

from lowering.ops import OPS

ELEMENTWISE_FAMILY = "lowering.ops.elementwise"
ELEMENTWISE_OPS: frozenset[str] = frozenset(
    name for name, fn in OPS.items() if fn.__module__.startswith(ELEMENTWISE_FAMILY + ".")
)
# A region never grows past this many nodes (keeps one kernel's expression a sane size).
MAX_REGION_NODES = 32

Accept = Callable[[ir.Node], bool]


def has_static_type(v: ir.Value) -> bool:
    return (v.dtype is not None and v.shape is not None
            and all(isinstance(d, int) for d in v.shape))


def is_elementwise(node: ir.Node, graph: ir.Graph) -> bool:
    """A default-domain element-wise node of `graph` with one statically typed output."""
    return (node.domain == "" and node.op_type in ELEMENTWISE_OPS and node.graph is graph
            and len(node.outputs) == 1 and has_static_type(node.outputs[0]))


def _used_outside(v: ir.Value, members: set[int]) -> bool:
    """A graph output, an unused value, or one read by a node outside the region."""
    uses = v.uses()
    return v.is_graph_output() or not uses or any(id(u.node) not in members for u in uses)


def open_values(region: Sequence[ir.Node]) -> list[ir.Value]:
    members = {id(n) for n in region}
    return [o for n in region for o in n.outputs if _used_outside(o, members)]


def grow_forward(region: Sequence[ir.Node], accept: Accept,
                 order: dict[int, int]) -> list[ir.Node] | None:
    """Add the earliest consumer of the region's open values while `accept` takes it; return
    the largest region met on the way with one open value (None if there was none).

    An open value that is a graph output or read by a node `accept` refuses can only be the
    region's final output, so growth stops when such a value is not the only open one.
    """
    region = list(region)
    members = {id(n) for n in region}
    best = None
    while True:
        opened = open_values(region)
        if len(opened) == 1:
            best = list(region)
        if len(region) >= MAX_REGION_NODES or any(v.is_graph_output() for v in opened):
            break
        consumers = [u.node for v in opened for u in v.uses() if id(u.node) not in members]
        if not consumers or any(id(n) not in order for n in consumers):
            break  # (a node of a subgraph reading the value from the outer scope never joins)
        nxt = min(consumers, key=lambda n: order[id(n)])
        if not accept(nxt):
            break
        region.append(nxt)
        members.add(id(nxt))
    return best


def absorb_producers(region: Sequence[ir.Node], accept: Accept) -> list[ir.Node]:
    """Add producers of the region's inputs that `accept` takes and whose output only the
    region reads (the branches of an element-wise tree)."""
    region = list(region)
    members = {id(n) for n in region}
    changed = True
    while changed:
        changed = False
        for n in list(region):
            for v in n.inputs:
                p = v.producer() if v is not None else None
                if (p is None or id(p) in members or len(region) >= MAX_REGION_NODES
                        or not accept(p) or any(_used_outside(o, members) for o in p.outputs)):
                    continue
                region.append(p)
                members.add(id(p))
                changed = True
    return region


def graph_order(graph: ir.Graph) -> dict[int, int]:
    return {id(n): i for i, n in enumerate(graph)}
