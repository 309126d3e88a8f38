"""`--emit ort` with a dimension left to run time (`--input-shape ids=1,1..512`).

The model onnxruntime runs is the frontend's model with the range's axes left symbolic (no graph
pass, no shape arithmetic folded over the dimension), so its own nodes, and the islands'
functions when the library is not loaded, run any length. What each of its values is at a
fixed length comes from the frontend at the bound and at one less (the comparison of
aotc/frontend/dynamic.py, value by value and node by node through their names): which axes
follow the dimension, which nodes cannot take it (left to onnxruntime with the reason) and which
nodes become constants at a fixed length (shape arithmetic: `Shape`, the `Range` of positions,
...). Those belong to no island: each island that reads one computes its own copy, which its
compile folds again (partition.py's `copied`). An island's inputs and outputs have the dimension
on their first axis longer than 1 at most, as a bundle's (a node whose island would cross it
elsewhere is left out, until none does).

Each island is then a model of its own with symbolic inputs: bound at both lengths, compared,
refused, passed and compiled for the bound as the C bundle's path does
(driver.rewrite_at_lengths); an island whose values do not follow the dimension is compiled as
a static one. A compile that still refuses a node of the island leaves that node out, and the
partition is made again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend import dynamic as dyn
from aotc.frontend.bind import bind_input_shapes
from aotc.frontend.irutil import static_dims
from aotc.frontend.load import load_model, make_static, read_model
from aotc.ortlib.partition import Island, LeftOut, find_islands, why_not
from aotc.ortlib.rewrite import island_model
from aotc.package.program import Program, RunTimeDim

# (the island's model at the bound after passes, the island, its run-time axes or None) -> its
# program
CompileIsland = Callable[[ir.Model, Island, dyn.DynamicShapes | None], Program]
# (the island's model at length n, given n; the dimension) -> the model at the bound after
# passes and its run-time axes (driver.rewrite_at_lengths)
RewriteIsland = Callable[[Callable[[int], ir.Model], RunTimeDim],
                         tuple[ir.Model, dyn.DynamicShapes]]

_CHANGES = ("the graph differs between lengths here (shape arithmetic over the run-time "
            "dimension changes it)")


@dataclass
class RangedModel:
    """The model onnxruntime runs and what its values are at the bound."""

    graph: ir.Model  # the range's axes symbolic
    dim: RunTimeDim
    shapes: dict[str, tuple[int, ...]]  # value name -> static shape at the bound
    axes: dict[str, tuple[int, ...]]  # value name -> the axes that follow the dimension
    folded: set[str]  # node names: constants at a fixed length (shape arithmetic), or gone
    refused: dict[str, str]  # node name -> why it cannot be part of an island

    def copied(self, node: ir.Node) -> bool:
        return (node.name or "") in self.folded

    def crossing(self, value: ir.Value) -> str | None:
        """Why `value` cannot be an island's input or output (None: it can)."""
        axes = self.axes.get(value.name or "", ())
        shape = self.shapes.get(value.name or "")
        if shape is None:
            return f"'{value.name}' has no static shape at a fixed length"
        if axes and (len(axes) > 1 or any(d != 1 for d in shape[:axes[0]])):
            return (f"'{value.name}' {list(shape)} has the run-time dimension on axis "
                    f"{list(axes)}, after axes longer than 1: an island's inputs and outputs "
                    "have it only as their first axis longer than 1")
        return None


def _bind(graph: ir.Model, shapes: dict[str, tuple[int, ...]],
          ranges: dict[tuple[str, int], tuple[int, int]]) -> None:
    """Binds the inputs' dimensions as `bind_input_shapes` does, but the ranged axes, which keep
    the model's symbol."""
    inputs = {v.name: v for v in graph.graph.inputs}
    kept: dict[tuple[str, int], ir.SymbolicDim] = {}
    for name, axis in ranges:
        v = inputs.get(name)
        if v is None or v.shape is None or axis >= len(v.shape):
            continue  # bind_input_shapes says what is wrong
        dim = v.shape.dims[axis]
        if isinstance(dim, int):
            raise AotcError(f"--input-shape {name}: axis {axis} is {dim} in the model, so it "
                            "cannot take a range",
                            hint="give a range only to a symbolic dimension")
        kept[(name, axis)] = dim
        # (unnamed, so that binding it replaces the symbol on this input alone)
        v.shape = ir.Shape([ir.SymbolicDim(None) if k == axis else d
                            for k, d in enumerate(v.shape.dims)])
    bind_input_shapes(graph, shapes)
    for (name, axis), dim in kept.items():
        v = inputs[name]
        v.shape = ir.Shape([dim if k == axis else d for k, d in enumerate(v.shape.dims)])


