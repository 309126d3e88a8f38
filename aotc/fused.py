"""Lower an `ai.aotc` node (a fused region, see aotc/passes/fused_function.py) to tensor
expressions: its body's operator definitions composed into one computation.

Each body node gets an `OpContext` whose inputs are the tensors earlier body nodes produced (or
the call node's placeholders for the function's inputs, with their constant values), so the
operator definitions are the same ones single nodes use. The element-wise results are then
substituted into their readers: the region's output becomes one compute whose expression reads
only the call's inputs and, when the region starts with Conv/Gemm/MatMul, the product stage.
So an element-wise chain is one loop nest, and a fused epilogue is a product stage plus one
element-wise output stage (the shape the GEMM template runs inside its tile loop).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir

from aotc.passes.fused_function import DOMAIN
from lowering import te
from lowering.ops import Alias, OpContext, run_op

# An intermediate read more than once stays a stage when its expression is bigger than this.
MAX_DUPLICATED_EXPR = 48
# (body node, its input tensors, their constant values, its label) -> the node's OpContext
MakeContext = Callable[[ir.Node, list[te.Tensor | None], list[np.ndarray | None], str],
                       OpContext]


def function_of(functions: Mapping[ir.OperatorIdentifier, ir.Function],
                node: ir.Node) -> ir.Function | None:
    """The model-local function an `ai.aotc` call node runs (None for any other node)."""
    if node.domain != DOMAIN:
        return None
    return functions.get((node.domain, node.op_type, node.overload))


def lower_fused(ctx: OpContext, function: ir.Function,
                make_context: MakeContext) -> list[te.Tensor | Alias]:
    """The call's outputs from its body; `ctx` is the call node's context."""
    tensors: dict[int, te.Tensor | None] = {}
    consts: dict[int, np.ndarray | None] = {}
    for v, t, c in zip(function.inputs, ctx.inputs, ctx.consts, strict=True):
        tensors[id(v)], consts[id(v)] = t, c
    results: dict[int, te.Tensor] = {}  # what the body nodes computed, in body order
    for node in function:
        label = f"{ctx.node}/{node.name or node.op_type}"
        inner = make_context(node, [None if v is None else tensors[id(v)] for v in node.inputs],
                             [None if v is None else consts[id(v)] for v in node.inputs], label)
        outs = run_op(inner)
        if len(outs) != len(node.outputs):
            raise inner.error(f"definition gave {len(outs)} outputs, the node has "
                              f"{len(node.outputs)}")
        for v, res, shape, dtype in zip(node.outputs, outs, inner.out_shapes, inner.out_dtypes,
                                        strict=True):
            if isinstance(res, Alias):
                tensors[id(v)] = inner.inputs[res.index]
                consts[id(v)] = inner.consts[res.index]
                continue
            if res.shape != shape or res.dtype != dtype:
                raise inner.error(f"output '{v.name}' computed as {res.dtype}{list(res.shape)}, "
                                  f"inferred as {dtype}{list(shape)}")
            tensors[id(v)], consts[id(v)] = res, None
            results[id(res)] = res
    outputs = [tensors[id(v)] for v in function.outputs]
    composed = _compose(list(results.values()), {id(t) for t in outputs if t is not None})
    return [_as_result(composed.get(id(t), t) if t is not None else t, ctx) for t in outputs]


def _compose(results: list[te.Tensor], outputs: set[int]) -> dict[int, te.Tensor]:
    """Substitute the element-wise results into their readers, in body order: each region
    output becomes one compute over the product stage (or the placeholders) alone.

    Returns the re-built tensors by the id of the result they replace: the outputs, and an
    intermediate that is read more than once with a large expression (kept as its own stage so
    that substitution never multiplies a big expression)."""
    elementwise = {id(t) for t in results
                   if t.op is not None and not isinstance(t.op.body, te.Reduce)}
    reads = Counter(id(ld.tensor) for t in results if t.op is not None
                    for ld in _loads(t.op.body))
    bodies: dict[int, te.Expr] = {}  # substituted element-wise bodies, over their own axes
    rebuilt: dict[int, te.Tensor] = {}

    def substituted(e: te.Expr) -> te.Expr:
        if isinstance(e, te.Load):
            idx = [substituted(i) for i in e.indices]
            t = e.tensor
            if id(t) in rebuilt:
                return te.Load(rebuilt[id(t)], idx)
            if id(t) in bodies:
                assert t.op is not None
                return te.substitute(bodies[id(t)], {
                    ax.var: i for ax, i in zip(t.op.axes, idx, strict=True)})
            if t.op is not None and t.op.inline:  # a view run_op made (float16 as float32)
                return substituted(te.substitute(t.op.body, {
                    ax.var: i for ax, i in zip(t.op.axes, idx, strict=True)}))
            return te.Load(t, idx)
        return _rebuild(e, [substituted(c) for c in te.children(e)])

    for t in results:
        if id(t) not in elementwise:
            continue
        assert t.op is not None
        body = substituted(t.op.body)
        if id(t) in outputs or (reads[id(t)] > 1 and _size(body) > MAX_DUPLICATED_EXPR):
            body = _own_index(body, [ax.var for ax in t.op.axes], t.shape)
            rebuilt[id(t)] = te.Tensor(t.shape, t.dtype, t.name,
                                       te.ComputeOp(t.op.axes, body, False, t.op.tag))
        else:
            bodies[id(t)] = body
    return rebuilt


def _own_index(e: te.Expr, axes: list[te.Var], shape: tuple[int, ...]) -> te.Expr:
    """`e` with each read of a same-shape tensor at the stage's own element written with the
    stage's own index variables: broadcasting reads a size-1 axis at constant 0, which is the
    same element, and pattern matchers (the GEMM epilogue) look for the variables."""
    if isinstance(e, te.Load):
        own = e.tensor.shape == shape and all(
            i is v or (n == 1 and isinstance(i, te.Const))
            for i, v, n in zip(e.indices, axes, shape, strict=True))
        return te.Load(e.tensor, axes) if own else e
    return _rebuild(e, [_own_index(c, axes, shape) for c in te.children(e)])


def _rebuild(e: te.Expr, kids: list[te.Expr]) -> te.Expr:
    """`e` with its children replaced (the expression kinds element-wise bodies use)."""
    if isinstance(e, (te.Var, te.Const)):
        return e
    if isinstance(e, te.Binary):
        return te.binary(e.op, kids[0], kids[1])
    if isinstance(e, te.Unary):
        return te.Unary(e.op, kids[0])
    if isinstance(e, te.Select):
        return te.select(kids[0], kids[1], kids[2])
    if isinstance(e, te.Cast):
        return te.cast(e.dtype, kids[0])
    raise te.TEError(f"cannot compose a {type(e).__name__} into a fused region")


def _loads(e: te.Expr) -> list[te.Load]:
    stack, found = [e], []
    while stack:
        x = stack.pop()
        if isinstance(x, te.Load):
            found.append(x)
        stack.extend(te.children(x))
    return found


def _size(e: te.Expr) -> int:
    stack, n = [e], 0
    while stack:
        n += 1
        stack.extend(te.children(stack.pop()))
    return n


def _as_result(t: te.Tensor | None, ctx: OpContext) -> te.Tensor | Alias:
    """A region output that is one of the call's inputs (the body only forwarded it) is an
    alias of that input, as for an Identity node."""
    assert t is not None
    for i, x in enumerate(ctx.inputs):
        if x is t:
            return Alias(i)
    return t
