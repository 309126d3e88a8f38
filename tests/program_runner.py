"""Compile ONNX models and run the resulting Program in-process for tests.

The kernel object is the one a bundle ships, linked into a shared library with a serial
`aotc_parallel_for`; a few lines of Python walk the step table the way the C executor does.
Bundle-level tests (make, run_model, sanitizers) live in test_bundle*.py / test_models.py.
"""

from __future__ import annotations

import ctypes
import functools
import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from kernel_harness import link_serial
from onnx import helper, numpy_helper

from aotc.compiler import compile_model
from aotc.package.program import (
    DTYPES,
    Branch,
    BufferRef,
    Check,
    Item,
    Program,
    Step,
    TensorInfo,
)
from targets.cpu.target import host_target


def load_graph(model: onnx.ModelProto | str | Path, input_shapes=None, passes: bool = True):
    try:
        from aotc.frontend import load_model
    except ImportError:  # frontend still being written: plain shape inference
        import onnx_ir as ir

        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
        return ir.from_proto(onnx.shape_inference.infer_shapes(proto, data_prop=True))
    if isinstance(model, onnx.ModelProto):
        with tempfile.TemporaryDirectory(prefix="aotc_m_") as tmp:
            onnx.save(model, Path(tmp) / "model.onnx")
            graph = load_model(Path(tmp) / "model.onnx", input_shapes or {})
    else:
        graph = load_model(model, input_shapes or {})
    if passes:
        try:
            from aotc.passes import run_passes
        except ImportError:  # passes still being written
            return graph
        graph = run_passes(graph)
    return graph


def compile_onnx(model, input_shapes=None, passes: bool = True) -> Program:
    return compile_model(load_graph(model, input_shapes, passes), host_target())


def bind_steps(program: Program, inputs: list[np.ndarray], length: int | None = None,
               lib: ctypes.CDLL | None = None):
    """The program's items as calls ready to run, in order: (kernel function, its `bufs`
    pointer array) each, over one arena, the weights and the given inputs as the C executor
    lays them out; returns the calls, the output arrays and what must stay alive with them.
    A loop or a branch is one call too: a Python function with the kernel's signature that
    runs its body as the C executor does (references moved by the iteration, early exit, odd
    exit, the branch chosen by its condition). `length`: the run-time dimension's value
    (a program with one; default its bound): inputs and outputs are dense at that length.
    `lib`: the kernel object already loaded (default: linked with a serial parallel loop)."""
    lib = lib or link_serial(program.kernel_object)
    n = program.dims[0].hi if program.dims and length is None else length
    arena = np.zeros(program.arena_size + 64, dtype=np.uint8)
    arena_base = arena.ctypes.data + (-arena.ctypes.data) % 64
    weights = np.frombuffer(program.weights + b"\0" * 64, dtype=np.uint8).copy()
    wbase = weights.ctypes.data
    ins = []
    for info, a in zip(program.inputs, inputs, strict=True):
        arr = np.array(a, dtype=np.dtype(DTYPES[info.dtype][1]), order="C")  # keeps 0-d
        want = info.at_length(n) if n is not None else info.shape
        assert arr.shape == want, (info.name, arr.shape, want)
        ins.append(arr)
    # outputs laid out for the bound; at a shorter length the dense result is their prefix
    outs = [np.zeros(o.shape, dtype=np.dtype(DTYPES[o.dtype][1])) for o in program.outputs]
    dims = (ctypes.c_int64 * max(1, len(program.dims)))(*([n] if program.dims else []))
    iters = [0] * 8  # the iteration of the loop at each depth

    def address(ref: BufferRef) -> int:
        if ref.storage == "arena":
            odd = ref.odd_offset is not None and ref.loop >= 0 and iters[ref.loop] % 2
            base = arena_base + (ref.odd_offset if odd else ref.offset)  # type: ignore[operator]
        elif ref.storage == "weight":
            base = wbase + ref.offset
        elif ref.storage == "input":
            base = ins[ref.offset].ctypes.data
        else:
            base = outs[ref.offset].ctypes.data
        return base + ref.shift + (iters[ref.loop] * ref.stride if ref.loop >= 0 else 0)

    def true_at(ref: BufferRef) -> bool:
        return ctypes.c_uint8.from_address(address(ref)).value != 0

    def bind(item: Item):
        if isinstance(item, Step):
            fn = getattr(lib, item.kernel)
            fn.restype = ctypes.c_int32
            ptrs = (ctypes.c_void_p * len(item.args))(*map(address, item.args))
            if not any(r.moves for r in item.args):
                return fn, ptrs

            def moved(ctx, _ptrs, _dims):
                for k, r in enumerate(item.args):
                    ptrs[k] = address(r)
                return fn(ctx, ptrs, dims)
            return moved, None
        if isinstance(item, Check):
            return (lambda ctx, _p, dims: 0 if true_at(item.cond) else INPUT_VALUE_STATUS), None
        if isinstance(item, Branch):
            then, other = [bind(x) for x in item.then], [bind(x) for x in item.otherwise]
            return (lambda ctx, _p, dims: run(then if true_at(item.cond) else other, ctx)), None
        body, odd = [bind(x) for x in item.body], [bind(x) for x in item.on_odd_exit]
        depth = item.depth

        def loop(ctx, _ptrs, dims):
            if item.cond_in is not None and not true_at(item.cond_in):
                return 0
            done = 0
            while done < item.trip_count:
                iters[depth] = done
                rc = run(body, ctx)
                if rc:
                    return rc
                done += 1
                if item.cond_out is not None and not true_at(item.cond_out):
                    break
            return run(odd, ctx) if done % 2 else 0
        return loop, None

    def run(calls, ctx) -> int:
        for fn, ptrs in calls:
            rc = fn(ctx, ptrs, dims)
            if rc:
                return rc
        return 0

    calls = [bind(item) for item in program.steps]
    return calls, outs, (lib, arena, weights, ins, dims)


