"""`aotc optimize` as a function: model file → checked, rewritten, compiled, packaged bundle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import onnx
import onnx_ir as ir

from aotc.errors import AotcError
from aotc.package.program import Program, RunTimeDim

if TYPE_CHECKING:
    from aotc.frontend.dynamic import DynamicShapes
    from aotc.ortlib.measure import IslandTiming
    from aotc.ortlib.partition import Island
    from lowering.search.tuner import TuneProgress, Tuner
    from targets.cpu.target import CpuTarget
    from targets.gpu.target import GpuTarget

T = TypeVar("T")
StageRunner = Callable[[str, Callable[[], Any]], Any]


@dataclass
class OptimizeResult:
    program: Program
    nodes_before: int
    nodes_after: int
    steps: int
    unique_kernels: int
    arena: int
    arena_lower_bound: int
    arena_no_reuse: int
    weights: int
    target: str
    folder_bytes: int  # what the bundle folder holds before it is built


def _plain_stage(_name: str, fn: Callable[[], T]) -> T:
    return fn()


def count_nodes(path: Path) -> int:
    try:
        return len(onnx.load(str(path), load_external_data=False).graph.node)
    except Exception:  # the frontend reports malformed files properly
        return 0


def rewrite_file(
    model: Path,
    *,
    input_shapes: list[str] | dict[str, tuple[int, ...]],
    disabled_passes: list[str] | None = None,
    run_stage: StageRunner = _plain_stage,
    log: Callable[[str], None] | None = None,
    require_static: bool = True,
    cpu_kernels: bool = False,
) -> ir.Model:
    """Frontend and graph passes: the model as the compiler reads it (still valid ONNX).
    `cpu_kernels`: compiled for a CPU target (passes.CPU_KERNEL_PASSES run)."""
    from aotc.frontend import load_model, parse_input_shapes
    from aotc.passes import PIPELINE, run_passes

    model = Path(model)
    if not model.is_file():
        raise AotcError("no such file", file=str(model))
    known = [n for n, _ in PIPELINE]
    for p in disabled_passes or []:
        if p not in known:
            raise AotcError(f"unknown pass '{p}'", hint=f"passes: {', '.join(known)}")
    shapes = (parse_input_shapes(input_shapes) if isinstance(input_shapes, list)
              else dict(input_shapes))
    graph = run_stage("load + infer shapes", lambda: load_model(model, shapes, require_static))
    return run_stage("graph passes", lambda: run_passes(graph, disabled_passes or [], log,
                                                        cpu_kernels))


@dataclass
class EmitOnnxResult:
    path: Path
    nodes_before: int
    nodes_after: int
    fused_nodes: int


# A rewritten model whose initializers hold more bytes than this keeps them in a weights file
# beside it (NAME.onnx.data); a smaller one is written as one self-contained file.
EMBED_WEIGHTS_LIMIT = 64 << 20


def _initializer_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
               if v.const_value is not None)


def _load_external_tensors(model: ir.Model) -> None:
    """Initializers still read from the input's weights file are loaded into memory, so that
    a model saved elsewhere holds them (ir.save keeps an external tensor's old reference)."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor):
                value.const_value = ir.tensor(value.const_value.numpy(), name=value.name)


def emit_onnx(
    model: Path,
    output: Path,
    *,
    input_shapes: list[str] | dict[str, tuple[int, ...]],
    name: str = "model",
    disabled_passes: list[str] | None = None,
    run_stage: StageRunner = _plain_stage,
    log: Callable[[str], None] | None = None,
) -> EmitOnnxResult:
    """`aotc optimize --emit onnx`: the rewritten model (after passes, before lowering) as
    OUTPUT/NAME.onnx; fused regions are `ai.aotc` nodes with model-local function bodies. Its
    weights are embedded, or written to OUTPUT/NAME.onnx.data when they are large."""
    from aotc import __version__
    from aotc.package.output_folder import check_output_folder, write_folder
    from aotc.package.validate import check_name
    from aotc.passes.fused_function import DOMAIN

    check_name(name)
    model, output = Path(model), Path(output)
    check_output_folder(output, sources=[model])
    nodes_before = count_nodes(model)
    graph = rewrite_file(model, input_shapes=input_shapes, disabled_passes=disabled_passes,
                         run_stage=run_stage, log=log)
    external = _initializer_bytes(graph) > EMBED_WEIGHTS_LIMIT
    data = f"{name}.onnx.data" if external else None
    if not external:
        _load_external_tensors(graph)

    def fill(tmp: Path) -> None:
        ir.save(graph, tmp / f"{name}.onnx", external_data=data, size_threshold_bytes=1024)

    try:
        run_stage("write model", lambda: write_folder(
            output, fill, {"aotc_version": __version__, "kind": "onnx", "name": name,
                           "model": f"{name}.onnx", "weights": data}))
    except OSError as e:
        raise AotcError(f"cannot write the model: {e.strerror or e}", file=str(output)) from None
    nodes = list(graph.graph)
    return EmitOnnxResult(path=output / f"{name}.onnx", nodes_before=nodes_before,
                          nodes_after=len(nodes),
                          fused_nodes=sum(1 for n in nodes if n.domain == DOMAIN))


def check_emit(emit: str, target: str) -> None:
    """GPU targets write C bundles only (for now): `--emit onnx`/`ort` with one is an error."""
    from targets.gpu.target import is_gpu_target

    if emit != "c" and is_gpu_target(target):
        raise AotcError(f"--emit {emit} does not take the GPU target '{target}': GPU targets "
                        "write C bundles", hint="use --emit c, or a CPU target")


def resolve_target(target: str, machine: Path | None,
                   allow_tf32: bool = False) -> CpuTarget | GpuTarget:
    """The named target (a GPU's: `opencl`, `mali`, `cuda`, `cuda:sm_XX`), on the machine model
    of `machine` (a CPU's calibration file) if given. `allow_tf32` (`--allow-tf32`): a GPU
    target's float32 products may round their operands to tf32 on tensor cores where its
    machine has the instruction; CPU targets have none and ignore it."""
    from targets.cpu.target import get_target
    from targets.gpu.target import gpu_target, is_gpu_target

    if is_gpu_target(target):
        if machine is not None:
            raise AotcError(f"--machine describes a CPU; the {target} target carries its own "
                            "GPU model", hint="leave --machine out")
        return replace(gpu_target(target), allow_tf32=allow_tf32)
    tgt = get_target(target)
    if machine is not None:
        from targets.cpu.calibrate import load_machine_file

        tgt = tgt.with_machine(load_machine_file(machine))
    return tgt


def compile_file(
    model: Path,
    *,
    input_shapes: list[str] | dict[str, tuple[int, ...]],
    target: str = "cpu",
    threads: int = 0,
    machine: Path | None = None,
    name: str = "model",
    disabled_passes: list[str] | None = None,
    run_stage: StageRunner = _plain_stage,
    log: Callable[[str], None] | None = None,
    tuner: Tuner | None = None,
    allow_tf32: bool = False,
) -> tuple[Program, int]:
    """Frontend, passes and compiler; returns the Program and the node count after passes.
    `allow_tf32`: see `resolve_target`."""
    from aotc.compiler import compile_model
    from aotc.package.validate import check_name
    from targets.gpu.target import is_gpu_target

    model = Path(model)
    if not model.is_file():
        raise AotcError("no such file", file=str(model))
    check_name(name)
    if threads < 0:
        raise AotcError(f"--threads must be ≥ 0, got {threads}")
    tgt = resolve_target(target, machine, allow_tf32)
    dynamic = None
    shapes, ranges = _split_ranges(input_shapes)
    if ranges:
        graph, dynamic = _rewrite_dynamic(model, shapes, ranges, disabled_passes, run_stage, log)
    else:
        graph = rewrite_file(model, input_shapes=shapes, disabled_passes=disabled_passes,
                             run_stage=run_stage, log=log,
                             cpu_kernels=not is_gpu_target(target))
    nodes_after = len(list(graph.graph))
    program = run_stage("lower + codegen", lambda: compile_model(
        graph, tgt, name=name, num_threads=threads, file=str(model), tuner=tuner,
        dynamic=dynamic))
    return program, nodes_after


def _split_ranges(input_shapes: list[str] | dict[str, tuple[int, ...]]
                  ) -> tuple[dict[str, tuple[int, ...]], dict[tuple[str, int], tuple[int, int]]]:
    """`--input-shape` values: the shapes at the bound and the ranges (aotc/frontend/dynamic.py;
    a dict is a binding without ranges)."""
    if not isinstance(input_shapes, list):
        return dict(input_shapes), {}
    from aotc.frontend.dynamic import parse_input_ranges

    return parse_input_ranges(input_shapes)


def _rewrite_dynamic(model: Path, shapes: dict[str, tuple[int, ...]],
                     ranges: dict[tuple[str, int], tuple[int, int]],
                     disabled_passes: list[str] | None, run_stage: StageRunner,
                     log: Callable[[str], None] | None) -> tuple[ir.Model, DynamicShapes]:
    """Frontend and passes for a model with a run-time dimension (`rewrite_at_lengths` on the
    model file)."""
    from aotc.frontend import dynamic as dyn
    from aotc.frontend import load_model

    dim = dyn.run_time_dim(ranges)
    try:
        return rewrite_at_lengths(
            lambda n: load_model(model, dyn.at_length(shapes, ranges, n)), dim,
            disabled_passes, run_stage, log)
    except AotcError as e:
        raise e if e.file is not None else AotcError(
            e.message, file=str(model), node=e.node, op=e.op, hint=e.hint) from None


def rewrite_at_lengths(load: Callable[[int], ir.Model], dim: RunTimeDim,
                       disabled_passes: list[str] | None, run_stage: StageRunner = _plain_stage,
                       log: Callable[[str], None] | None = None
                       ) -> tuple[ir.Model, DynamicShapes]:
    """The graph at the bound after the passes and which value axes follow the dimension
    (aotc/frontend/dynamic.py), found by comparing it with the graph one shorter (`load(n)`: the
    frontend's model at length n); refuses what cannot run it."""
    from aotc.frontend import dynamic as dyn
    from aotc.passes import run_passes

    at_hi = run_stage("load + infer shapes", lambda: load(dim.hi))
    at_lo = run_stage("load + infer shapes (bound - 1)", lambda: load(dim.hi - 1))
    dyn.check_constants(at_hi, at_lo)
    dyn.check_nodes(at_hi, dyn.follow_axes(at_hi, at_lo, dim), dim)
    at_hi = run_stage("graph passes", lambda: run_passes(at_hi, disabled_passes or [], log))
    at_lo = run_passes(at_lo, disabled_passes or [])
    axes = dyn.follow_axes(at_hi, at_lo, dim)
    return at_hi, dyn.DynamicShapes([dim], axes)


def make_tuner(tune: float, tuning_log: Path | None,
               progress: Callable[[TuneProgress], None] | None = None,
               warn: Callable[[str], None] | None = None) -> Tuner:
    """The tuner of `--tune SECONDS --tuning-log FILE`: it measures only with a budget; the log
    is read when tuning or when named, written when tuning (default: the user's cache)."""
    from lowering.search.tuner import Tuner
    from lowering.search.tuning_log import default_log_path

    if tuning_log is None and tune > 0:
        tuning_log = default_log_path()
    return Tuner(tune, tuning_log, progress, warn=warn)


def optimize_model(
    model: Path,
    output: Path,
    *,
    input_shapes: list[str] | dict[str, tuple[int, ...]],
    target: str = "cpu",
    threads: int = 0,
    machine: Path | None = None,
    name: str = "model",
    weights_format: str = "incbin",
    disabled_passes: list[str] | None = None,
    run_stage: StageRunner = _plain_stage,
    log: Callable[[str], None] | None = None,
    tuner: Tuner | None = None,
    allow_tf32: bool = False,
) -> OptimizeResult:
    from aotc.package.bundle import write_bundle
    from aotc.package.output_folder import check_output_folder
    from aotc.package.weights import WEIGHTS_FORMATS

    model, output = Path(model), Path(output)
    if weights_format not in WEIGHTS_FORMATS:
        raise AotcError(f"unknown weights format '{weights_format}'",
                        hint=f"choose one of: {', '.join(WEIGHTS_FORMATS)}")
    check_output_folder(output, sources=[model])
    nodes_before = count_nodes(model)
    program, nodes_after = compile_file(
        model, input_shapes=input_shapes, target=target, threads=threads, machine=machine,
        name=name, disabled_passes=disabled_passes, run_stage=run_stage, log=log, tuner=tuner,
        allow_tf32=allow_tf32)
    try:
        run_stage("write bundle", lambda: write_bundle(program, output, weights_format))
    except OSError as e:
        raise AotcError(f"cannot write the bundle: {e.strerror or e}", file=str(output)) from None
    return OptimizeResult(
        program=program,
        nodes_before=nodes_before,
        nodes_after=nodes_after,
        steps=len(program.steps),
        unique_kernels=int(program.stats.get("unique_kernels", 0)),  # type: ignore[call-overload]
        arena=program.arena_size,
        arena_lower_bound=program.arena_lower_bound,
        arena_no_reuse=program.arena_no_reuse,
        weights=len(program.weights),
        target=(f"{program.triple} ({program.cpu})" if program.gpu is None
                else f"{program.gpu.dialect} ({program.cpu})"),
        folder_bytes=sum(p.stat().st_size for p in output.iterdir() if p.is_file()),
    )


@dataclass
class EmitOrtResult:
    model_path: Path
    library_path: Path
    islands: list[tuple[str, list[str]]]  # (custom op, the operators of its nodes)
    left_out: list[tuple[str, str, str]]  # (node, operator, why onnxruntime runs it)
    # with measure_islands: every island's median seconds with the library and without it
    timings: list[IslandTiming] = field(default_factory=list)


def emit_ort(
    model: Path,
    output: Path,
    *,
    input_shapes: list[str] | dict[str, tuple[int, ...]],
    target: str = "cpu",
    threads: int = 0,
    machine: Path | None = None,
    name: str = "model",
    disabled_passes: list[str] | None = None,
    run_stage: StageRunner = _plain_stage,
    log: Callable[[str], None] | None = None,
    tuner: Tuner | None = None,
    measure_islands: bool = False,
) -> EmitOrtResult:
    """`aotc optimize --emit ort`: OUTPUT/NAME.onnx, where every island of compilable nodes is
    one `ai.aotc.kernels` node (its nodes kept as a model-local function), and
    OUTPUT/libaotc_NAME.so, which runs each island's compiled program as an onnxruntime custom
    op (register it with SessionOptions.register_custom_ops_library). The weights only the
    islands read live in the library; OUTPUT/NAME.fallback.data holds them for running the model
    without it. `measure_islands`: each island is timed on this machine with the library and
    without it; a slower one is halved and its parts timed, and what stays slower is left to
    onnxruntime (aotc/ortlib/measure.py, refine.py)."""
    import numpy as np

    from aotc import __version__
    from aotc.compiler import compile_model
    from aotc.frontend.irutil import all_graphs
    from aotc.ortlib.library import IslandBuild, build_library, library_files, library_name
    from aotc.ortlib.partition import find_islands
    from aotc.ortlib.rewrite import (
        fallback_data_name,
        island_model,
        island_op,
        model_with_islands,
    )
    from aotc.package.output_folder import check_output_folder, write_folder
    from aotc.package.validate import check_name
    from aotc.passes import run_passes
    from targets.cpu.target import CpuTarget

    check_name(name)
    model, output = Path(model), Path(output)
    check_output_folder(output, sources=[model])
    if threads < 0:
        raise AotcError(f"--threads must be ≥ 0, got {threads}")
    check_emit("ort", target)
    tgt = resolve_target(target, machine)
    assert isinstance(tgt, CpuTarget)
    if not tgt.runs_here():
        raise AotcError(f"--emit ort builds a library for this machine; target {tgt.name} "
                        "does not run here", hint="use --target cpu")
    shapes, ranges = _split_ranges(input_shapes)
    if measure_islands and ranges:
        raise AotcError("--measure-islands takes static input shapes, not a length range")

    def read_weights_in(graph: ir.Model) -> ir.Model:
        # the islands are compiled from a serialized copy, which cannot find a relative
        # external data file: read the weights in first (copies: the frontend may hold views
        # of the file)
        for g in all_graphs(graph.graph):
            for v in g.initializers.values():
                if isinstance(v.const_value, ir.ExternalTensor):
                    v.const_value = ir.Tensor(np.array(v.const_value.numpy()), name=v.name)
        return graph

    def compile_island(sub: ir.Model, isl: Island, dynamic: DynamicShapes | None) -> Program:
        return run_stage("lower + codegen", lambda: compile_model(
            sub, tgt, name=island_op(name, isl), num_threads=threads, file=str(model),
            tuner=tuner, dynamic=dynamic))

    if ranges:  # the model keeps the dimension, the islands are compiled for the bound
        from aotc.ortlib import ranges as ranged

        passes = disabled_passes or []
        found = ranged.load_ranged(model, shapes, ranges)
        read_weights_in(found.graph)
        serialized, islands, left, programs = ranged.compile_islands(
            model, found, compile_island,
            lambda load, dim: rewrite_at_lengths(load, dim, passes, run_stage, log),
            lambda graph: run_passes(graph, passes, log))
    else:
        graph = read_weights_in(rewrite_file(
            model, input_shapes=shapes, disabled_passes=disabled_passes, run_stage=run_stage,
            log=log, require_static=False))
        islands, left = find_islands(graph)
        serialized = ir.serde.serialize_model(graph)
        programs = [compile_island(island_model(serialized, isl), isl, None) for isl in islands]

    def builds(islands: list[Island], programs: list[Program]) -> list[IslandBuild]:
        return [IslandBuild(island_op(name, isl), program,
                            [int(w.dtype) for w in isl.shared_weights])
                for isl, program in zip(islands, programs, strict=True)]

    def filler(ops: list[IslandBuild], rewritten: onnx.ModelProto,
               fallback_data: bytes) -> Callable[[Path], None]:
        def fill(tmp: Path) -> None:
            for fname, data in library_files(name, ops).items():
                (tmp / fname).write_bytes(data)
            onnx.save(rewritten, str(tmp / f"{name}.onnx"))
            if fallback_data:
                (tmp / fallback_data_name(name)).write_bytes(fallback_data)
            build_library(tmp, name, ops)
        return fill

    ops = builds(islands, programs)
    # the opset the user's model declared, which the installed onnxruntime runs
    opset = next((o.version for o in onnx.load(str(model), load_external_data=False).opset_import
                  if o.domain in ("", "ai.onnx")), None)
    rewritten, fallback_data = model_with_islands(serialized, islands, name, opset)
    timings: list[IslandTiming] = []
    if measure_islands and islands:
        from aotc.ortlib.refine import paying_islands

        def measure(islands: list[Island], programs: list[Program],
                    todo: list[int]) -> list[IslandTiming]:
            # the model holds every island, the library only those measured
            shown, data = model_with_islands(serialized, islands, name, opset)
            timed = [islands[k] for k in todo]
            ops = builds(timed, [programs[k] for k in todo])
            return _time_islands(name, threads, timed, filler(ops, shown, data), shown)

        def measure_model(islands: list[Island], programs: list[Program]) -> IslandTiming:
            shown, data = model_with_islands(serialized, islands, name, opset)
            return _time_model(name, threads, filler(builds(islands, programs), shown, data))

        islands, left, programs, timings = run_stage("measure islands", lambda: paying_islands(
            serialized, islands, left, programs, measure, measure_model,
            lambda sub, isl: compile_island(sub, isl, None)))
        ops = builds(islands, programs)
        rewritten, fallback_data = model_with_islands(serialized, islands, name, opset)
    fill = filler(ops, rewritten, fallback_data)

    try:
        run_stage("write + build library", lambda: write_folder(
            output, fill, {"aotc_version": __version__, "kind": "ort", "name": name,
                           "model": f"{name}.onnx", "library": library_name(name)}))
    except OSError as e:
        raise AotcError(f"cannot write the library: {e.strerror or e}", file=str(output)) \
            from None
    return EmitOrtResult(
        model_path=output / f"{name}.onnx", library_path=output / library_name(name),
        islands=[(b.op, [n.op_type for n in isl.nodes]) for b, isl in zip(ops, islands,
                                                                          strict=True)],
        left_out=[(lo.node, lo.op, lo.reason) for lo in left], timings=timings)


def _time_model(name: str, threads: int, fill: Callable[[Path], None]) -> IslandTiming:
    """`measure.time_model` on the model and library `fill` writes in a scratch folder."""
    import tempfile

    from aotc.ortlib.library import library_name
    from aotc.ortlib.measure import time_model

    with tempfile.TemporaryDirectory(prefix="aotc-measure-") as tmp:
        folder = Path(tmp)
        fill(folder)
        return time_model(folder / f"{name}.onnx", folder / library_name(name), threads)


def _time_islands(name: str, threads: int, islands: list[Island],
                  fill: Callable[[Path], None], rewritten: onnx.ModelProto) -> list[IslandTiming]:
    """`measure.time_islands` on a library built by `fill` in a scratch folder."""
    import tempfile

    from aotc.ortlib.library import library_name
    from aotc.ortlib.measure import time_islands

    with tempfile.TemporaryDirectory(prefix="aotc-measure-") as tmp:
        folder = Path(tmp)
        fill(folder)
        return time_islands(folder, folder / library_name(name), rewritten, islands, name,
                            threads)
