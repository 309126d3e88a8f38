"""Symbolic input dimensions: parse `--input-shape`, bind them, list what is left unbound."""

from __future__ import annotations

import onnx_ir as ir

from aotc.errors import AotcError
from aotc.frontend import irutil
from aotc.frontend.shapes import check_size

_HINT = "pass --input-shape name=d0,d1,... (one per input with a symbolic dimension)"


def parse_input_shapes(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """Parse `["x=1,3,224,224", ...]` into `{"x": (1, 3, 224, 224)}`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, dims_text = spec.rpartition("=")
        if not sep or not name:
            raise AotcError(f"bad --input-shape '{spec}': expected name=d0,d1,...",
                            hint="e.g. --input-shape input=1,3,224,224")
        try:
            dims = tuple(int(d) for d in dims_text.split(","))
        except ValueError:
            raise AotcError(f"bad --input-shape '{spec}': dimensions must be integers "
                            "separated by commas", hint="e.g. --input-shape input=1,3,224,224"
                            ) from None
        if any(d <= 0 for d in dims):
            raise AotcError(f"bad --input-shape '{spec}': dimensions must be positive")
        if name in shapes:
            raise AotcError(f"--input-shape given twice for input '{name}'")
        shapes[name] = dims
    return shapes


def _symbol(dim: int | ir.SymbolicDim) -> str:
    return "?" if isinstance(dim, ir.SymbolicDim) and dim.value is None else str(dim)


def unbound_dims(model: ir.Model) -> list[tuple[str, int, str]]:
    """(input name, axis, symbol) for every graph-input dimension that is not a number.

    An input of unknown rank is reported as axis -1 with symbol '?'.
    """
    found = []
    for value in model.graph.inputs:
        if value.shape is None:
            found.append((value.name, -1, "?"))
            continue
        for axis, dim in enumerate(value.shape.dims):
            if not isinstance(dim, int):
                found.append((value.name, axis, _symbol(dim)))
    return found


def _bind_one(value: ir.Value, dims: tuple[int, ...], symbols: dict[str, int]) -> None:
    name = value.name
    if value.shape is None:
        value.shape = ir.Shape(dims)
        return
    if len(value.shape) != len(dims):
        raise AotcError(
            f"--input-shape {name} has {len(dims)} dimensions but input '{name}' has rank "
            f"{len(value.shape)} ({_describe(value.shape)})", hint=_HINT)
    for axis, (have, want) in enumerate(zip(value.shape.dims, dims, strict=True)):
        if isinstance(have, int):
            if have != want:
                raise AotcError(
                    f"--input-shape {name}: axis {axis} is {want} but the model fixes it to "
                    f"{have} ({_describe(value.shape)})", hint=_HINT)
        elif have.value is not None:
            if symbols.setdefault(have.value, want) != want:
                raise AotcError(
                    f"dimension '{have.value}' is bound to both {symbols[have.value]} and "
                    f"{want} (input '{name}', axis {axis})", hint=_HINT)
    value.shape = ir.Shape(dims)


def _describe(shape: ir.Shape) -> str:
    return "[" + ", ".join(_symbol(d) for d in shape.dims) + "]"


def _substitute(model: ir.Model, symbols: dict[str, int]) -> None:
    """Replace named symbolic dimensions everywhere (value_info written by exporters)."""
    for graph in irutil.all_graphs(model.graph):
        for value in irutil.graph_values(graph):
            shape = value.shape
            if shape is None or shape.is_static():
                continue
            if any(isinstance(d, ir.SymbolicDim) and d.value in symbols for d in shape.dims):
                value.shape = ir.Shape([
                    symbols.get(d.value, d) if isinstance(d, ir.SymbolicDim) else d
                    for d in shape.dims])
        for value in graph.outputs:
            shape = value.shape
            if shape is not None and any(
                    isinstance(d, ir.SymbolicDim) and d.value in symbols for d in shape.dims):
                value.shape = ir.Shape([
                    symbols.get(d.value, d) if isinstance(d, ir.SymbolicDim) else d
                    for d in shape.dims])


def check_tensor_io(model: ir.Model) -> None:
    """Graph inputs and outputs must be tensors (a sequence, map or optional has no C form)."""
    for kind, values in (("input", model.graph.inputs), ("output", model.graph.outputs)):
        for v in values:
            if v.type is not None and not isinstance(v.type, ir.TensorType):
                raise AotcError(f"{kind} '{v.name}' is a {v.type}; aotc compiles models whose "
                                "inputs and outputs are tensors",
                                hint="export the model with tensor inputs and outputs")


def bind_input_shapes(model: ir.Model, shapes: dict[str, tuple[int, ...]]) -> None:
    """Fix graph-input dimensions from `shapes`; every input must end up static."""
    check_tensor_io(model)
    inputs = {v.name: v for v in model.graph.inputs}
    symbols: dict[str, int] = {}
    for name, dims in shapes.items():
        if name not in inputs:
            kind = "an initializer" if name in model.graph.initializers else "not an input"
            raise AotcError(
                f"--input-shape names '{name}', which is {kind} of the model; inputs: "
                + ", ".join(f"{n} {_describe(v.shape) if v.shape else '[?]'}"
                            for n, v in inputs.items()), hint=_HINT)
        if any(d <= 0 for d in dims):
            raise AotcError(f"--input-shape {name}: dimensions must be positive, got {dims}")
        _bind_one(inputs[name], tuple(dims), symbols)
        check_size(inputs[name], f"--input-shape {name}")
    # Inputs not named on the command line still get dimensions that share a bound symbol.
    _substitute(model, symbols)
    left = unbound_dims(model)
    if left:
        lines = "\n".join(
            f"  - input '{n}' axis {a} ('{s}')" if a >= 0 else f"  - input '{n}' (unknown rank)"
            for n, a, s in left)
        examples = " ".join(
            f"--input-shape {v.name}="
            + ",".join(str(d) if isinstance(d, int) else f"<{_symbol(d)}>"
                       for d in (v.shape.dims if v.shape else ["?"]))
            for v in model.graph.inputs if any(n == v.name for n, _, _ in left))
        raise AotcError(f"{len(left)} input dimension(s) are symbolic:\n{lines}",
                        node=None, hint=f"pass {examples}")