INPUT_VALUE_STATUS = 13  # AOTC_ERR_INPUT_VALUE (runtime_c/aotc_api.h): a failed Check


class RunFailed(RuntimeError):
    """A step returned a non-zero status, as the C executor would report it."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"the program stopped with status {status}")


def run_program(program: Program, inputs: list[np.ndarray], length: int | None = None
                ) -> list[np.ndarray]:
    """The program's outputs on `inputs` (at `length` of its run-time dimension, if it has one)."""
    calls, outs, keep = bind_steps(program, inputs, length)
    dims = keep[-1]
    for fn, ptrs in calls:
        status = fn(None, ptrs, dims)
        if status:
            raise RunFailed(status)
    if any(o.computed_axis >= 0 for o in program.outputs):
        return [_at_computed_length(o, info, keep[1]) for o, info in
                zip(outs, program.outputs, strict=True)]
    if not program.dims:
        return outs
    n = program.dims[0].hi if length is None else length
    return [o.reshape(-1)[:math.prod(info.at_length(n))].reshape(info.at_length(n))
            for o, info in zip(outs, program.outputs, strict=True)]


def _at_computed_length(out: np.ndarray, info: TensorInfo, arena: np.ndarray) -> np.ndarray:
    """An output whose length the run computed: the dense prefix at that length, read from
    the arena's length slot as the C runtime's NAME_output_shape reads it."""
    if info.computed_axis < 0:
        return out
    base = (-arena.ctypes.data) % 64 + info.length_offset
    n = int(arena[base:base + 8].view(np.int64)[0])
    assert 0 <= n <= info.shape[info.computed_axis], (info.name, n)
    shape = info.with_computed_length(n)
    return out.reshape(-1)[:math.prod(shape)].reshape(shape)


def ort_outputs(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    if model.ir_version > 10:  # onnx.helper writes IR versions newer than onnxruntime reads
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = 10
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs, strict=True)))


# Where onnxruntime's integer products read a signed 8-bit operand (weights) and its zero
# point, by operator: (operand, zero point) input positions
SIGNED_OPERANDS = {"MatMulInteger": (1, 3), "ConvInteger": (1, 3), "QLinearConv": (3, 5),
                   "QLinearMatMul": (3, 5)}


