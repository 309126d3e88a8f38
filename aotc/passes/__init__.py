"""Graph passes `ir.Model -> ir.Model`, run in PIPELINE order; each can be disabled by name.

Every pass keeps the frontend's guarantees: canonical opset, static shapes and dtypes on every
value, initializers not listed as inputs, graph input/output names unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from aotc.errors import AotcError
from aotc.passes.eliminate_dead_nodes import eliminate_dead_nodes
from aotc.passes.fold_batchnorm import fold_batchnorm
from aotc.passes.fold_constants import fold_constants
from aotc.passes.fuse_elementwise import fuse_elementwise
from aotc.passes.fuse_epilogue import fuse_epilogue
from aotc.passes.pad_in_producer import pad_in_producer
from aotc.passes.qdq_to_integer import qdq_to_integer
from aotc.passes.remove_identity import remove_identity
from aotc.passes.winograd_conv import winograd_conv

Pass = Callable[[ir.Model], ir.Model]

# Passes that pay only where aotc compiles the model's kernels for a CPU: the GPU targets'
# schedules were not measured with them, and the models `--emit onnx/ort` write keep the
# original operators (a Winograd product's weights are 4x the convolution's).
CPU_KERNEL_PASSES = frozenset({"winograd_conv"})

PIPELINE: list[tuple[str, Pass]] = [
    ("fold_constants", fold_constants),
    ("remove_identity", remove_identity),
    # DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear as one integer node
    ("qdq_to_integer", qdq_to_integer),
    ("fold_batchnorm", fold_batchnorm),
    # 3x3 convolutions as Winograd F(4x4, 3x3): transforms around a batched product
    ("winograd_conv", winograd_conv),
    ("eliminate_dead_nodes", eliminate_dead_nodes),
    # a convolution's padding written by its producer (a Pad that fuse_epilogue fuses)
    ("pad_in_producer", pad_in_producer),
    # fusion: regions become `ai.aotc` nodes whose bodies are model-local functions
    ("fuse_epilogue", fuse_epilogue),
    ("fuse_elementwise", fuse_elementwise),
]


def _count(model: ir.Model) -> tuple[int, int]:
    return sum(1 for _ in model.graph), len(model.graph.initializers)


def run_passes(model: ir.Model, disabled: Iterable[str] = (),
               log: Callable[[str], None] | None = None, cpu_kernels: bool = False) -> ir.Model:
    """Run every pass of PIPELINE not named in `disabled`; `log` gets one line per pass.
    `cpu_kernels`: the model is compiled for a CPU target (CPU_KERNEL_PASSES run too)."""
    disabled = set(disabled)
    names = [name for name, _ in PIPELINE]
    unknown = sorted(disabled - set(names))
    if unknown:
        raise AotcError(f"unknown pass(es) for --disable-pass: {', '.join(unknown)}",
                        hint=f"passes: {', '.join(names)}")
    for name, fn in PIPELINE:
        if name in CPU_KERNEL_PASSES and not cpu_kernels:
            if log:
                log(f"{name}: not run (only where the kernels are compiled for a CPU)")
            continue
        if name in disabled:
            if log:
                log(f"{name}: disabled")
            continue
        nodes, inits = _count(model)
        model = fn(model)
        if log:
            new_nodes, new_inits = _count(model)
            log(f"{name}: {nodes} → {new_nodes} nodes, {inits} → {new_inits} initializers")
    # names stay unique, as the frontend left them: what a pass names after the node it
    # replaces may repeat, and `--emit ort` finds an island's nodes by name
    common_passes.NameFixPass()(model)
    return model
