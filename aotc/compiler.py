"""Graph (static shapes, after passes) → Program: lower every node, generate code, plan memory.

Reads only the onnx_ir graph the passes produced; the packager reads only the Program.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import onnx_ir as ir

from aotc import control_flow
from aotc.errors import AotcError, CompilerBug, UnsupportedOperators
from aotc.frontend.computed_lengths import computed_axis
from aotc.frontend.dynamic import DynamicShapes
from aotc.fused import function_of, lower_fused
from aotc.package.memory_plan import PlanBuffer, loop_lifetimes, plan_memory
from aotc.package.program import Program, Step, TensorInfo
from lowering import te
from lowering.default_schedule import default_schedule
from lowering.gpu_schedule import gpu_default_schedule
from lowering.loop_ir import Kernel, format_kernel
from lowering.lower import lower_kernel, stages_of
from lowering.ops import OPS, Alias, OpContext, pinned, run_op
from lowering.schedule import ScheduleError, StageSchedule
from lowering.search.select import space_for
from lowering.search.space import Config, ScheduleSpace
from lowering.search.tuner import Tuner
from lowering.verify import verify_kernel
from targets.cpu.codegen import ModuleBuilder, optimize_and_emit
from targets.cpu.target import CpuTarget
from targets.gpu.codegen import GpuModule, cuda_to_ptx, module_of
from targets.gpu.render import RenderedKernel, RenderError, render_kernel
from targets.gpu.target import GpuTarget

Target = CpuTarget | GpuTarget

DTYPE_NAMES: dict[ir.DataType, str] = {
    ir.DataType.FLOAT: "float32",
    ir.DataType.DOUBLE: "float64",
    ir.DataType.FLOAT16: "float16",
    ir.DataType.BFLOAT16: "bfloat16",
    ir.DataType.INT64: "int64",
    ir.DataType.INT32: "int32",
    ir.DataType.INT16: "int16",
    ir.DataType.INT8: "int8",
    ir.DataType.UINT64: "uint64",
    ir.DataType.UINT32: "uint32",
    ir.DataType.UINT16: "uint16",
    ir.DataType.UINT8: "uint8",
    ir.DataType.BOOL: "bool",
    ir.DataType.FLOAT8E4M3FN: "float8_e4m3fn",
    ir.DataType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    ir.DataType.FLOAT8E5M2: "float8_e5m2",
    ir.DataType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    ir.DataType.FLOAT8E8M0: "float8_e8m0fnu",
    ir.DataType.FLOAT4E2M1: "float4_e2m1fn",
    ir.DataType.INT4: "int4",
    ir.DataType.UINT4: "uint4",
    ir.DataType.INT2: "int2",
    ir.DataType.UINT2: "uint2",
}
WEIGHT_ALIGN = 64


def unsupported_nodes(nodes: Iterable[ir.Node],
                      functions: Mapping[ir.OperatorIdentifier, ir.Function] | None = None,
                      ) -> list[tuple[str, str]]:
    """(node name, operator) for every node of `nodes` (a graph, or a list) aotc cannot
    compile; a call of a fused region (`ai.aotc`, body in `functions`) is as good as the nodes
    of its body."""
    bad = []
    for node in nodes:
        if _is_constant(node):
            continue
        function = function_of(functions or {}, node)
        if function is not None:
            bad += unsupported_nodes(function.graph, functions)
        elif control_flow.is_control(node):  # compiled with its bodies (control_flow.py)
            for g in control_flow.subgraphs(node):
                bad += unsupported_nodes(g, functions)
        elif node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            bad.append((node.name or "<unnamed>", op))
    return bad


def _is_constant(node: ir.Node) -> bool:
    """A Constant node left by the frontend (e.g. a folded graph output): its value is a weight."""
    return (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            and node.outputs[0].const_value is not None)


def value_dtype(v: ir.Value, file: str | None, node: str | None = None) -> str:
    if v.dtype not in DTYPE_NAMES:
        kind = getattr(v.dtype, "name", str(v.dtype))
        what = "strings are" if kind == "STRING" else f"{kind} is"
        raise AotcError(
            f"value '{v.name}' has element type {v.dtype}, which aotc does not compile",
            file=file, node=node,
            hint=f"aotc compiles {', '.join(te.DTYPES)}; {what} not supported",
        )
    return DTYPE_NAMES[v.dtype]


def value_shape(v: ir.Value, file: str | None, node: str | None = None) -> tuple[int, ...]:
    if v.shape is None:
        raise AotcError(f"value '{v.name}' has no inferred shape", file=file, node=node)
    dims = []
    for d in v.shape:
        if not isinstance(d, int):
            raise AotcError(
                f"value '{v.name}' has a dynamic dimension '{d}'", file=file, node=node,
                hint="bind it with --input-shape name=d0,d1,...",
            )
        dims.append(d)
    return tuple(dims)


@dataclass
class _Loc:
    """Where a value's bytes live before memory planning."""

    storage: str  # "input" | "output" | "weight" | "arena"
    key: object  # input/output index, weight id, or arena root id
    # inside a loop (control_flow.py): moved by the iteration i of the loop at depth `loop`,
    # `shift` + i * `stride` bytes, or on odd iterations the arena buffer `odd` instead
    loop: int = -1
    stride: int = 0
    odd: object = None
    shift: int = 0