def _integer_probe() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
        [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, [1, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [1, 1])],
        [numpy_helper.from_array(np.full((64, 1), 127, np.int8), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@functools.cache
def ort_integer_products_exact() -> bool:
    """Whether onnxruntime's u8 x s8 products are exact on this host. On x86-64 without VNNI
    its kernels add pairs of products in saturating int16 (vpmaddubsw): 255 * 127 twice is
    64770, clipped to 32767, so its QLinearConv/MatMulInteger results there are wrong where
    such pairs occur. aotc's integer kernels are exact on every ISA."""
    return int(ort_outputs(_integer_probe(), [np.full((1, 64), 255, np.uint8)])[0][0, 0]) \
        == 64 * 255 * 127


def _unsigned_operands(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """`model` with every signed 8-bit constant operand of an integer product stored as
    uint8 (w + 128, its zero point + 128: the same differences w - zero point), which
    onnxruntime multiplies exactly on every host (its u8 x u8 kernels widen to int16 before
    adding); None when an operand is not a constant."""
    model = onnx.shape_inference.infer_shapes(model)
    inits = {t.name: t for t in model.graph.initializer}
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*model.graph.input, *model.graph.value_info, *model.graph.output]}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    shifted: set[str] = set()
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            return None  # (a QDQ model: onnxruntime fuses its own kernels, per-channel ones inexact)
        where = SIGNED_OPERANDS.get(node.op_type)
        # onnxruntime has no s8 x u8 kernels: only the operands of uint8 activations are
        # re-expressed (an s8 x s8 product is exact already)
        if where is None or types.get(node.input[0]) != onnx.TensorProto.UINT8:
            continue
        w = inits.get(node.input[where[0]])
        if w is None:
            return None  # an activation operand: no constant to re-express
        if w.data_type != onnx.TensorProto.INT8:
            continue
        zp_name = node.input[where[1]] if len(node.input) > where[1] else ""
        if zp_name and zp_name not in inits:
            return None
        zp = numpy_helper.to_array(inits[zp_name]) if zp_name else np.zeros((), np.int8)
        if w.name not in shifted:
            w.CopyFrom(numpy_helper.from_array(
                (numpy_helper.to_array(w).astype(np.int16) + 128).astype(np.uint8), w.name))
            shifted.add(w.name)
        new_zp = f"{node.name or node.output[0]}__unsigned_zero_point"
        model.graph.initializer.append(numpy_helper.from_array(
            (zp.astype(np.int16) + 128).astype(np.uint8), new_zp))
        while len(node.input) <= where[1]:
            node.input.append("")
        node.input[where[1]] = new_zp
    return model


def reference_outputs(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The outputs to compare aotc's with: onnxruntime's. On a host where its u8 x s8 products
    are inexact (ort_integer_products_exact), onnxruntime's on the model with those operands
    stored unsigned, or ONNX's reference evaluator (exact, the model as written) where they are
    not constants or the model is QDQ (whose fused kernels onnxruntime picks itself)."""
    ops = {n.op_type for n in model.graph.node}
    if not ops & {*SIGNED_OPERANDS, "DequantizeLinear"} or ort_integer_products_exact():
        return ort_outputs(model, inputs)
    unsigned = _unsigned_operands(model)
    return ort_outputs(unsigned, inputs) if unsigned is not None else \
        onnx_reference_outputs(model, inputs)


def onnx_reference_outputs(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX's reference evaluator's outputs, `inputs` in the order of the graph's inputs that
    are not initializers."""
    from onnx.reference import ReferenceEvaluator
    names = [i.name for i in model.graph.input
             if i.name not in {t.name for t in model.graph.initializer}]
    return list(ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True))))


def assert_close(got: np.ndarray, want: np.ndarray, tol: float = 1e-4) -> None:
    """fp32: max absolute error ≤ tol × max(1, scale of the expected output)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    scale = max(1.0, float(np.abs(want[finite]).max()) if finite.any() else 1.0)
    err = float(np.abs(got[finite].astype(np.float64) - want[finite]).max()) if finite.any() else 0
    assert err <= tol * scale, f"max abs error {err:.3g} > {tol * scale:.3g}"


def check_model(model: onnx.ModelProto, inputs: list[np.ndarray], tol: float = 1e-4,
                input_shapes=None) -> None:
    """Compile `model`, run it, compare every output with onnxruntime (reference_outputs)."""
    program = compile_onnx(model, input_shapes)
    got = run_program(program, inputs)
    want = reference_outputs(model, inputs)
    for g, w in zip(got, want, strict=True):
        assert_close(g, w, tol)


def node_model(op, inputs, consts=(), *, outputs=(True,), opset=21, **attrs):
    """A single-node model and its feeds: `inputs[k]` is an array (graph input, or initializer
    if k in consts) or None (omitted optional input); `outputs[k]` False leaves output k out."""
    names = ["" if a is None else f"x{k}" for k, a in enumerate(inputs)]
    while names and not names[-1]:  # trailing omitted inputs are left out
        names.pop()
    outs = [f"y{k}" if keep else "" for k, keep in enumerate(outputs)]
    while outs and not outs[-1]:
        outs.pop()
    node = helper.make_node(op, names, outs, **attrs)
    graph_in, inits, feeds = [], [], []
    for k, a in enumerate(inputs):
        if a is None:
            continue
        if k in consts:
            inits.append(numpy_helper.from_array(a, names[k]))
        else:
            dtype = helper.np_dtype_to_tensor_dtype(a.dtype)
            graph_in.append(helper.make_tensor_value_info(names[k], dtype, a.shape))
            feeds.append(a)
    graph = helper.make_graph([node], "g", graph_in,
                              [helper.make_empty_tensor_value_info(o) for o in outs if o],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


def check_node(op, inputs, consts=(), *, n_out=1, opset=21, tol=1e-4, **attrs):
    """Single-node model (see node_model) compared with onnxruntime through the whole
    pipeline."""
    model, feeds = node_model(op, inputs, consts, outputs=(True,) * n_out, opset=opset, **attrs)
    check_model(model, feeds, tol)
