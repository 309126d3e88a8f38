"""ONNX operators as tensor expressions: one table from op name to its definition.

An operator definition is a function `(OpContext) -> list[Tensor | Alias]`, one entry per node
output, registered with `@register_op("Name")`. It reads attributes and constant inputs from the
context, checks them (raising `ctx.error(...)`), and builds computes over the input placeholders.
It says nothing about loops or targets. Definitions live in `lowering/ops/<category>/<op>.py`
(or one table-driven module per family); every module under this package is imported here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from aotc.errors import AotcError
from lowering import te


@dataclass(frozen=True)
class Alias:
    """This output is a zero-copy view of input `index` (same bytes, the output's shape)."""

    index: int = 0


@dataclass
class OpContext:
    node: str
    op_type: str
    attrs: dict[str, Any]
    inputs: list[te.Tensor | None]  # placeholders; None for an omitted optional input
    consts: list[np.ndarray | None]  # values of constant inputs (initializers)
    out_shapes: list[tuple[int, ...]]
    out_dtypes: list[str]
    file: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # run-time checks of parameters the declared shapes pin (lowering/ops/pinned.py): a bool
    # scalar that must be true and what it checks; None where the caller cannot run checks
    # (a fused region's body, a GPU target), so such parameters must be constants there
    checks: list[tuple[te.Tensor, str]] | None = None
    # outputs whose length the data decides (aotc/frontend/computed_lengths.py): per output,
    # the axis whose length the run computes (None: the shape is exact); the definition puts
    # each such length, an int64 scalar, in `lengths` (lowering/ops/run_length.py)
    computed_axes: list[int | None] = field(default_factory=list)
    lengths: dict[int, te.Tensor] = field(default_factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def error(self, message: str, hint: str | None = None) -> AotcError:
        return AotcError(message, file=self.file, node=self.node, op=self.op_type, hint=hint)

    def input(self, i: int) -> te.Tensor:
        t = self.inputs[i] if i < len(self.inputs) else None
        if t is None:
            raise self.error(f"input {i} is required")
        return t

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def const(self, i: int, what: str = "") -> np.ndarray:
        """The value of constant input `i`; an error if it is computed at run time."""
        v = self.consts[i] if i < len(self.consts) else None
        if v is None:
            label = what or f"input {i}"
            raise self.error(
                f"{label} must be a constant (known at compile time)",
                hint="bind dynamic dimensions with --input-shape so shape arithmetic folds",
            )
        return v

    def optional_const(self, i: int) -> np.ndarray | None:
        if not self.has_input(i):
            return None
        return self.const(i)


OpDef = Callable[[OpContext], list[te.Tensor | Alias]]
OPS: dict[str, OpDef] = {}


def register_op(*names: str) -> Callable[[OpDef], OpDef]:
    def deco(fn: OpDef) -> OpDef:
        for n in names:
            if n in OPS:
                raise RuntimeError(f"operator {n} registered twice")
            OPS[n] = fn
        return fn

    return deco


# Operators that compute on float16/bfloat16 values themselves (te's casts round, a constant
# is stored as the type; BitCast views their bytes); run_op shows every other operator such
# values as float32.
NATIVE_HALF_OPS = frozenset({"Cast", "CastLike", "ConstantOfShape", "BitCast"})


def run_op(ctx: OpContext) -> list[te.Tensor | Alias]:
    """The definition of `ctx.op_type` applied to `ctx`. float16 and bfloat16 are computed in
    float32: the definition sees each such input as a float32 view (an inline cast, which
    loads convert anyway) and each such output as float32, and its float32 result is rounded
    to the type (its last stage casts, or a cast stage follows a reduction, which so
    accumulates in float32), as onnxruntime computes most of them. An operator inside a
    fused region rounds its result too, so fusing changes no result."""
    define = OPS[ctx.op_type]
    halves = [t.dtype for t in ctx.inputs if t is not None and t.dtype in te.HALF_DTYPES]
    halves += [d for d in ctx.out_dtypes if d in te.HALF_DTYPES]
    if not halves or ctx.op_type in NATIVE_HALF_OPS:
        return define(ctx)
    wide = replace(ctx, inputs=[_as_float32(t) for t in ctx.inputs],
                   out_dtypes=["float32" if d in te.HALF_DTYPES else d for d in ctx.out_dtypes])
    outs = define(wide)
    return [_narrowed(t, d) if isinstance(t, te.Tensor) and t.dtype != d else t
            for t, d in zip(outs, ctx.out_dtypes, strict=False)] + outs[len(ctx.out_dtypes):]


def _as_float32(t: te.Tensor | None) -> te.Tensor | None:
    if t is None or t.dtype not in te.HALF_DTYPES:
        return t
    return te.compute(t.shape, lambda *i: te.cast("float32", t[i]), name=t.name, inline=True)


def _narrowed(t: te.Tensor, dtype: str) -> te.Tensor:
    """`t` (float32) computed as `dtype`: its own stage casting, or a stage after it."""
    op = t.op
    if op is None or isinstance(op.body, te.Reduce) or t.dtype != "float32":
        return te.compute(t.shape, lambda *i: te.cast(dtype, t[i]), name=t.name + "_" + dtype)
    return te.Tensor(t.shape, dtype, t.name, te.ComputeOp(op.axes, te.cast(dtype, op.body),
                                                          op.inline, op.tag))


def _import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)


_import_all()


def supported_ops() -> set[str]:
    return set(OPS)
