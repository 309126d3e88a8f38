"""The frontend, start to end: file → checked, canonical, static `onnx_ir.Model`."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from aotc.errors import AotcError
from aotc.frontend import shapes
from aotc.frontend.bind import bind_input_shapes
from aotc.frontend.computed_lengths import bound_computed_outputs
from aotc.frontend.declarations import (
    check_declared_sizes,
    check_element_types,
    check_initializer_inputs,
    check_map_types,
    check_text,
    check_variadic_inputs,
)
from aotc.frontend.fold import SHAPE_FOLD_LIMIT, fold_constants
from aotc.frontend.functions import inline_functions
from aotc.frontend.onnx_ml import expand_ml_operators
from aotc.frontend.opset import normalise_opset
from aotc.frontend.schema_functions import expand_schema_functions
from aotc.frontend.tensor_data import check_tensor_data

# onnx.checker refuses operators deprecated at the model's opset; aotc converts those.
_DEPRECATED = "is deprecated in domain_version"
# Rounds of (infer shapes → fold) before giving up on reaching static shapes.
_MAX_ROUNDS = 6


def _with_file(e: AotcError, file: str) -> AotcError:
    if e.file is not None:
        return e
    return AotcError(e.message, file=file, node=e.node, op=e.op, hint=e.hint)


def checked_proto(path: Path) -> onnx.ModelProto:
    """The model's protobuf without its external data, after the external-data checks and
    onnx.checker: what every command reads first."""
    if not path.is_file():
        raise AotcError("no such file", file=str(path))
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf's DecodeError, OSError
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise AotcError(f"not a valid ONNX model: cannot parse it ({first})", file=str(path),
                        hint="check that the file is a complete .onnx model") from None
    check_text(proto, path)
    check_tensor_data(proto, path)
    check_element_types(proto, path)
    check_map_types(proto, path)
    check_declared_sizes(proto, path)
    check_initializer_inputs(proto, path)
    check_variadic_inputs(proto, path)
    try:  # (given the proto, the checker would look for external data in the current folder)
        onnx.checker.check_model(str(path), full_check=False)
    except Exception as e:  # ValidationError
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        if _DEPRECATED not in first:  # GroupNormalization-18 & co: the opset rules convert
            raise AotcError(f"not a valid ONNX model: {first}", file=str(path),
                            hint="check that the file is a complete .onnx model") from None
    return proto


def _read(path: Path) -> ir.Model:
    proto = checked_proto(path)
    try:  # as ir.load does, without reading the file again
        model = ir.serde.deserialize_model(proto)
        ir.external_data.set_base_dir(model.graph, str(path.parent))
    except Exception as e:  # onnx_ir wraps the real error ("Error calling _deserialize_...")
        while e.__cause__ is not None and isinstance(e.__cause__, Exception):
            e = e.__cause__
        raise AotcError(f"cannot read the model: {type(e).__name__}: {e}",
                        file=str(path)) from None
    return model


def read_model(path: str | os.PathLike) -> ir.Model:
    """Load, check, drop initializer inputs, inline local functions, normalise the opset.

    Shapes may still be symbolic (this is what `aotc inspect` looks at with `unbound_dims`).
    """
    path = Path(path)
    try:
        model = _read(path)
        common_passes.NameFixPass()(model)
        common_passes.RemoveInitializersFromInputsPass()(model)
        shapes.forget_negative_dims(model)
        inline_functions(model)
        shapes.infer_shapes(model, strict=False)  # ranks and dtypes for the opset rules
        for _ in range(_MAX_ROUNDS):  # a body may call another such operator
            # (both read their inputs' types, known once the nodes before are expanded)
            if not (expand_ml_operators(model) | expand_schema_functions(model)):
                break
            inline_functions(model)
            shapes.infer_shapes(model, strict=False)
        normalise_opset(model)
        common_passes.RemoveUnusedOpsetsPass()(model)
    except AotcError as e:
        raise _with_file(e, str(path)) from None
    return model


def load_model(path: str | os.PathLike,
               input_shapes: dict[str, tuple[int, ...]] | None = None,
               require_static: bool = True) -> ir.Model:
    """The frontend: a checked, canonical-opset model where every value is static (unless
    `require_static` is False: `--emit ort` leaves what stays dynamic to onnxruntime)."""
    model = read_model(path)
    try:
        bind_input_shapes(model, dict(input_shapes or {}))
        make_static(model, require_static)
    except AotcError as e:
        raise _with_file(e, str(Path(path))) from None
    return model


def make_static(model: ir.Model, require_static: bool = True) -> None:
    """Infer shapes and fold shape arithmetic until every value is static (inputs are bound);
    an AotcError names the first value that stays dynamic when `require_static`."""
    for _ in range(_MAX_ROUNDS):
        shapes.infer_shapes(model, strict=True)
        if not fold_constants(model, max_elements=SHAPE_FOLD_LIMIT):
            break  # a fixed point: what is still symbolic stays so
    common_passes.RemoveUnusedNodesPass()(model)
    common_passes.TopologicalSortPass()(model)
    if require_static:
        bound_computed_outputs(model)
        shapes.check_static(model)