@dataclass
class _PendingStep:
    kernel: str
    args: list[_Loc]
    node: str
    flops: float = 0.0
    # (argument of an input, argument of the output): the output may take over the input's
    # memory when this step is the input's last use (ScheduleSpace.in_place_input)
    in_place: tuple[int, int] | None = None


@dataclass
class CompileStats:
    nodes: int = 0
    kernels: int = 0
    unique_kernels: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class _LoweredNode:
    """One node after `_Compiler.prepare`: its outputs that are views of an input, those it
    computes, and the kernel's schedule space and the values it reads."""

    node: ir.Node
    ctx: OpContext
    aliases: list[tuple[ir.Value, ir.Value]] = field(default_factory=list)  # (output, input)
    produced: list[tuple[ir.Value, te.Tensor]] = field(default_factory=list)
    empty: list[ir.Value] = field(default_factory=list)  # outputs with a 0 dim: not computed
    in_values: list[ir.Value] = field(default_factory=list)
    space: ScheduleSpace | None = None
    control: bool = False  # a Scan, Loop or If: control_flow.emit_control compiles it
    # run-time checks of pinned parameters: each a kernel writing a bool, and what it checks
    checks: list[tuple[_LoweredNode, str]] = field(default_factory=list)


class _Compiler:
    def __init__(self, model: ir.Model, target: Target, name: str, file: str | None,
                 dynamic: DynamicShapes | None = None) -> None:
        self.graph = model.graph
        # value name -> its axes that follow the run-time dimension (aotc/frontend/dynamic.py)
        self.dyn_axes = dynamic.axes if dynamic is not None else {}
        self.dims = [te.dim_var(i, d.lo, d.hi) for i, d in enumerate(dynamic.dims)
                     ] if dynamic is not None else []
        self.functions = model.functions
        self.target = target
        self.name = name
        self.file = file
        self.loc: dict[ir.Value, _Loc] = {}
        self.steps: list[_PendingStep] = []
        self.kernels: dict[str, Kernel] = {}  # canonical text -> kernel (deduplicated)
        self.kernel_symbol: dict[str, str] = {}
        self.rendered: dict[str, RenderedKernel] = {}  # GPU targets: symbol -> its source
        self.weights: dict[int, tuple[int, np.ndarray]] = {}  # id(value) -> (offset, array)
        self.weight_blob = bytearray()
        self.packed: dict[tuple, int] = {}  # (value, shape, content hash) -> weight offset
        self.arena_sizes: dict[object, int] = {}
        self.scratch_count = 0
        self.stats = CompileStats()
        # outputs whose length the run computes -> the int64 value it is stored in
        self.length_slots: dict[ir.Value, ir.Value] = {}

    # locations --------------------------------------------------------------------------
    def _weight(self, v: ir.Value) -> _Loc:
        if id(v) not in self.weights:
            arr = np.asarray(v.const_value.numpy(), order="C")  # type: ignore[union-attr]
            self.weights[id(v)] = (self._add_weight_bytes(arr), arr)
        return _Loc("weight", self.weights[id(v)][0])

    def _add_weight_bytes(self, arr: np.ndarray) -> int:
        pad = (-len(self.weight_blob)) % WEIGHT_ALIGN
        self.weight_blob += b"\0" * pad
        off = len(self.weight_blob)
        self.weight_blob += arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        return off

    def _transformed_weight(self, v: ir.Value, fn: Callable[[np.ndarray], np.ndarray],
                            shape: tuple[int, ...]) -> _Loc:
        """A constant in the layout a kernel wants (pre-packed), stored once per layout."""
        arr = np.asarray(fn(v.const_value.numpy()), order="C")  # type: ignore[union-attr]
        if arr.shape != tuple(shape):
            raise AssertionError(f"packed {v.name} has shape {arr.shape}, kernel wants {shape}")
        key = (id(v), arr.shape, hash(arr.tobytes()))
        if key not in self.packed:
            self.packed[key] = self._add_weight_bytes(arr)
        return _Loc("weight", self.packed[key])

    tuner: Tuner | None = None  # set by compile_model

    def choose_config(self, space: ScheduleSpace) -> Config:
        """From the tuning log or this compile's measurements, else the cost model."""
        return (self.tuner or Tuner()).choose(space)

    def location(self, v: ir.Value) -> _Loc:
        if v in self.loc:
            return self.loc[v]
        if v.const_value is not None:
            return self._weight(v)
        raise AotcError(f"value '{v.name}' is used before it is computed", file=self.file)

    def shape_of(self, v: ir.Value, node: str | None = None) -> tuple[int, ...]:
        """The value's shape, a DynExtent on the axes that follow the run-time dimension."""
        shape = value_shape(v, self.file, node)
        axes = self.dyn_axes.get(v.name or "", ())
        if not axes:
            return shape
        return tuple(te.DynExtent(self.dims[0]) if i in axes else d for i, d in enumerate(shape))

    # nodes ------------------------------------------------------------------------------
    def _placeholders(self, node: ir.Node) -> tuple[list[te.Tensor | None],
                                                    list[np.ndarray | None]]:
        inputs: list[te.Tensor | None] = []
        consts: list[np.ndarray | None] = []
        for v in node.inputs:
            if v is None:
                inputs.append(None)
                consts.append(None)
                continue
            shape = self.shape_of(v, node.name)
            inputs.append(te.placeholder(shape, value_dtype(v, self.file, node.name), "in"))
            consts.append(v.const_value.numpy() if v.const_value is not None else None)
        return inputs, consts

    def context(self, node: ir.Node, given: tuple[list[te.Tensor | None],
                                                  list[np.ndarray | None]] | None = None,
                label: str | None = None) -> OpContext:
        """The node's OpContext: a placeholder per input, or the `given` (tensors, constant
        values) when the node is one of a fused region's body (see aotc/fused.py)."""
        inputs, consts = given if given is not None else self._placeholders(node)
        attrs = {k: _attr_value(a) for k, a in node.attributes.items()}
        # run-time checks of pinned parameters: a node's own, on the executors that run them
        checks = [] if given is None and not isinstance(self.target, GpuTarget) else None
        return OpContext(
            node=label or node.name or "<unnamed>", op_type=node.op_type, attrs=attrs,
            inputs=inputs, consts=consts,
            out_shapes=[self.shape_of(o, node.name) for o in node.outputs],
            out_dtypes=[value_dtype(o, self.file, node.name) for o in node.outputs],
            file=self.file, checks=checks,
            computed_axes=[computed_axis(o) for o in node.outputs] if checks is not None
            else [],
        )

    def lower_node(self, node: ir.Node) -> tuple[OpContext, list[te.Tensor | Alias]]:
        """The node's context and its outputs as tensor expressions (or input aliases)."""
        ctx = self.context(node)
        function = function_of(self.functions, node)
        if function is None:
            return ctx, run_op(ctx)
        return ctx, lower_fused(ctx, function, lambda n, ins, cs, label: self.context(
            n, (ins, cs), label))

    def prepare(self, node: ir.Node) -> _LoweredNode | None:
        """The node lowered to tensor expressions, with its kernel's schedule space when it
        computes anything (None for a Constant). Nothing is placed or built yet, so that a
        tuner can see every space before the first kernel is built (`finish`)."""
        with _compiling(node):
            return self._prepare(node)

    def _prepare(self, node: ir.Node) -> _LoweredNode | None:
        if _is_constant(node):
            return None
        if control_flow.is_control(node):
            if isinstance(self.target, GpuTarget):
                raise AotcError(f"node '{node.name}' ({node.op_type}): control flow does not "
                                f"compile for the {self.target.name} target yet", file=self.file,
                                hint="compile for a CPU target (--target cpu)")
            lowered = _LoweredNode(node, None, control=True)  # type: ignore[arg-type]
            self._trip_count_check(node, lowered)
            return lowered
        ctx, results = self.lower_node(node)
        if len(results) != len(node.outputs):
            raise ctx.error(f"definition gave {len(results)} outputs, the node has "
                            f"{len(node.outputs)}")
        lowered = _LoweredNode(node, ctx)
        for out, res, shape, dtype in zip(node.outputs, results, ctx.out_shapes,
                                          ctx.out_dtypes, strict=True):
            if isinstance(res, Alias):
                src = node.inputs[res.index]
                assert src is not None
                have = (value_dtype(src, self.file, node.name),
                        math.prod(value_shape(src, self.file, node.name)))
                # the same bytes: BitCast views them as another type of the same width
                if have[1] * _itemsize(have[0]) != math.prod(shape) * _itemsize(dtype):
                    # a view keeps the bytes: a declared shape that disagrees (taken on trust
                    # where inference could not check it) would read past the input
                    raise ctx.error(f"output '{out.name}' is {dtype}{list(shape)}, a view of "
                                    f"input '{src.name}' of {have[0]}"
                                    f"{list(value_shape(src, self.file))}",
                                    hint="the model's declared shapes disagree with its nodes")
                lowered.aliases.append((out, src))
                continue
            if res.shape != shape or res.dtype != dtype:
                raise ctx.error(f"output '{out.name}' computed as {res.dtype}{list(res.shape)}, "
                                f"inferred as {dtype}{list(shape)}")
            if 0 in shape:  # nothing to compute; a kernel of empty loops would only trip schedules
                lowered.empty.append(out)
            else:
                lowered.produced.append((out, res))
        for index, length in ctx.lengths.items():  # computed by the same kernel
            out = node.outputs[index]
            slot = ir.Value(name=f"{out.name}__length", shape=ir.Shape([]),
                            type=ir.TensorType(ir.DataType.INT64))
            self.length_slots[out] = slot
            lowered.produced.append((slot, length))
        if lowered.produced:
            lowered.in_values, lowered.space = self._space(
                node, ctx, [t for _, t in lowered.produced])
        for ok, what in ctx.checks or ():
            self._add_check(node, ctx, lowered, ok, what)
        return lowered

    def _space(self, node: ir.Node, ctx: OpContext, outs: list[te.Tensor]
               ) -> tuple[list[ir.Value], ScheduleSpace]:
        """The kernel computing `outs` from the node's inputs: the inputs it reads and its
        schedule space."""
        used = {id(t) for s in stages_of(outs) for t in te.tensors_read(s.op.body)}  # type: ignore[union-attr]
        in_tensors, in_values = [], []
        for v, ph in zip(node.inputs, ctx.inputs, strict=True):
            if ph is not None and id(ph) in used and v is not None:
                in_tensors.append(ph)
                in_values.append(v)
        consts = [v.const_value.numpy() if v.const_value is not None else None
                  for v in in_values]
        try:
            return in_values, space_for(in_tensors, outs, consts, self.target)
        except ScheduleError as e:
            raise self.gpu_refusal(e) from e

    def gpu_refusal(self, e: ScheduleError) -> Exception:
        """A GPU schedule that cannot take a node's computation (one over a run-time
        dimension where it would lay its blocks out for the whole axis, or a recurrence
        along it): the user's error, named by the node (`_compiling`), never a wrong
        kernel. On a CPU target the schedule error stays what it is (a bug)."""
        if not isinstance(self.target, GpuTarget):
            return e
        return AotcError(f"{e}: does not compile for the {self.target.name} target yet",
                         file=self.file, hint="compile for a CPU target (--target cpu), or "
                         "with a fixed length (--input-shape name=d0,d1,...)")

    def _trip_count_check(self, node: ir.Node, lowered: _LoweredNode) -> None:
        """A Loop whose trip count is given at run time and pinned by its scan outputs
        (control_flow.pinned_trip_count): the check that runs before it."""
        trip = control_flow.pinned_trip_count(node)
        if trip is None:
            return
        ctx = self.context(node)
        cond = node.inputs[1]
        run_time_cond = ctx.inputs[1] if cond is not None and cond.const_value is None else None
        ok = control_flow.trip_count_check(ctx.input(0), run_time_cond, trip)
        pinned.require(ctx, ok, f"the trip count must be {trip} (the scan outputs' length)" +
                       (", the condition true" if run_time_cond is not None and trip > 0 else ""))
        for check, what in ctx.checks or ():
            self._add_check(node, ctx, lowered, check, what)

    def _add_check(self, node: ir.Node, ctx: OpContext, lowered: _LoweredNode, ok: te.Tensor,
                   what: str) -> None:
        """A kernel computing the bool `ok`, and what it checks, run before the node."""
        k = len(lowered.checks)
        flag = ir.Value(name=f"{node.name or node.op_type}__check{k}", shape=ir.Shape([]),
                        type=ir.TensorType(ir.DataType.BOOL))
        in_values, space = self._space(node, ctx, [ok])
        lowered.checks.append((_LoweredNode(node, ctx, produced=[(flag, ok)],
                                            in_values=in_values, space=space), what))

    def finish(self, lowered: _LoweredNode) -> None:
        """Place the node's outputs and build its kernel with the chosen schedule."""
        with _compiling(lowered.node):
            self._finish(lowered)

    def _finish(self, lowered: _LoweredNode) -> None:
        for check, what in lowered.checks:  # before the kernels that take the value as pinned
            assert check.space is not None
            self.emit_kernel(check, check.space)
            self.steps.append(control_flow.ValueCheck(
                check.ctx.node, what, [self.loc[check.produced[0][0]]]))
        if lowered.control:
            control_flow.emit_control(self, lowered.node)
            return
        for out, src in lowered.aliases:
            self.loc[out] = self.location(src)
        for out in lowered.empty:
            self.loc[out] = self._new_arena(out)
        if lowered.space is not None:
            self.emit_kernel(lowered, lowered.space)

    def emit_kernel(self, lowered: _LoweredNode, space: ScheduleSpace) -> None:
        try:  # (the cost model may build configurations too)
            config = self.choose_config(space)
            built = space.build(config, "k")
        except ScheduleError as e:
            raise self.gpu_refusal(e) from e
        kernel = built.kernel
        in_locs = []
        for i, v in enumerate(lowered.in_values):
            if i in built.const_transforms:
                in_locs.append(self._transformed_weight(v, built.const_transforms[i],
                                                        kernel.buffers[i].shape))
            else:
                in_locs.append(self.location(v))
        symbol = self.add_kernel(kernel)
        out_locs = []
        for v, _ in lowered.produced:
            self.loc[v] = self._new_arena(v)
            out_locs.append(self.loc[v])
        scratch = []
        for b in kernel.buffers:
            if b.role == "scratch":
                key = ("scratch", self.scratch_count)
                self.scratch_count += 1
                self.arena_sizes[key] = b.size * _itemsize(b.dtype)
                scratch.append(_Loc("arena", key))
        flops = space.flops() if space.kind in ("gemm", "int_gemm") else 0.0
        reuse = space.in_place_input(config)
        in_place = (reuse, len(in_locs)) if reuse is not None and len(out_locs) == 1 else None
        self.steps.append(_PendingStep(symbol, in_locs + out_locs + scratch,
                                       lowered.ctx.node, flops, in_place))

    def _new_arena(self, v: ir.Value) -> _Loc:
        key = ("value", v.name, id(v))
        shape = value_shape(v, self.file)
        self.arena_sizes[key] = int(np.prod(shape, dtype=np.int64)) * _itemsize(
            value_dtype(v, self.file))
        return _Loc("arena", key)

    def add_kernel(self, kernel: Kernel) -> str:
        self.stats.kernels += 1
        key = format_kernel(kernel, canonical=True)
        if key not in self.kernel_symbol:
            symbol = f"{self.name}_k{len(self.kernel_symbol)}"
            kernel.name = symbol
            verify_kernel(kernel)
            if isinstance(self.target, GpuTarget):
                try:  # now, so that a kernel the renderer cannot take names its node
                    self.rendered[symbol] = render_kernel(kernel, len(self.dims))
                except RenderError as e:
                    raise AotcError(f"{e} does not compile for the {self.target.name} target "
                                    "yet", file=self.file,
                                    hint="compile for a CPU target (--target cpu)") from e
            self.kernel_symbol[key] = symbol
            self.kernels[key] = kernel
        return self.kernel_symbol[key]

    def copy_into_output(self, v: ir.Value, index: int) -> None:
        """A graph output that no kernel writes (an input, a weight, a view): copy it."""
        shape = self.shape_of(v)
        dtype = value_dtype(v, self.file)
        src = te.placeholder(shape, dtype, "src")
        dst = te.compute(shape, lambda *i: src[i], name="copy")
        symbol = self.add_kernel(lower_kernel("k", [src], [dst], self.plain_schedule()))
        self.steps.append(_PendingStep(symbol, [self.location(v), _Loc("output", index)],
                                       f"output:{v.name}"))


    def plain_schedule(self) -> Callable[[te.Tensor], StageSchedule]:
        """The target's default schedule, for the copies the compiler adds itself."""
        target = self.target
        if isinstance(target, GpuTarget):
            return lambda t: gpu_default_schedule(t, target.machine)
        lanes = target.vector_lanes_f32
        return lambda t: default_schedule(t, lanes)