def _values(model: ir.Model) -> dict[str, ir.Value]:
    return {k: v for k, v in ir.convenience.create_value_mapping(model.graph).items() if k}


def load_ranged(path: Path, shapes: dict[str, tuple[int, ...]],
                ranges: dict[tuple[str, int], tuple[int, int]]) -> RangedModel:
    """The frontend's model with the ranged axes symbolic, and what its values and nodes are at
    the bound (compared with one less)."""
    dim = dyn.run_time_dim(ranges)
    graph = read_model(path)
    try:
        _bind(graph, shapes, ranges)
        make_static(graph, require_static=False)
    except AotcError as e:
        raise AotcError(e.message, file=str(path), node=e.node, op=e.op, hint=e.hint) \
            if e.file is None else e from None
    at_hi, at_lo = (load_model(path, dyn.at_length(shapes, ranges, n), require_static=False)
                    for n in (dim.hi, dim.hi - 1))
    hi, lo = _values(at_hi), _values(at_lo)
    static = {k: s for k, v in hi.items() if (s := static_dims(v.shape)) is not None}
    axes: dict[str, tuple[int, ...]] = {}
    bad: dict[str, str] = {}  # value name -> why its dimensions cannot follow the dimension
    for k, va in hi.items():
        vb = lo.get(k)
        if vb is None or k not in static or static_dims(vb.shape) is None:
            continue
        try:
            found = dyn.value_axes(va, vb, dim)
        except AotcError as e:
            bad[k] = e.message
            continue
        if found:
            axes[k] = found
    taking: dict[str, str] = {}  # node name -> why it cannot take the dimension
    for node, why in (*dyn.constant_refusals(at_hi, at_lo),
                      *dyn.node_refusals(at_hi, axes, dim)):
        taking.setdefault(node.name or "", why)
    hi_nodes = {n.name: n for n in at_hi.graph}
    lo_nodes = {n.name: n for n in at_lo.graph}
    folded: set[str] = set()
    refused: dict[str, str] = {}
    for node in graph.graph:
        name = node.name or ""
        at_bound, shorter = hi_nodes.get(name), lo_nodes.get(name)
        if at_bound is None and shorter is None:
            made = [hi.get(v.name or "") for v in node.outputs]
            if all(v is None or v.const_value is not None for v in made):
                folded.add(name)  # a constant, or gone (an Expand to its own shape, ...)
            else:
                refused[name] = _CHANGES
        elif at_bound is None or shorter is None or at_bound.op_type != shorter.op_type:
            refused[name] = _CHANGES
        else:  # the node as the island's compile sees it
            why = why_not(at_bound, at_hi.functions) or next(
                (bad[v.name or ""] for v in (*at_bound.inputs, *at_bound.outputs)
                 if v is not None and (v.name or "") in bad), None) or taking.get(name)
            if why is not None:
                refused[name] = why
    return RangedModel(graph, dim, static, axes, folded, refused)


def partition(ranged: RangedModel, excluded: dict[str, str]
              ) -> tuple[list[Island], list[LeftOut]]:
    """The islands, no input or output of which has the dimension where a bundle cannot take
    it: a node whose island would have one is left out (into `excluded`) until none has."""

    def refuse(node: ir.Node) -> str | None:
        return ranged.refused.get(node.name or "") or excluded.get(node.name or "")

    while True:
        islands, left = find_islands(ranged.graph, refuse, ranged.copied)
        found: dict[str, str] = {}
        for isl in islands:
            for v in isl.outputs:
                why = ranged.crossing(v)
                producer = v.producer()
                if why is not None and producer is not None:
                    found.setdefault(producer.name or "", f"its output {why}")
            for v in isl.inputs:
                why = ranged.crossing(v)
                if why is not None:
                    for user in _readers(v, isl):
                        found.setdefault(user.name or "", f"its input {why}")
        if not found:
            return islands, left
        excluded.update(found)


