"""Which islands pay for themselves on this machine (`aotc optimize --emit ort --measure-islands`).

Each island node of the rewritten model is cut out as a model of its own (its activations as
inputs, the weights it shares with onnxruntime's nodes as initializers, its function beside it)
and run by onnxruntime twice over: with the library registered, which runs aotc's kernels, and
without, which runs the node's model-local function, i.e. the island's nodes on onnxruntime's
own kernels after its own graph optimizations. The two sessions alternate run by run on the same
inputs, at the thread count the library is built for, each run after the other session's
workers have stopped spinning (aotc.quiesce: otherwise a spinning pool holds the core the next
run needs, which skews a two-thread comparison), and the medians decide: an island not clearly
faster with the library than without (KEEP_BELOW) is halved and its parts measured in turn,
and what stays slow is left to onnxruntime (refine.py). So the library does
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

from aotc.compiler import DTYPE_NAMES
from aotc.errors import AotcError
from aotc.frontend.irutil import static_dims
from aotc.ortlib.partition import Island
from aotc.ortlib.rewrite import ISLAND_DOMAIN, island_op, value_info
from aotc.quiesce import quiesce
from aotc.verify import NP_DTYPES, compare

# An island stays compiled when its median with the library is at most this share of
# onnxruntime's: two-thread medians of the same two sessions moved by 3-8 % between runs on a
# 2-core guest (RegNetY-400MF: 0.97 of onnxruntime's time in one measurement, 1.07-1.15 in
# the benchmark's), and a gain within that spread is not worth the risk of a loss.
KEEP_BELOW = 0.97
# The library's outputs against onnxruntime's on the cut-out model (aotc.verify.compare: error
# at most this times max(1, max |onnxruntime's|), non-finites alike, integers exact)
OUTPUT_TOLERANCE = 1e-3


class IslandTiming(NamedTuple):
    op: str  # the island's custom op
    library_s: float  # median seconds of a run with aotc's kernels
    onnxruntime_s: float  # median seconds of a run of its function on onnxruntime's kernels
    split: bool = False  # slow, and halved to measure its parts (refine.py)

    @property
    def pays(self) -> bool:
        return self.library_s <= KEEP_BELOW * self.onnxruntime_s


def island_alone(rewritten: onnx.ModelProto, island: Island, name: str) -> onnx.ModelProto:
    """The island's node of `rewritten` as a model of its own."""
    op = island_op(name, island)
    node = next(n for n in rewritten.graph.node
                if n.op_type == op and n.domain == ISLAND_DOMAIN)
    inits = {t.name: t for t in rewritten.graph.initializer}
    # the node reads the island's activations, then the weights it shares (initializers)
    weights = [inits[v] for v in node.input if v in inits]
    graph = onnx.helper.make_graph(
        [node], op, [value_info(v) for v in island.inputs],
        [value_info(v) for v in island.outputs], weights)
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


def _random(rng: np.random.Generator, dtype: np.dtype, shape) -> np.ndarray:
    """Random normal floats; zeros for every other element type (a valid index, count or flag
    wherever an integer input is one)."""
    return rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else \
        np.zeros(shape, dtype)


def _inputs(island: Island, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The island's activations, `_random`."""
    feeds = {}
    for v in island.inputs:
        shape = static_dims(v.shape)
        assert shape is not None  # (an island's values have static shapes: partition.why_not)
        feeds[v.name or ""] = _random(rng, NP_DTYPES[DTYPE_NAMES[v.dtype]], shape)
    return feeds


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
        feeds = _inputs(isl, rng)
        ours, theirs = with_lib.run(None, feeds), without.run(None, feeds)
        for a, b, out in zip(ours, theirs, with_lib.get_outputs(), strict=True):
            if not compare(a, b, OUTPUT_TOLERANCE)[2]:
                raise AotcError(f"island {op}: output '{out.name}' differs from onnxruntime's "
                                "on random inputs", hint="please report this model")
        timings.append(IslandTiming(op, *_alternate(with_lib, without, feeds, runs)))
        path.unlink()
    return timings


# The op of the whole model's timing (time_model)
WHOLE_MODEL = "(whole model)"


def time_model(path: Path, library: Path, threads: int, runs: int = 15) -> IslandTiming:
    """The model at `path` (its functions' weights beside it) timed with `library` and without
    it, on random inputs (its inputs have static shapes: --measure-islands takes no range)."""
    rng = np.random.default_rng(0)
    feeds = {}
    for v in onnx.load(str(path), load_external_data=False).graph.input:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        feeds[v.name] = _random(rng, dtype, shape)
    with_lib, without = _session(path, threads, library), _session(path, threads, None)
    return IslandTiming(WHOLE_MODEL, *_alternate(with_lib, without, feeds, runs))


def _alternate(with_lib, without, feeds: dict[str, np.ndarray], runs: int) -> tuple[float, float]:
    """Median seconds of a run of each session, alternating run by run, two warm-up runs each,
    each run after the other session's workers have stopped spinning."""
    seconds: tuple[list[float], list[float]] = ([], [])
    for r in range(runs + 2):
        order = (0, 1) if r % 2 else (1, 0)
        for k in order:
            sess = (with_lib, without)[k]
            quiesce()  # the other session's workers spin after its run
            t = time.perf_counter()
            sess.run(None, feeds)
            seconds[k].append(time.perf_counter() - t)
    return statistics.median(seconds[0][2:]), statistics.median(seconds[1][2:])