@contextmanager
def _compiling(node: ir.Node) -> Iterator[None]:
    """An unexpected exception names the node being compiled; a user's error passes as is,
    named by the node when it names none (a schedule or a target refusing the node's kernel)."""
    try:
        yield
    except AotcError as e:
        if e.node is None and not isinstance(e, UnsupportedOperators):
            e.node, e.op = node.name, node.op_type
            e.args = (e.render(),)
        raise
    except CompilerBug:
        raise
    except Exception as e:
        raise CompilerBug(f"{type(e).__name__} while compiling node '{node.name}' "
                          f"({node.op_type}): {e}") from e


def _share_in_place(steps: list[_PendingStep], sizes: dict[object, int]) -> None:
    """A step that may write its output over an input (`in_place`) does so when that input
    is an arena buffer of the same size that no later step and no other argument of the step
    uses: the output's buffer is renamed to the input's from this step on."""
    loops = control_flow.loop_ranges(steps)
    for i, st in enumerate(steps):
        if st.in_place is None:
            continue
        src, dst = st.args[st.in_place[0]], st.args[st.in_place[1]]
        if src.storage != "arena" or dst.storage != "arena" or sizes[src.key] != sizes[dst.key]:
            continue
        if src.loop >= 0 or dst.loop >= 0 or any(
                a <= i <= b and not _first_use_after(steps, src.key, a) for a, b, _ in loops):
            continue  # (a value from before a loop is read again by the next iteration)
        others = [a for j, a in enumerate(st.args) if j != st.in_place[0]]
        later_args = (a for later in steps[i + 1:] for a in later.args)
        if any(a.storage == "arena" and src.key in (a.key, a.odd)
               for a in itertools.chain(others, later_args)):
            continue
        for later in steps[i:]:
            later.args = [replace(a, key=src.key) if a.storage == "arena" and a.key == dst.key
                          else a for a in later.args]


