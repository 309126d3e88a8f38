"""Measured islands refined until each part pays (`aotc optimize --emit ort --measure-islands`).

An island slower with aotc's kernels than on onnxruntime's (measure.py) is seldom slow all
through: one convolution whose kernel lost, say, among twenty that won. So a slow island is
halved, in topological order (a prefix and a suffix of a convex set of nodes, ordered so, are
both convex: a path between two nodes of the prefix only passes nodes that come before the
later one), the partition is made again with each half its own group (partition.find_islands'
`group`), and the halves are compiled and measured in turn. A slow island of one node, or one
halved MAX_SPLITS times already, is left to onnxruntime, the reason carrying both medians. An
island that comes back from a partition unchanged keeps its number, its program and its
measurement, so each round compiles and times only the islands it made.

Parts that pay alone can lose together: every island boundary is a custom-op call and a copy
into and out of its arena, which no part's measurement sees. So the model is timed last with
the islands that stay, and when the library does not make it clearly faster either, every node
is left to onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx
import onnx_ir as ir

from aotc.ortlib.measure import WHOLE_MODEL, IslandTiming
from aotc.ortlib.partition import Island, LeftOut, find_islands, why_not
from aotc.ortlib.rewrite import island_model
from aotc.package.program import Program

# A slow island is halved at most this many times (into parts of an eighth): each round costs
# a compile and a measurement of its parts, and a part smaller than that is mostly the one
# node that lost, which is then as well left to onnxruntime.
MAX_SPLITS = 3
# Rounds of measurement at most: halving ends after MAX_SPLITS rounds, and a partition made
# again returns the islands that paid unchanged (a round to spare for one it does not)
MAX_ROUNDS = MAX_SPLITS + 2

# `measure(islands, programs, todo)`: the timings of islands[k] for k in todo (every island
# compiled into the library, the programs alongside)
Measure = Callable[[list[Island], list[Program], list[int]], list[IslandTiming]]
# `measure_model(islands, programs)`: the whole model timed with the library of the islands and
# without it (measure.time_model)
MeasureModel = Callable[[list[Island], list[Program]], IslandTiming]


def _members(island: Island) -> tuple[str, ...]:
    return tuple(n.name or "" for n in island.nodes)


def paying_islands(
    serialized: onnx.ModelProto, islands: list[Island], left: list[LeftOut],
    programs: list[Program], measure: Measure, measure_model: MeasureModel,
    compile_island: Callable[[ir.Model, Island], Program],
) -> tuple[list[Island], list[LeftOut], list[Program], list[IslandTiming]]:
    """The islands of the partitioned model `serialized` refined until each measured as paying
    (IslandTiming.pays), starting from its `islands` and their `programs`, then the whole model
    measured with them: when it does not pay either, every node is left to onnxruntime (parts
    that paid alone can lose together: each island boundary costs a copy and a custom-op call
    the parts' measurements do not see). Returns the islands, the nodes left to onnxruntime,
    the islands' programs, and every measurement made, in order (a slow island that was halved
    has `split` set; the whole model's is last, op WHOLE_MODEL)."""
    graph = ir.serde.deserialize_model(serialized)
    group: dict[str, tuple[int, ...]] = {}  # a node's halves taken, by node name
    refused: dict[str, IslandTiming] = {}  # a node left to onnxruntime: its island's timing
    measured: dict[tuple[str, ...], IslandTiming] = {}
    compiled = {_members(isl): (isl.index, p) for isl, p in zip(islands, programs, strict=True)}
    fresh = max((isl.index for isl in islands), default=-1) + 1
    timings: list[IslandTiming] = []

    def refuse(node: ir.Node) -> str | None:
        t = refused.get(node.name or "")
        if t is None:
            return why_not(node, graph.functions)
        if t.op == WHOLE_MODEL:
            return (f"the model ran not clearly faster on this machine with aotc's library: "
                    f"{t.library_s * 1e3:.3g} ms against onnxruntime's "
                    f"{t.onnxruntime_s * 1e3:.3g} ms")
        return (f"its island ({t.op}) ran not clearly faster on this machine with aotc's "
                f"kernels: {t.library_s * 1e3:.3g} ms against onnxruntime's "
                f"{t.onnxruntime_s * 1e3:.3g} ms")

    def partition() -> None:
        nonlocal islands, left, programs, fresh
        islands, left = find_islands(graph, refuse,
                                     group=lambda n: group.get(n.name or "", ()))
        programs = []
        for isl in islands:
            index, program = compiled.get(_members(isl), (fresh, None))
            fresh += index == fresh
            isl.index = index
            if program is None:
                program = compile_island(island_model(serialized, isl), isl)
                compiled[_members(isl)] = (index, program)
            programs.append(program)

    for _ in range(MAX_ROUNDS):
        todo = [k for k, isl in enumerate(islands) if _members(isl) not in measured]
        if not todo:
            break
        changed = False
        for k, t in zip(todo, measure(islands, programs, todo), strict=True):
            isl = islands[k]
            measured[_members(isl)] = t
            own = [n for n in isl.nodes if n not in isl.copied]
            key = group.get(own[0].name or "", ())
            if t.pays:
                timings.append(t)
            elif len(own) >= 2 and len(key) < MAX_SPLITS:
                for j, n in enumerate(own):
                    group[n.name or ""] = (*key, 0 if 2 * j < len(own) else 1)
                timings.append(t._replace(split=True))
                changed = True
            else:
                refused.update((n.name or "", t) for n in own)
                timings.append(t)
                changed = True
        if not changed:
            break
        partition()
    if islands:
        whole = measure_model(islands, programs)
        timings.append(whole)
        if not whole.pays:
            refused.update((n.name or "", whole) for isl in islands for n in isl.nodes
                           if n not in isl.copied)
            partition()
    return islands, left, programs, timings


def kept_label(timing: IslandTiming, kept: Sequence[str]) -> str:
    """What became of a measured island (`kept`: the custom ops of the library)."""
    if timing.op == WHOLE_MODEL:
        return "yes" if timing.pays else "no: every node left to onnxruntime"
    if timing.split:
        return "no: split"
    if timing.pays:
        return "yes" if timing.op in kept else "no: re-partitioned"
    return "no: left to onnxruntime"