def _readers(value: ir.Value, island: Island) -> list[ir.Node]:
    """The island's own nodes that read `value`, directly or through its copied nodes."""
    copied = set(island.copied)
    own = set(island.nodes) - copied
    found: list[ir.Node] = []
    seen: set[ir.Node] = set()
    todo = [value]
    while todo:
        for user, _ in todo.pop().uses():
            if user in own and user not in found:
                found.append(user)
            elif user in copied and user not in seen:
                seen.add(user)
                todo.extend(user.outputs)
    return found


def island_lengths(ranged: RangedModel, island: Island
                   ) -> tuple[dict[str, tuple[int, ...]], dict[tuple[str, int], tuple[int, int]]]:
    """The island's inputs at the bound and the ranges of their axes that follow the
    dimension."""
    shapes = {v.name or "": ranged.shapes[v.name or ""] for v in island.inputs}
    ranges = {(v.name or "", a): (ranged.dim.lo, ranged.dim.hi)
              for v in island.inputs for a in ranged.axes.get(v.name or "", ())}
    return shapes, ranges


def _at_length(proto: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
               ranges: dict[tuple[str, int], tuple[int, int]], n: int) -> ir.Model:
    """The island's model with its inputs at length n, its shapes inferred and shape arithmetic
    folded (the frontend's last step)."""
    model = ir.serde.deserialize_model(proto)
    bound = dyn.at_length(shapes, ranges, n)
    for v in model.graph.inputs:
        v.shape = ir.Shape(bound[v.name or ""])
    make_static(model)
    return model


def compile_islands(path: Path, ranged: RangedModel, compile_island: CompileIsland,
                    rewrite: RewriteIsland, static_passes: Callable[[ir.Model], ir.Model]
                    ) -> tuple[onnx.ModelProto, list[Island], list[LeftOut], list[Program]]:
    """Partitions `ranged` and compiles its islands (`rewrite`: driver.rewrite_at_lengths for an
    island whose inputs follow the dimension; `static_passes` for the others); returns the
    serialized model, the islands, the nodes left to onnxruntime and each island's program."""
    serialized = ir.serde.serialize_model(ranged.graph)
    excluded: dict[str, str] = {}
    built: dict[tuple[str, ...], Program] = {}
    while True:
        islands, left = partition(ranged, excluded)
        programs = []
        try:
            for isl in islands:
                key = tuple(n.name or "" for n in isl.nodes)
                if key not in built:
                    built[key] = _compile(serialized, ranged, isl, compile_island, rewrite,
                                          static_passes)
                programs.append(built[key])
        except AotcError as e:
            own = {n.name for n in isl.nodes if n not in isl.copied}
            if e.node is None or e.node not in own or e.node in excluded:
                raise AotcError(e.message, file=str(path), node=e.node, op=e.op,
                                hint=e.hint) if e.file is None else e from None
            excluded[e.node] = e.message  # left to onnxruntime; partition again
            continue
        return serialized, islands, left, programs


def _compile(serialized: onnx.ModelProto, ranged: RangedModel, isl: Island,
             compile_island: CompileIsland, rewrite: RewriteIsland,
             static_passes: Callable[[ir.Model], ir.Model]) -> Program:
    sub = ir.serde.serialize_model(island_model(serialized, isl))
    shapes, ranges = island_lengths(ranged, isl)
    if not ranges:
        return compile_island(static_passes(_at_length(sub, shapes, {}, 0)), isl, None)
    graph, dynamic = rewrite(lambda n: _at_length(sub, shapes, ranges, n), ranged.dim)
    return compile_island(graph, isl, dynamic)