def _first_use_after(steps: list[_PendingStep], key: object, start: int) -> bool:
    """Whether no step before `start` uses the arena buffer `key`."""
    return not any(a.storage == "arena" and key in (a.key, a.odd)
                   for st in steps[:start] for a in st.args)


def _itemsize(dtype: str) -> int:
    return te.ITEMSIZE[dtype]


def _attr_value(a: ir.Attr) -> object:
    v = a.value
    if isinstance(v, ir.TensorProtocol):
        return v.numpy()
    if isinstance(v, (list, tuple)):
        return list(v)
    return v


def _io_axes(graph: ir.Graph, dyn_axes: dict[str, tuple[int, ...]], file: str | None
             ) -> dict[str, tuple[int, ...]]:
    """The run-time axes of graph inputs and outputs. The caller's buffers are dense at the
    run-time length, so an axis may follow the dimension only where the axes before it are 1
    (the dense tensor is then a prefix of the one laid out for the bound)."""
    out = {}
    for v in [*graph.inputs, *graph.outputs]:
        axes = dyn_axes.get(v.name or "", ())
        if not axes:
            continue
        shape = value_shape(v, file)
        if len(axes) > 1 or any(d != 1 for d in shape[:axes[0]]):
            kind = "input" if v in graph.inputs else "output"
            raise AotcError(f"{kind} '{v.name}' {list(shape)} has the run-time dimension on "
                            f"axis {list(axes)} after axes longer than 1; aotc runs it only "
                            "as the first axis longer than 1 for now", file=file,
                            hint="compile with a fixed length (--input-shape name=d0,d1,...)")
        out[v.name or ""] = axes
    return out


