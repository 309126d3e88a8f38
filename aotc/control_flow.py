"""Scan, Loop and a run-time If: their bodies compiled as kernels once, run by the executor.

The compiler's step list gets markers around a body (`LoopOpen`/`LoopClose`, `BranchOpen`/
`BranchElse`/`BranchClose`); `nest` turns the planned list into the `Program`'s `Loop` and
`Branch` items. Inside a loop, a reference may move with the iteration i (`_Loc.loop`):
- a scan input or output slice is its stacked tensor shifted by i slices (a reversed one
  starts at the last slice and walks back); on a scan axis other than the first, an input's
  slice is copied out by each iteration (large slices) or the input transposed to the front
  before the loop (small ones: SLICE_COPY_BYTES), an output is transposed after the loop;
- a carried value lives in two buffers that the iterations read and write in turn (even
  iterations read the first and write the second, odd ones the other way round), so nothing
  is copied per iteration; after the loop the final value is in the first buffer when the loop
  ran an even number of iterations, else copies on the odd exit move it there (only a loop that
  can end early needs them: a static trip count says where the value ends);
- a Loop's iteration number is a slice of a constant table 0..M-1.
Body outputs are written in place where the body computes them (the kernel's output buffer is
renamed to the slot), else copied into it by a copy kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend import irutil
from aotc.frontend.computed_lengths import computed_axis
from aotc.package.program import Branch, BufferRef, Check, Item, Loop
from lowering import te
from lowering.default_schedule import default_schedule
from lowering.lower import lower_kernel

if TYPE_CHECKING:
    from aotc.compiler import _Compiler, _Loc

CONTROL_OPS = frozenset({"Scan", "Loop", "If"})
MAX_LOOP_DEPTH = 8  # AOTC_MAX_LOOP_DEPTH in runtime_c/aotc_runtime.h
_UNBOUNDED = 1 << 62
# A slice along a scan input's inner axis of at least this many bytes is copied out by each
# iteration (read again while in cache; the arena holds one slice); smaller ones are
# transposed to the front before the loop, as a step per iteration costs more than the copy.
# Measured (C bundle, 1 thread, body add/tanh/mul): x[64,256,64] on axis 1: 1.64 ms
# transposed, 1.13 ms copied per iteration (0.78 ms on axis 0); x[8,2048,8]: 0.20 ms
# transposed, 0.33 ms copied per iteration.
SLICE_COPY_BYTES = 4096  # trip count of a Loop without one (it runs until its condition is false)


def is_control(node: ir.Node) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in CONTROL_OPS


def pinned_trip_count(node: ir.Node) -> int | None:
    """A Loop's trip count given at run time, pinned by its scan outputs: the length their
    declared shapes give (all alike), which the compiled loop runs and a check requires the
    trip count to be (pinned.py's idea, for a node the executor runs itself). None when the
    trip count is a constant or absent, or no scan output fixes it."""
    if node.op_type != "Loop" or len(node.inputs) < 2:
        return None
    m_in = node.inputs[0]
    if m_in is None or m_in.const_value is not None:
        return None
    scans = node.outputs[len(node.inputs) - 2:]
    dims = [irutil.static_dims(v.shape) for v in scans]
    if not scans or any(not d for d in dims):
        return None
    lengths = {d[0] for d in dims if d}
    return lengths.pop() if len(lengths) == 1 else None


def trip_count_check(m: te.Tensor, cond: te.Tensor | None, trip: int) -> te.Expr:
    """The run-time check of a pinned trip count `trip` over the Loop's M and its initial
    condition given at run time (a loop with scan outputs runs only where the body passes that
    through unchanged): M is `trip`, and the condition starts true, so that the loop runs
    exactly that many iterations."""
    ok = te.eq(te.cast("int64", m[(0,) * len(m.shape)]), te.const(trip, "int64"))
    if cond is not None and trip > 0:
        ok = te.logical_and(ok, te.cast("bool", cond[(0,) * len(cond.shape)]))
    return ok


def subgraphs(node: ir.Node) -> list[ir.Graph]:
    return [a.as_graph() for a in node.attributes.values() if a.type == ir.AttributeType.GRAPH]


# -- markers in the compiler's step list -----------------------------------------------------

@dataclass
class LoopOpen:
    trip_count: int
    node: str
    args: list[_Loc] = field(default_factory=list)  # [cond_in] or []
    in_place: None = None


@dataclass
class LoopClose:
    odd_exit: int  # how many kernel steps after this one run only after an odd count
    args: list[_Loc] = field(default_factory=list)  # [cond_out] or []
    in_place: None = None


@dataclass
class BranchOpen:
    node: str
    args: list[_Loc] = field(default_factory=list)  # [cond]
    in_place: None = None


@dataclass
class BranchElse:
    args: list[_Loc] = field(default_factory=list)
    in_place: None = None


@dataclass
class BranchClose:
    args: list[_Loc] = field(default_factory=list)
    in_place: None = None


@dataclass
class ValueCheck:
    """A `Check` of the bool at args[0] (the value a check kernel wrote just before)."""

    node: str
    what: str
    args: list[_Loc] = field(default_factory=list)  # [cond]
    in_place: None = None


MARKERS = (LoopOpen, LoopClose, BranchOpen, BranchElse, BranchClose, ValueCheck)


def loop_ranges(steps: list) -> list[tuple[int, int, int]]:
    """(open index, close index, depth) of every loop in a flat step list."""
    stack: list[int] = []
    out = []
    for i, st in enumerate(steps):
        if isinstance(st, LoopOpen):
            stack.append(i)
        elif isinstance(st, LoopClose):
            out.append((stack.pop(), i, len(stack)))
    return out


def nest(steps: list, ref) -> list[Item]:
    """The flat, planned step list as the Program's items; `ref(_Loc) -> BufferRef`, and
    `ref(step) -> Step` for a kernel step."""
    pos = 0
    depth = 0

    def items(stop: tuple[type, ...]) -> list[Item]:
        nonlocal pos, depth
        out: list[Item] = []
        while pos < len(steps):
            st = steps[pos]
            if isinstance(st, stop):
                return out
            pos += 1
            if isinstance(st, LoopOpen):
                depth += 1
                body = items((LoopClose,))
                depth -= 1
                close = steps[pos]
                pos += 1
                odd = [ref(s) for s in steps[pos:pos + close.odd_exit]]
                pos += close.odd_exit
                out.append(Loop(st.trip_count, body, st.node,
                                ref(st.args[0]) if st.args else None,
                                ref(close.args[0]) if close.args else None, odd, depth))
            elif isinstance(st, BranchOpen):
                then = items((BranchElse,))
                pos += 1
                otherwise = items((BranchClose,))
                pos += 1
                out.append(Branch(ref(st.args[0]), then, otherwise, st.node))
            elif isinstance(st, ValueCheck):
                out.append(Check(ref(st.args[0]), st.node, st.what))
            else:
                out.append(ref(st))
        return out

    return items(())


# -- compiling the nodes ---------------------------------------------------------------------

def emit_control(c: _Compiler, node: ir.Node) -> None:
    """Compile a Scan, Loop or If node (and its bodies) into `c`'s steps."""
    {"Scan": _Scan, "Loop": _LoopNode, "If": _If}[node.op_type](c, node).emit()


class _Body:
    """What the three share: the compiler, the node, copies and slots."""

    def __init__(self, c: _Compiler, node: ir.Node) -> None:
        self.c = c
        self.node = node
        self.label = node.name or "<unnamed>"
        self.claimed: set[object] = set()
        self.level = getattr(c, "loop_depth", 0)  # the depth of a loop this node opens

    def error(self, message: str, hint: str | None = None) -> AotcError:
        return AotcError(message, file=self.c.file, node=self.label, op=self.node.op_type,
                         hint=hint)

    def info(self, v: ir.Value) -> tuple[tuple[int, ...], str]:
        from aotc.compiler import value_dtype, value_shape

        return value_shape(v, self.c.file, self.label), value_dtype(v, self.c.file, self.label)

    def nbytes(self, v: ir.Value) -> int:
        shape, dtype = self.info(v)
        return math.prod(shape) * te.ITEMSIZE[dtype]

    def arena(self, kind: str, size: int) -> _Loc:
        from aotc.compiler import _Loc

        key = (kind, self.label, self.c.scratch_count)
        self.c.scratch_count += 1
        self.c.arena_sizes[key] = size
        return _Loc("arena", key)

    def kernel(self, src: _Loc, dst: _Loc, shape: tuple[int, ...], dtype: str, what: str,
               perm: tuple[int, ...] | None = None) -> None:
        """A step copying `src` into `dst` (`perm`: dst axis k reads src axis perm[k])."""
        if perm is None:
            self._copy(src, dst, shape, shape, dtype, what, lambda x, i: x[i])
            return
        src_shape = tuple(shape[perm.index(k)] for k in range(len(shape)))

        def read(x, i):
            at = [None] * len(i)
            for k, p in enumerate(perm):
                at[p] = i[k]
            return x[tuple(at)]
        self._copy(src, dst, src_shape, shape, dtype, what, read)

    def slice_kernel(self, src: _Loc, dst: _Loc, full: tuple[int, ...], axis: int, dtype: str,
                     what: str) -> None:
        """A step copying one slice along `axis` of the tensor of shape `full` starting at `src`
        (a reference the loop moves a row of the axis at a time) into the contiguous `dst`. The
        source is read as the flat run from the slice's first element to its last, so that the
        kernel reads nothing outside the tensor wherever the slice lies."""
        outer, inner = math.prod(full[:axis]), math.prod(full[axis + 1:])
        pitch = full[axis] * inner
        rest = full[:axis] + full[axis + 1:]

        def read(x, i):
            o = j = 0
            for k in range(axis):
                o = o * rest[k] + i[k]
            for k in range(axis, len(rest)):
                j = j * rest[k] + i[k]
            return x[(o * pitch + j,)]
        self._copy(src, dst, ((outer - 1) * pitch + inner,), rest, dtype, what, read)

    def _copy(self, src: _Loc, dst: _Loc, src_shape: tuple[int, ...], shape: tuple[int, ...],
              dtype: str, what: str, read) -> None:
        from aotc.compiler import _PendingStep

        if math.prod(shape) == 0:
            return
        x = te.placeholder(src_shape, dtype, "src")
        y = te.compute(shape, lambda *i: read(x, i), name="copy")
        lanes = self.c.target.vector_lanes_f32
        symbol = self.c.add_kernel(lower_kernel("k", [x], [y],
                                                lambda t: default_schedule(t, lanes)))
        self.c.steps.append(_PendingStep(symbol, [src, dst], f"{self.label}:{what}"))

    def constant(self, dst: _Loc, value: int, what: str) -> None:
        """A step storing the int64 `value` at `dst`."""
        from aotc.compiler import _PendingStep

        y = te.compute((), lambda: te.Const(value, "int64"), name="constant")
        lanes = self.c.target.vector_lanes_f32
        symbol = self.c.add_kernel(lower_kernel("k", [], [y],
                                                lambda t: default_schedule(t, lanes)))
        self.c.steps.append(_PendingStep(symbol, [dst], f"{self.label}:{what}"))

    def own(self, v: ir.Value) -> bool:
        """Whether `v`'s buffer is its own, written by a kernel of the body just compiled."""
        loc = self.c.loc.get(v)
        return (loc is not None and loc.storage == "arena" and loc.loop < 0
                and loc.key == ("value", v.name, id(v)) and loc.key not in self.claimed)

    def deliver(self, v: ir.Value, slot: _Loc, since: int, what: str) -> None:
        """Make the body's value `v` land in `slot`: the kernels from step `since` on that write
        its own buffer write the slot instead; otherwise a copy at the end of the body."""
        key = self.c.loc[v].key if v in self.c.loc else None
        moved = any(a.key == key and a.loop >= 0 for st in self.c.steps[since:] for a in st.args)
        if self.own(v) and not moved:  # (a slice moved by an inner loop: copied instead)
            self.claimed.add(key)
            for st in self.c.steps[since:]:
                st.args = [slot if a.storage == "arena" and a.key == key and a.loop < 0 else a
                           for a in st.args]
            for val, lc in list(self.c.loc.items()):
                if lc.storage == "arena" and lc.key == key and lc.loop < 0:
                    self.c.loc[val] = slot
            return
        shape, dtype = self.info(v)
        self.kernel(self.c.location(v), slot, shape, dtype, what)

    def compile_graph(self, graph: ir.Graph) -> None:
        for n in graph:
            lowered = self.c.prepare(n)
            if lowered is not None:
                self.c.finish(lowered)

    def run_loop(self, trip: int, body: ir.Graph, bind: list[tuple[ir.Value, _Loc]],
                 after_body, cond_in: _Loc | None = None, prologue=()) -> None:
        """Open a loop at the current depth, run the `prologue` callables (steps at the
        start of each iteration), bind the body's inputs, compile it, let `after_body(since)`
        deliver its outputs, close."""
        depth = self.level
        if depth >= MAX_LOOP_DEPTH:
            raise self.error(f"loops nested {depth + 1} deep; the runtime runs at most "
                             f"{MAX_LOOP_DEPTH}")
        self.c.steps.append(LoopOpen(trip, self.label, [cond_in] if cond_in else []))
        since = len(self.c.steps)
        for step in prologue:
            step()
        for v, loc in bind:
            self.c.loc[v] = loc
        self.c.loop_depth = depth + 1  # type: ignore[attr-defined]
        try:
            self.compile_graph(body)
            after_body(since)
        finally:
            self.c.loop_depth = depth  # type: ignore[attr-defined]

    def carried(self, init: _Loc, shape: tuple[int, ...], dtype: str, what: str,
                ) -> tuple[_Loc, _Loc, _Loc, _Loc]:
        """Two buffers for a carried value, the first holding `init`: (first, second, the body's
        input, the body's output)."""
        size = math.prod(shape) * te.ITEMSIZE[dtype]
        even, odd = self.arena("carried", size), self.arena("carried", size)
        self.kernel(init, even, shape, dtype, f"{what}:init")
        depth = self.level
        return (even, odd, replace(even, loop=depth, odd=odd.key),
                replace(odd, loop=depth, odd=even.key))

    def stacked_slice(self, stacked: _Loc, slice_bytes: int, count: int, reverse: bool) -> _Loc:
        return replace(stacked, loop=self.level, stride=-slice_bytes if reverse else slice_bytes,
                       shift=(count - 1) * slice_bytes if reverse else 0)


def _axis(value: int, rank: int, b: _Body, what: str) -> int:
    if not -rank <= value < rank:
        raise b.error(f"{what} {value} is out of range for rank {rank}")
    return value % rank


def _ints(node: ir.Node, name: str, n: int, default: int) -> list[int]:
    attr = node.attributes.get(name)
    vals = list(attr.value) if attr is not None else [default] * n
    return [int(v) for v in vals]


class _Scan(_Body):
    def emit(self) -> None:
        node, c = self.node, self.c
        body = node.attributes["body"].as_graph()
        m = int(node.attributes["num_scan_inputs"].value)
        n = len(node.inputs) - m
        k = len(node.outputs) - n
        if n < 0 or k < 0 or len(body.inputs) != n + m or len(body.outputs) != n + k:
            raise self.error("the body's inputs and outputs do not match the node's")
        scans = list(node.inputs[n:])
        if any(x is None for x in scans) or not scans:
            raise self.error("a scan input is missing")
        in_axes = _ints(node, "scan_input_axes", m, 0)
        in_dirs = _ints(node, "scan_input_directions", m, 0)
        out_axes = _ints(node, "scan_output_axes", k, 0)
        out_dirs = _ints(node, "scan_output_directions", k, 0)
        if len(in_axes) != m or len(in_dirs) != m or len(out_axes) != k or len(out_dirs) != k:
            raise self.error("scan axes or directions do not give one entry per scan input "
                             "and output")
        trips = set()
        bind: list[tuple[ir.Value, _Loc]] = []
        prologue: list = []
        for j, x in enumerate(scans):
            assert x is not None
            shape, dtype = self.info(x)
            axis = _axis(in_axes[j], len(shape), self, "scan_input_axes entry")
            trips.add(shape[axis])
            rest = shape[:axis] + shape[axis + 1:]
            item = te.ITEMSIZE[dtype]
            if axis == 0 or math.prod(rest) * item < SLICE_COPY_BYTES:
                stacked = c.location(x)
                if axis:  # the scan axis to the front, so that a slice is contiguous
                    perm = (axis, *[a for a in range(len(shape)) if a != axis])
                    stacked = self.arena("scan_in", self.nbytes(x))
                    self.kernel(c.location(x), stacked, (shape[axis], *rest), dtype,
                                f"scan_input{j}", perm)
                bind.append((body.inputs[n + j], self.stacked_slice(
                    stacked, math.prod(rest) * item, shape[axis], in_dirs[j] == 1)))
                continue
            cur = self.arena("scan_slice", math.prod(rest) * item)
            src = self.stacked_slice(c.location(x), math.prod(shape[axis + 1:]) * item,
                                     shape[axis], in_dirs[j] == 1)
            prologue.append(lambda src=src, cur=cur, shape=shape, axis=axis, dtype=dtype, j=j:
                            self.slice_kernel(src, cur, shape, axis, dtype, f"scan_input{j}"))
            bind.append((body.inputs[n + j], cur))
        if len(trips) != 1:
            raise self.error(f"the scan inputs have different lengths along their scan axes "
                             f"({sorted(trips)})")
        trip = trips.pop()
        finals = []
        for j in range(n):
            init = node.inputs[j]
            if init is None:
                raise self.error(f"state input {j} is missing")
            shape, dtype = self.info(init)
            if self.info(body.outputs[j]) != (shape, dtype):
                raise self.error(f"state {j} is {dtype}{list(shape)} on entry and "
                                 f"{self.info(body.outputs[j])[1]}"
                                 f"{list(self.info(body.outputs[j])[0])} out of the body")
            even, odd, b_in, b_out = self.carried(c.location(init), shape, dtype, f"state{j}")
            bind.append((body.inputs[j], b_in))
            finals.append((even, odd, b_out))
        stacks = []
        for j in range(k):
            y, out = body.outputs[n + j], node.outputs[n + j]
            shape, dtype = self.info(out)
            axis = _axis(out_axes[j], len(shape), self, "scan_output_axes entry")
            rest = shape[:axis] + shape[axis + 1:]
            if self.info(y) != (rest, dtype):
                raise self.error(f"scan output {j} is {dtype}{list(shape)}, its body's slice "
                                 f"{self.info(y)[1]}{list(self.info(y)[0])}")
            stacked = (c._new_arena(out) if axis == 0
                       else self.arena("scan_out", self.nbytes(out)))
            stacks.append((y, out, stacked, axis, shape, dtype))

        def after_body(since: int) -> None:
            for j, (_, _, b_out) in enumerate(finals):
                self.deliver(body.outputs[j], b_out, since, f"state{j}")
            for j, (y, _, stacked, _, _, dtype) in enumerate(stacks):
                slice_bytes = math.prod(self.info(y)[0]) * te.ITEMSIZE[dtype]
                self.deliver(y, self.stacked_slice(stacked, slice_bytes, trip, out_dirs[j] == 1),
                             since, f"scan_output{j}")
            c.steps.append(LoopClose(0))

        self.run_loop(trip, body, bind, after_body, prologue=prologue)
        for j, (even, odd, _) in enumerate(finals):
            c.loc[node.outputs[j]] = odd if trip % 2 else even
        for _, out, stacked, axis, shape, dtype in stacks:
            if axis == 0:
                c.loc[out] = stacked
                continue
            c.loc[out] = c._new_arena(out)
            perm = (*range(1, axis + 1), 0, *range(axis + 1, len(shape)))
            self.kernel(stacked, c.loc[out], shape, dtype, f"scan_output:{out.name}", perm)


def _passes_through(v: ir.Value, target: ir.Value) -> bool:
    """`v` is `target` or Identity of it."""
    while v is not target:
        p = v.producer()
        if p is None or p.op_type != "Identity" or p.domain not in ("", "ai.onnx"):
            return False
        v = p.inputs[0]
        if v is None:
            return False
    return True


def _const_bool(v: ir.Value | None) -> bool | None:
    if v is None or v.const_value is None:
        return None
    a = v.const_value.numpy()
    return bool(a.reshape(-1)[0]) if a.size == 1 else None


class _LoopNode(_Body):
    def emit(self) -> None:
        node, c = self.node, self.c
        body = node.attributes["body"].as_graph()
        n = len(node.inputs) - 2
        k = len(node.outputs) - n
        if n < 0 or k < 0 or len(body.inputs) != n + 2 or len(body.outputs) != n + 1 + k:
            raise self.error("the body's inputs and outputs do not match the node's")
        m_in, cond = node.inputs[0], node.inputs[1]
        pinned_trip = pinned_trip_count(node)
        if m_in is not None and m_in.const_value is None and pinned_trip is None:
            raise self.error(
                "the trip count is computed at run time, so the number of iterations (and the "
                "length of scan outputs) depends on the input data",
                hint="aotc compiles Loop with a constant trip count (or none, ended by its "
                     "condition); run-time shapes are not supported yet")
        if pinned_trip is not None:  # checked before the loop (compiler: `checks`)
            trip = pinned_trip
        else:
            trip = (int(m_in.const_value.numpy().reshape(-1)[0]) if m_in is not None  # type: ignore[union-attr]
                    else _UNBOUNDED)
        trip = max(trip, 0)
        iter_in, cond_in, cond_out = body.inputs[0], body.inputs[1], body.outputs[0]
        # a run-time initial condition of a pinned loop is checked true when the body passes
        # it through (`trip_count_check`)
        start_true = cond is None or _const_bool(cond) is True or (
            pinned_trip is not None and _passes_through(cond_out, cond_in))
        start_false = cond is not None and _const_bool(cond) is False
        stays_true = _const_bool(cond_out) is True or (
            start_true and _passes_through(cond_out, cond_in))
        if start_false:
            trip = 0
        early = not (start_true and stays_true) and trip > 0
        if early and k:
            raise self.error(
                "the loop's condition can end it early, so its scan outputs would be as long "
                "as the iterations it runs: a shape that depends on the input data",
                hint="aotc compiles Loop with scan outputs when its condition stays true; "
                     "run-time shapes are not supported yet")
        if trip == _UNBOUNDED and not early:
            raise self.error("the loop has neither a trip count nor a condition that ends it")
        if trip == _UNBOUNDED and iter_in.uses():
            raise self.error("the body reads the iteration number of a loop without a trip "
                             "count", hint="give the Loop a constant trip count")
        bind: list[tuple[ir.Value, _Loc]] = []
        if iter_in.uses() and trip > 0:
            from aotc.compiler import _Loc

            off = c._add_weight_bytes(np.arange(trip, dtype=np.int64))
            bind.append((iter_in, _Loc("weight", off, loop=self.level, stride=8)))
        carried: list[tuple[ir.Value, ir.Value, _Loc, _Loc, _Loc, str]] = []
        cond_loc = None
        if early:
            init = (c.location(cond) if cond is not None
                    else c._weight(ir.Value(name="true", const_value=ir.tensor(np.bool_(True)))))
            even, odd, b_in, b_out = self.carried(init, (), "bool", "cond")
            bind.append((cond_in, b_in))
            carried.append((cond_in, cond_out, even, odd, b_out, "cond"))
            cond_loc = c.location(cond) if cond is not None and not start_true else None
        elif cond_in.uses():
            bind.append((cond_in, c._weight(ir.Value(name="true",
                                                      const_value=ir.tensor(np.bool_(True))))))
        finals = []
        for j in range(n):
            init = node.inputs[2 + j]
            if init is None:
                raise self.error(f"carried input {j} is missing")
            shape, dtype = self.info(init)
            back = body.outputs[1 + j]
            if self.info(back) != (shape, dtype):
                raise self.error(
                    f"carried value {j} is {dtype}{list(shape)} on entry and "
                    f"{self.info(back)[1]}{list(self.info(back)[0])} out of the body",
                    hint="a carried value whose shape changes per iteration is not supported")
            even, odd, b_in, b_out = self.carried(c.location(init), shape, dtype, f"v{j}")
            bind.append((body.inputs[2 + j], b_in))
            carried.append((body.inputs[2 + j], back, even, odd, b_out, f"v{j}"))
            finals.append((node.outputs[j], even, odd, shape, dtype))
        stacks = []
        for j in range(k):
            y, out = body.outputs[1 + n + j], node.outputs[n + j]
            shape, dtype = self.info(out)
            if shape[:1] != (trip,) or self.info(y) != (shape[1:], dtype):
                raise self.error(f"scan output {j} is {dtype}{list(shape)}, the body's slice "
                                 f"{self.info(y)[1]}{list(self.info(y)[0])}, {trip} iterations")
            stacks.append((y, out, c._new_arena(out), dtype))

        def after_body(since: int) -> None:
            for _, back, _, _, b_out, what in carried:
                self.deliver(back, b_out, since, what)
            for j, (y, _, stacked, dtype) in enumerate(stacks):
                slice_bytes = math.prod(self.info(y)[0]) * te.ITEMSIZE[dtype]
                self.deliver(y, self.stacked_slice(stacked, slice_bytes, trip, False), since,
                             f"scan_output{j}")
            fixups = len(finals) if early else 0
            c.steps.append(LoopClose(fixups, [carried[0][4]] if early else []))
            for out, even, odd, shape, dtype in finals if early else ():
                self.kernel(odd, even, shape, dtype, f"{out.name}:odd_exit")

        if trip == 0:
            for out, even, _, _, _ in finals:
                c.loc[out] = even
            for _, out, stacked, _ in stacks:
                c.loc[out] = stacked
            return
        self.run_loop(trip, body, bind, after_body, cond_loc)
        for out, even, odd, _, _ in finals:
            c.loc[out] = odd if (not early and trip % 2) else even
        for _, out, stacked, _ in stacks:
            c.loc[out] = stacked


class _If(_Body):
    def emit(self) -> None:
        node, c = self.node, self.c
        cond = node.inputs[0]
        if cond is None:
            raise self.error("the condition is missing")
        then = node.attributes["then_branch"].as_graph()
        other = node.attributes["else_branch"].as_graph()
        for name, g in (("then_branch", then), ("else_branch", other)):
            if len(g.outputs) != len(node.outputs):
                raise self.error(f"{name} gives {len(g.outputs)} outputs, the node has "
                                 f"{len(node.outputs)}")
            for o, b in zip(node.outputs, g.outputs, strict=True):
                if not self._fits(o, b):
                    raise self.error(
                        f"output '{o.name}' is {self.info(o)[1]}{list(self.info(o)[0])}, "
                        f"{name} gives {self.info(b)[1]}{list(self.info(b)[0])}",
                        hint="branches whose outputs differ in shape compile where the output "
                             "is a graph output of undeclared shape, differing along one axis")
        slots = [c._new_arena(o) for o in node.outputs]
        lengths = self._length_slots()
        c.steps.append(BranchOpen(self.label, [c.location(cond)]))
        for g, marker in ((then, BranchElse), (other, BranchClose)):
            since = len(c.steps)
            self.compile_graph(g)
            for j, (b, slot) in enumerate(zip(g.outputs, slots, strict=True)):
                self.deliver(b, slot, since, f"output{j}")
            for j, at in lengths.items():  # the length this branch gives output j
                axis = computed_axis(node.outputs[j])
                assert axis is not None
                self.constant(at, self.info(g.outputs[j])[0][axis], f"output{j} length")
            c.steps.append(marker())
        for o, slot in zip(node.outputs, slots, strict=True):
            c.loc[o] = slot

    def _fits(self, o: ir.Value, b: ir.Value) -> bool:
        """Whether branch output `b` fits the node's output `o`: the same type and shape, or,
        for an output whose length the run computes (computed_lengths._if), the same but
        along that axis, where it is at most the bound. Either way `b` lands dense at the
        start of `o`'s buffer, the layout a computed length reads."""
        (so, to), (sb, tb) = self.info(o), self.info(b)
        axis = computed_axis(o)
        if axis is None or to != tb or len(so) != len(sb):
            return (so, to) == (sb, tb)
        return all(x == y if i != axis else y <= x
                   for i, (x, y) in enumerate(zip(so, sb, strict=True)))

    def _length_slots(self) -> dict[int, _Loc]:
        """Per output whose length the run computes, the arena slot of that length (an int64
        the caller reads after the run, as for NonZero's: compiler.length_slots)."""
        c, out = self.c, {}
        for j, o in enumerate(self.node.outputs):
            if computed_axis(o) is None:
                continue
            slot = ir.Value(name=f"{o.name}__length", shape=ir.Shape([]),
                            type=ir.TensorType(ir.DataType.INT64))
            c.length_slots[o] = slot
            c.loc[slot] = out[j] = c._new_arena(slot)
        return out


def as_ref(loc: _Loc, offset_of) -> BufferRef:
    """A planned location as a BufferRef (`offset_of(loc)`: its arena offset or index)."""
    return BufferRef(loc.storage, offset_of(loc.key, loc.storage), loc.loop,  # type: ignore[arg-type]
                     loc.stride, None if loc.odd is None else offset_of(loc.odd, "arena"),
                     loc.shift)


