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
from dataclasses import dataclass, field
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


def _import_all() -> None:
    for info in pkgutil.walk_packages(__path__, prefix=__name__ + "."):
        importlib.import_module(info.name)


_import_all()


def supported_ops() -> set[str]:
    return set(OPS)