def _kernel_spaces(model: ir.Model, target: Target, file: str | None) -> list[ScheduleSpace]:
    """Every kernel's schedule space, in the order of the nodes (nothing built)."""
    c = _Compiler(model, target, "spaces", file)
    lowered = (c.prepare(node) for node in model.graph)
    return [x.space for x in lowered if x is not None and x.space is not None]


def compile_model(
    model: ir.Model,
    target: Target,
    *,
    name: str = "model",
    num_threads: int = 0,
    file: str | None = None,
    on_stage: Callable[[str], None] | None = None,
    tuner: Tuner | None = None,
    dynamic: DynamicShapes | None = None,
) -> Program:
    """Lower, generate and plan a model whose values all have static shapes. `tuner` picks
    each kernel's schedule (default: the cost model alone). A fixed thread count is what the
    schedules' parallel loops are ranked for, instead of the target's core count."""
    if num_threads > 0 and isinstance(target, CpuTarget):
        target = target.with_machine(target.machine.with_cores(num_threads))
    graph = model.graph
    bad = unsupported_nodes(graph, model.functions)
    if bad:
        raise UnsupportedOperators(file, bad)
    c = _Compiler(model, target, name, file, dynamic)
    io_axes = _io_axes(graph, c.dyn_axes, file)
    computed = [v for v in graph.outputs if computed_axis(v) is not None]
    if computed and c.dims:
        raise AotcError(f"output '{computed[0].name}' has a length that depends on the input "
                        "data, in a model with a run-time dimension: aotc compiles the two "
                        "apart only for now", file=file,
                        hint="compile with a fixed length (--input-shape name=d0,d1,...)")
    times: dict[str, float] = {}
    c.tuner = tuner or Tuner()
    t0 = time.perf_counter()
    if on_stage:
        on_stage("lowering")
    inputs = [v for v in graph.inputs if not v.is_initializer()]
    for i, v in enumerate(inputs):
        c.loc[v] = _Loc("input", i)
    nodes = list(graph)
    c.stats.nodes = len(nodes)
    # lazily, one node at a time: its expressions are garbage once its kernel is built
    lowered: Iterable[_LoweredNode] = (x for x in map(c.prepare, nodes) if x is not None)
    if c.tuner.wants_spaces:
        # every node lowered first, so that the tuner splits its budget over all the kernels
        # before any is built
        lowered = list(lowered)
        t1 = time.perf_counter()
        if on_stage:
            on_stage("tuning")
        c.tuner.tune([x.space for x in lowered if x.space is not None])
        times["tune"] = time.perf_counter() - t1
        t0 += times["tune"]
    for x in lowered:
        c.finish(x)
    # graph outputs: a kernel that produced an arena value writes the output buffer instead
    out_index: dict[int, int] = {}
    for i, v in enumerate(graph.outputs):
        loc = c.loc.get(v)
        root_is_own = (
            loc is not None and loc.storage == "arena" and isinstance(loc.key, tuple)
            and loc.key[0] == "value" and loc.key[2] == id(v) and id(v) not in out_index
        )
        if root_is_own:
            assert loc is not None
            key = loc.key
            for st in c.steps:
                st.args = [replace(a, storage="output", key=i)
                           if (a.storage == "arena" and a.key == key) else a for a in st.args]
            for val, lc in list(c.loc.items()):
                if lc.storage == "arena" and lc.key == key:
                    c.loc[val] = replace(lc, storage="output", key=i)
            out_index[id(v)] = i
        else:
            c.copy_into_output(v, i)
    _share_in_place(c.steps, c.arena_sizes)
    times["lower"] = time.perf_counter() - t0

    if on_stage:
        on_stage("codegen")
    t0 = time.perf_counter()
    gpu: GpuModule | None = None
    if isinstance(target, GpuTarget):
        gpu = module_of(list(c.rendered.values()), target.dialect)
        ll = gpu.source
        obj = cuda_to_ptx(ll, target.arch).encode() if target.arch else b""
    else:
        mb = ModuleBuilder(target)
        for k in c.kernels.values():
            mb.add_kernel(k)
        ll = mb.text()
        obj, _ = optimize_and_emit(ll, target)
    times["codegen"] = time.perf_counter() - t0

    if on_stage:
        on_stage("memory plan")
    t0 = time.perf_counter()
    uses: dict[object, list[int]] = {}
    moving: dict[object, set[int]] = {}  # key -> depths of the loops that move a reference to it
    for i, st in enumerate(c.steps):
        for a in st.args:
            for key in (a.key, a.odd) if a.odd is not None else (a.key,):
                if a.storage == "arena":
                    uses.setdefault(key, []).append(i)
                    if a.loop >= 0:
                        moving.setdefault(key, set()).add(a.loop)
    spans = loop_lifetimes(uses, control_flow.loop_ranges(c.steps), moving)
    length_keys = {v: c.loc[slot].key for v, slot in c.length_slots.items()}
    for key in length_keys.values():  # read by the caller after the run
        spans[key] = (spans[key][0], max(len(c.steps) - 1, spans[key][1]))
    plan = plan_memory([PlanBuffer(k, c.arena_sizes[k], *spans[k]) for k in spans])

    def offset_of(key: object, storage: str) -> int:
        return plan.offsets[key] if storage == "arena" else int(key)  # type: ignore[call-overload]

    def to_step(st: _PendingStep) -> Step:
        return Step(st.kernel, tuple(control_flow.as_ref(a, offset_of) for a in st.args),
                    st.node, st.flops)

    steps = control_flow.nest(c.steps, lambda x: to_step(x) if isinstance(x, _PendingStep)
                              else control_flow.as_ref(x, offset_of))
    times["plan"] = time.perf_counter() - t0

    c.stats.unique_kernels = len(c.kernels)
    c.stats.seconds = times
    return Program(
        name=name,
        inputs=[TensorInfo(v.name or f"input{i}", value_dtype(v, file), value_shape(v, file),
                           io_axes.get(v.name or "", ()))
                for i, v in enumerate(inputs)],
        outputs=[TensorInfo(v.name or f"output{i}", value_dtype(v, file), value_shape(v, file),
                            io_axes.get(v.name or "", ()),
                            *((computed_axis(v), plan.offsets[length_keys[v]])
                              if v in length_keys else ()))
                 for i, v in enumerate(graph.outputs)],
        steps=steps,
        arena_size=plan.arena_size,
        arena_lower_bound=plan.lower_bound,
        arena_no_reuse=plan.no_reuse,
        weights=bytes(c.weight_blob),
        kernel_object=obj,
        kernel_ll=ll,
        triple=target.triple if isinstance(target, CpuTarget) else "",
        cpu=target.cpu,
        cpu_features=list(target.runtime_features) if isinstance(target, CpuTarget) else [],
        gpu=gpu,
        allow_tf32=isinstance(target, GpuTarget) and target.allow_tf32,
        num_threads=num_threads,
        dims=list(dynamic.dims) if dynamic else [],
        stats={"nodes": c.stats.nodes, "kernels": c.stats.kernels,
               "unique_kernels": c.stats.unique_kernels, "seconds": times},
    )
