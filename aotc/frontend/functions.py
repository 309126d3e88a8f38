"""Inline model-local functions (the PyTorch dynamo exporter writes them)."""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from aotc.errors import AotcError
from aotc.frontend.irutil import all_graphs


def _pin_versions(model: ir.Model) -> None:
    """Make each function's opset imports agree with the model's (the inliner requires it).

    Nodes of a function written against another opset version keep it as their own
    `version`, which the opset normalisation reads.
    """
    for function in model.functions.values():
        for domain, version in list(function.opset_imports.items()):
            model_version = model.opset_imports.get(domain)
            if model_version is None or model_version == version:
                continue
            for graph in all_graphs(function.graph):
                for node in graph:
                    if node.domain == domain and node.version is None:
                        node.version = version
            function.opset_imports[domain] = model_version


def inline_functions(model: ir.Model) -> None:
    """Inline every call to a model-local function, then drop the functions."""
    if not model.functions:
        return
    _pin_versions(model)
    try:
        common_passes.InlinePass()(model)
    except Exception as e:  # PreconditionError (recursion) or a malformed function
        raise AotcError(f"cannot inline the model's local functions: {e}") from None
    common_passes.RemoveUnusedFunctionsPass()(model)
