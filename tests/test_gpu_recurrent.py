"""LSTM, GRU and RNN on the GPU target (lowering/gpu_recurrent.py: one thread per direction and
batch row) against onnxruntime, run on the OpenCL device (PoCL): directions, sequence lengths
and initial states, the batch-major layout, constant weights (laid out as given) and weights
computed at run time (copied by a first launch), and more rows than a block has threads (a
partial last block)."""

from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from program_runner import assert_close, compile_onnx, load_graph, ort_outputs  # noqa: E402
from program_runner import run_program as run_cpu  # noqa: E402
from test_ops_recurrent import case  # noqa: E402

from aotc.compiler import compile_model  # noqa: E402
from lowering.loop_ir import For  # noqa: E402
from targets.gpu.opencl_device import opencl_available  # noqa: E402
from targets.gpu.target import gpu_target  # noqa: E402

needs_opencl = pytest.mark.skipif(not opencl_available(),
                                  reason="no OpenCL device (apt-get install pocl-opencl-icd)")


def check_on_opencl(op: str, **kw) -> None:
    """The node compiled for opencl and run on the device against onnxruntime (layout 0) or
    the CPU target's result (layout 1, which onnxruntime refuses; test_ops_recurrent.py checks
    the CPU's against onnxruntime on the transposed node)."""
    from targets.gpu.opencl_program import run_program

    model, feeds = case(op, **kw)
    program = compile_model(load_graph(model), gpu_target("opencl"), name="m")
    got = run_program(program, feeds)
    want = run_cpu(compile_onnx(model), feeds) if kw.get("layout") else ort_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, 1e-4)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("consts", [True, False])
def test_recurrence_on_opencl(op: str, direction: str, consts: bool) -> None:
    check_on_opencl(op, direction=direction, lens=[5, 0, 3], initial=True, consts=consts)


@pytest.mark.opencl
@needs_opencl
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrence_on_opencl_batch_major_partial_block(op: str) -> None:
    # 2 directions x 40 rows: more than the 64 threads of a block
    check_on_opencl(op, direction="bidirectional", layout=1, batch=40, steps=3, hidden=5,
                    lens=[3, 1, 0, 2] * 10, initial=True)


def test_recurrence_binds_rows_to_the_grid() -> None:
    """On a GPU target a recurrence gets the GPU recurrent space, whose kernel's every stage
    (the weights' copy, the projection, the recurrence) starts with a block loop and a thread
    loop, the nest the renderer launches; 2 directions x 3 rows are 6 threads."""
    from aotc.compiler import _Compiler

    model, _ = case("LSTM", direction="bidirectional", consts=False)
    graph = load_graph(model)
    node = next(n for n in graph.graph if n.op_type == "LSTM")
    lowered = _Compiler(graph, gpu_target("opencl"), "m", None).prepare(node)
    assert lowered is not None and lowered.space is not None
    assert lowered.space.kind == "gpu-recurrent"
    kernel = lowered.space.build(lowered.space.default_config()).kernel
    assert len(kernel.stages) >= 3
    for stage in kernel.stages:
        assert isinstance(stage, For) and stage.kind == "block"
        assert isinstance(stage.body, For) and stage.body.kind == "thread"
    last = kernel.stages[-1]
    assert last.extent.value * last.body.extent.value == 6  # type: ignore[attr-defined]
