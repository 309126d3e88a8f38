"""Which islands pay for themselves on this machine (`aotc optimize --emit ort --measure-islands`).

Each island node of the rewritten model is cut out as a model of its own (its activations as
inputs, the weights it shares with onnxruntime's nodes as initializers, its function beside it)
and run by onnxruntime twice over: with the library registered, which runs aotc's kernels, and
without, which runs the node's model-local function, i.e. the island's nodes on onnxruntime's
own kernels after its own graph optimizations. The two sessions alternate run by run on the same
inputs, at the thread count the library is built for, each run after the other session's
workers have stopped spinning (aotc.quiesce: otherwise a spinning pool holds the core the next
run needs, which skews a two-thread comparison), and the medians decide: an island not clearly
faster with the library than without (KEEP_BELOW) is left to onnxruntime. So the library does
not make a model slower than onnxruntime alone island by island, as far as the measurement
can tell, at the price of a compile whose output depends on the machine's timings (the flag
is off by default for that reason).

The cut-out models also check the library against onnxruntime on random inputs: an island whose
outputs disagree is an error, not a speed question.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from aotc.errors import AotcError
from aotc.ortlib.partition import Island
from aotc.ortlib.rewrite import ISLAND_DOMAIN, island_op, value_info
from aotc.quiesce import quiesce

# An island stays compiled when its median with the library is at most this share of
# onnxruntime's: two-thread medians of the same two sessions moved by 3-8 % between runs on a
# 2-core guest (RegNetY-400MF: 0.97 of onnxruntime's time in one measurement, 1.07-1.15 in
# the benchmark's), and a gain within that spread is not worth the risk of a loss.
KEEP_BELOW = 0.97


class IslandTiming(NamedTuple):
    op: str  # the island's custom op
    library_s: float  # median seconds of a run with aotc's kernels
    onnxruntime_s: float  # median seconds of a run of its function on onnxruntime's kernels

    @property
    def pays(self) -> bool:
        return self.library_s <= KEEP_BELOW * self.onnxruntime_s


def island_alone(rewritten: onnx.ModelProto, island: Island, name: str) -> onnx.ModelProto:
    """The island's node of `rewritten` as a model of its own."""
    op = island_op(name, island)
    node = next(n for n in rewritten.graph.node
                if n.op_type == op and n.domain == ISLAND_DOMAIN)
    inits = {t.name: t for t in rewritten.graph.initializer}
    types = {v.name: v for v in [*rewritten.graph.input, *rewritten.graph.value_info,
                                 *rewritten.graph.output]}
    activations = {v.name: v for v in island.inputs}
    inputs, weights = [], []
    for v in node.input:
        if v in inits:
            weights.append(inits[v])
        else:
            inputs.append(types[v] if v in types else value_info(activations[v]))
    graph = onnx.helper.make_graph(
        [node], op, inputs, [value_info(v) for v in island.outputs], weights)
    model = onnx.helper.make_model(graph, opset_imports=list(rewritten.opset_import),
                                   ir_version=rewritten.ir_version)
    model.functions.extend(rewritten.functions)
    return model


def _session(path: Path, threads: int, library: Path | None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads > 0:
        so.intra_op_num_threads = threads
    if library is not None:
        so.register_custom_ops_library(str(library))
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _inputs(session, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random normal floats; zeros for every other element type (a valid index, count or
    flag wherever an integer input is one)."""
    feeds = {}
    for i in session.get_inputs():
        dtype = np.dtype(_NUMPY.get(i.type, np.float32))
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.standard_normal(shape).astype(dtype)
                         if np.issubdtype(dtype, np.floating) else np.zeros(shape, dtype))
    return feeds


_NUMPY = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32,
          "tensor(int16)": np.int16, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
          "tensor(uint16)": np.uint16, "tensor(uint32)": np.uint32,
          "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_}


def time_islands(folder: Path, library: Path, rewritten: onnx.ModelProto,
                 islands: Sequence[Island], name: str, threads: int,
                 runs: int = 15) -> list[IslandTiming]:
    """Each island's median run time with `library` and without it. `folder` holds the
    library's fallback data file (the functions' weights), where the cut-out models are
    written so that they find it."""
    rng = np.random.default_rng(0)
    timings = []
    for isl in islands:
        op = island_op(name, isl)
        path = folder / f"measure_{op}.onnx"
        onnx.save(island_alone(rewritten, isl, name), str(path))
        with_lib, without = _session(path, threads, library), _session(path, threads, None)
        feeds = _inputs(with_lib, rng)
        ours, theirs = with_lib.run(None, feeds), without.run(None, feeds)
        for a, b, out in zip(ours, theirs, with_lib.get_outputs(), strict=True):
            if not _close(a, b):
                raise AotcError(f"island {op}: output '{out.name}' differs from onnxruntime's "
                                "on random inputs", hint="please report this model")
        seconds: tuple[list[float], list[float]] = ([], [])
        for r in range(runs + 2):  # two warm-up runs each
            order = (0, 1) if r % 2 else (1, 0)
            for k in order:
                sess = (with_lib, without)[k]
                quiesce()  # the other session's workers spin after its run
                t = time.perf_counter()
                sess.run(None, feeds)
                seconds[k].append(time.perf_counter() - t)
        timings.append(IslandTiming(op, statistics.median(seconds[0][2:]),
                                    statistics.median(seconds[1][2:])))
        path.unlink()
    return timings


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if not np.issubdtype(a.dtype, np.floating):
        return bool(np.array_equal(a, b))
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale, equal_nan=True))
