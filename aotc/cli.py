"""The `aotc` command: optimize (compile to a bundle), verify (against onnxruntime), inspect,
calibrate (measure this machine for the cost models)."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from aotc import __version__
from aotc.errors import AotcError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="aotc: compile ONNX models into C bundles that run without Python.",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, soft_wrap=True)  # messages name paths: never wrap them
out = Console()
T = TypeVar("T")

class Emit(str, Enum):
    """What `aotc optimize` writes."""

    c = "c"
    onnx = "onnx"
    ort = "ort"


InputShape = Annotated[
    list[str] | None,
    typer.Option("--input-shape", help="Bind an input's shape: name=d0,d1,... (repeatable); a dimension lo..hi is left to run time, up to hi."),
]


def _version(value: bool) -> None:
    if value:
        out.print(f"aotc {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print aotc's version and exit.")] = False,
) -> None:
    """aotc: compile ONNX models into C bundles that run without Python."""


def _fail(e: AotcError) -> None:
    err.print(f"[bold red]error:[/] {e.render()}", highlight=False, markup=True)
    raise typer.Exit(2)


@contextmanager
def _user_errors(verbose: bool) -> Iterator[None]:
    """User errors → one message, exit 2. Bugs → a short message (traceback with --verbose).

    The libraries' own warnings (onnxscript's folder notes every node it leaves) are shown
    with --verbose only: aotc reports what matters to the user itself."""
    logging.getLogger("onnxscript").setLevel(logging.INFO if verbose else logging.ERROR)
    try:
        yield
    except AotcError as e:
        _fail(e)
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    except Exception as e:  # an aotc bug: say so plainly
        if verbose:
            traceback.print_exc()
        err.print(f"[bold red]internal error:[/] {type(e).__name__}: {e}\n"
                  "  this is a bug in aotc; rerun with --verbose for the traceback",
                  highlight=False)
        raise typer.Exit(1) from None


class _Stages:
    """Times named stages and shows them on a rich progress display."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[[], T]) -> T:
        self.progress.update(self.task, description=name)
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


class _TuneBar(BarColumn):
    """A bar for the tuning task only (the stage spinner has no total)."""

    def render(self, task: Task) -> RenderableType:
        return super().render(task) if task.total is not None else Text("")


class _TuneDisplay:
    """Shows the tuner's reports (lowering.search.tuner.TuneProgress) as a bar over the time
    budget, with the kernel being tuned and its best time so far."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID | None = None

    def __call__(self, p) -> None:
        if self.task is None:
            self.task = self.progress.add_task("tuning", total=p.budget)
        self.progress.update(
            self.task, completed=min(p.elapsed, p.budget),
            description=f"tuning {p.kernel}/{p.kernels} {p.label}: {p.measured} tried, "
                        f"{p.best_seconds * 1e6:.1f} µs (default {p.default_seconds * 1e6:.1f} µs)")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command()
def optimize(
    model: Annotated[Path, typer.Argument(help="The ONNX model to compile.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Bundle folder to write.")],
    input_shape: InputShape = None,
    target: Annotated[str, typer.Option(help="cpu (this machine), cpu-avx2, cpu-avx512, aarch64, ...; GPUs: opencl, mali (OpenCL bundles), cuda or cuda:sm_XX (CUDA bundles)")] = "cpu",
    emit: Annotated[Emit, typer.Option(help="What to emit: c (a C bundle), onnx (the rewritten model, after graph passes) or ort (a model and an onnxruntime custom-op library)")] = Emit.c,
    report: Annotated[bool, typer.Option(help="With --emit ort: list the islands and every node left to onnxruntime, with the reason")] = False,
    measure_islands: Annotated[bool, typer.Option("--measure-islands", help="With --emit ort: time each island on this machine with aotc's kernels and with onnxruntime's, halve those aotc's kernels do not run at least 3% faster and time the halves (three times at most), and leave to onnxruntime what stays slower (the output then depends on this machine's timings)")] = False,
    threads: Annotated[int, typer.Option(help="Default thread count of the bundle (0 = all cores)")] = 0,
    name: Annotated[str, typer.Option(help="C prefix of the bundle's symbols")] = "model",
    weights: Annotated[str, typer.Option(help="incbin (a .bin assembled in) or c (a C array)")] = "incbin",
    disable_pass: Annotated[list[str] | None, typer.Option("--disable-pass", help="Switch a graph pass off (repeatable)")] = None,
    machine: Annotated[Path | None, typer.Option(help="Machine file (from `aotc calibrate`) whose model the schedules are chosen for, instead of the target's own")] = None,
    tune: Annotated[float, typer.Option(help="Seconds to spend measuring kernel schedules on this machine (0 = the cost model picks)")] = 0.0,
    tuning_log: Annotated[Path | None, typer.Option(help="Tuning log to reuse and extend (default when tuning: ~/.cache/aotc/tuning.jsonl)")] = None,
    allow_tf32: Annotated[bool, typer.Option("--allow-tf32", help="Let float32 MatMul/Gemm/Conv run on tensor cores in tf32 (operands rounded to 10 mantissa bits: faster, less exact) on GPU targets that have it (cuda, sm_80 and later). Off by default; no effect on CPU targets, opencl, mali or cuda:sm_7x")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Compile MODEL into a C bundle in OUTPUT (header, executor, kernels, weights, Makefile)."""
    with _user_errors(verbose):
        from aotc.driver import check_emit, make_tuner, optimize_model

        check_emit(emit.value, target)
        if emit is Emit.onnx:
            _emit_onnx(model, output, input_shape or [], name, disable_pass or [], verbose)
            return
        if measure_islands and emit is not Emit.ort:
            raise AotcError("--measure-islands goes with --emit ort")
        if emit is Emit.ort:
            _emit_ort(model, output, input_shape or [], target, threads, machine, name,
                      disable_pass or [], tune, tuning_log, report, verbose, measure_islands)
            return
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), _TuneBar(),
                            TimeElapsedColumn(), console=err, transient=True)
        with progress:
            stages = _Stages(progress)
            tuner = make_tuner(tune, tuning_log, _TuneDisplay(progress), warn=err.print)
            result = optimize_model(
                model, output, input_shapes=input_shape or [], target=target, threads=threads,
                machine=machine, name=name, weights_format=weights,
                disabled_passes=disable_pass or [],
                run_stage=stages.run, log=(err.print if verbose else None), tuner=tuner,
                allow_tf32=allow_tf32,
            )
        table = Table(title=f"aotc: {model.name} → {output}/", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("nodes (model → after passes)", f"{result.nodes_before} → {result.nodes_after}")
        table.add_row("kernels (steps / distinct)", f"{result.steps} / {result.unique_kernels}")
        table.add_row("arena", f"{_size(result.arena)} (lower bound {_size(result.arena_lower_bound)},"
                      f" no reuse {_size(result.arena_no_reuse)})")
        table.add_row("weights", _size(result.weights))
        table.add_row("bundle folder", f"{_size(result.folder_bytes)} (make adds lib{name}.a, "
                      "which holds the weights once more)")
        table.add_row("target", f"{result.target}")
        if tuner.budget > 0 or tuner.log is not None:
            table.add_row("tuning", tuner.summary())
        for stage, secs in stages.seconds.items():
            table.add_row(f"time: {stage}", f"{secs:.2f} s")
        table.add_row("time: total", f"{sum(stages.seconds.values()):.2f} s")
        out.print(table)
        out.print(f"build it with: make -C {output}")


def _emit_onnx(model: Path, output: Path, input_shape: list[str], name: str,
               disable_pass: list[str], verbose: bool) -> None:
    from aotc.driver import emit_onnx

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                        TimeElapsedColumn(), console=err, transient=True)
    with progress:
        stages = _Stages(progress)
        result = emit_onnx(model, output, input_shapes=input_shape, name=name,
                           disabled_passes=disable_pass, run_stage=stages.run,
                           log=(err.print if verbose else None))
    out.print(f"aotc: {model.name} → {result.path}: {result.nodes_before} → "
              f"{result.nodes_after} nodes ({result.fused_nodes} fused, domain ai.aotc)")


def _emit_ort(model: Path, output: Path, input_shape: list[str], target: str, threads: int,
              machine: Path | None, name: str, disable_pass: list[str], tune: float,
              tuning_log: Path | None, report: bool, verbose: bool,
              measure_islands: bool) -> None:
    from aotc.driver import emit_ort, make_tuner

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), _TuneBar(),
                        TimeElapsedColumn(), console=err, transient=True)
    with progress:
        stages = _Stages(progress)
        tuner = make_tuner(tune, tuning_log, _TuneDisplay(progress), warn=err.print)
        result = emit_ort(model, output, input_shapes=input_shape, target=target,
                          threads=threads, machine=machine, name=name,
                          disabled_passes=disable_pass, run_stage=stages.run,
                          log=(err.print if verbose else None), tuner=tuner,
                          measure_islands=measure_islands)
    nodes = sum(len(ops) for _, ops in result.islands)
    out.print(f"aotc: {model.name} → {result.model_path} + {result.library_path.name}: "
              f"{len(result.islands)} island(s) of {nodes} node(s) compiled, "
              f"{len(result.left_out)} node(s) left to onnxruntime")
    if report:
        table = Table(title="islands (custom ops of domain ai.aotc.kernels)")
        table.add_column("custom op")
        table.add_column("nodes")
        for op, ops in result.islands:
            table.add_row(op, ", ".join(ops))
        out.print(table)
        if result.left_out:
            table = Table(title="left to onnxruntime")
            for col in ("node", "operator", "why"):
                table.add_column(col)
            for row in result.left_out:
                table.add_row(*row)
            out.print(table)
    if result.timings:
        table = Table(title="islands timed on this machine (median ms per run)")
        for col in ("custom op", "with the library", "onnxruntime alone", "kept"):
            table.add_column(col)
        from aotc.ortlib.refine import kept_label

        kept = [op for op, _ in result.islands]
        for t in result.timings:
            table.add_row(t.op, f"{t.library_s * 1e3:.3g}", f"{t.onnxruntime_s * 1e3:.3g}",
                          kept_label(t, kept))
        out.print(table)
    out.print(f"use it with: so.register_custom_ops_library('{result.library_path}')")


@app.command()
def verify(
    model: Annotated[Path, typer.Argument(help="The ONNX model the bundle was compiled from.")],
    bundle: Annotated[Path, typer.Argument(help="The bundle folder.")],
    input_shape: InputShape = None,
    runs: Annotated[int, typer.Option(min=1, help="How many random input sets to try")] = 2,
    tol: Annotated[float, typer.Option(help="Allowed max abs error relative to max(1, |output|); at least 8 units of the last place of a float16/bfloat16 the model computes in, or of tf32 in a bundle compiled with --allow-tf32")] = 1e-4,
    threads: Annotated[int, typer.Option(help="Threads for run_model (0 = bundle default)")] = 0,
    cc: Annotated[str, typer.Option(help="C compiler for building the bundle")] = "cc",
    runner: Annotated[str | None, typer.Option(help="Run run_model under this command, e.g. 'qemu-aarch64 -L /usr/aarch64-linux-gnu'")] = None,
    seed: int = 0,
    length: Annotated[int | None, typer.Option(help="Run a bundle with a run-time dimension at this length (default: its maximum)")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Build BUNDLE, run it on random inputs, and compare its outputs with onnxruntime."""
    with _user_errors(verbose):
        from aotc.verify import verify_bundle

        reports = verify_bundle(model, bundle, input_shapes=input_shape or [], runs=runs,
                                tol=tol, threads=threads, cc=cc,
                                runner=runner.split() if runner else None, seed=seed,
                                length=length)
        table = Table(title=f"aotc verify: {bundle}/ vs onnxruntime")
        for col in ("run", "output", "max abs error", "scale", "result"):
            table.add_column(col)
        ok = True
        for r in reports:
            ok &= r.ok
            table.add_row(str(r.run), r.output, f"{r.max_abs_error:.3g}", f"{r.scale:.3g}",
                          "[green]ok[/]" if r.ok else "[red]MISMATCH[/]")
        out.print(table)
        if not ok:
            err.print("[bold red]verify failed:[/] outputs differ from onnxruntime")
            raise typer.Exit(1)
        out.print("[green]all outputs match onnxruntime[/]")


@app.command()
def inspect(
    model: Annotated[Path, typer.Argument(help="The ONNX model to describe.")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Print a model's inputs, outputs, operator histogram, unsupported ops, unbound dims."""
    with _user_errors(verbose):
        from aotc.inspect import describe_model

        d = describe_model(model)
        out.print(Text(str(model), style="bold"),
                  Text(f" opset {d.opset}, ir_version {d.ir_version}, {d.num_nodes} nodes, "
                       f"producer {d.producer or '?'}"))
        io = Table(title="inputs and outputs")
        for col in ("kind", "name", "dtype", "shape"):
            io.add_column(col)
        for kind, items in (("input", d.inputs), ("output", d.outputs)):
            for n, dt, shape in items:
                io.add_row(kind, Text(n), dt, Text("[" + ", ".join(map(str, shape)) + "]"))
        out.print(io)
        hist = Table(title="operators")
        hist.add_column("operator")
        hist.add_column("count", justify="right")
        hist.add_column("supported")
        for op, count in d.op_histogram:
            hist.add_row(Text(op), str(count),
                         "yes" if op not in d.unsupported_ops else Text("no", style="red"))
        out.print(hist)
        if d.unsupported:
            out.print("[red]unsupported nodes:[/]")
            for node, op in d.unsupported:
                out.print(Text(f"  {node} ({op})"))
        if d.unbound:
            out.print("[yellow]unbound dimensions[/] (bind with --input-shape name=d0,d1,...):")
            for name, axis, sym in d.unbound:
                out.print(Text(f"  {name} axis {axis}: '{sym}'"))
        if d.not_tensors:
            out.print("[red]inputs and outputs that are not tensors[/] (aotc compiles tensors "
                      "only):")
            for name, kind in d.not_tensors:
                out.print(Text(f"  {name}: {kind}"))
        if not d.unsupported and not d.unbound and not d.not_tensors:
            out.print("[green]ready to compile[/]")


@app.command()
def calibrate(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the machine file here instead of the user's cache (then `aotc optimize --machine FILE` reads it)")] = None,
    seconds: Annotated[float, typer.Option(min=0.02, help="Seconds per probe run")] = 0.2,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Measure this machine (FMA peak, bandwidth per cache level, each GEMM micro-kernel) into
    the machine model `--target cpu` compiles for."""
    with _user_errors(verbose):
        from targets.cpu.calibrate import calibrate as measure
        from targets.cpu.calibrate import machine_file_path
        from targets.cpu.target import host_target

        host = host_target()
        table = Table(title=f"aotc calibrate: {host.cpu}, {host.machine.cores} cores")
        table.add_column("measured")
        table.add_column("figure")
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err,
                      transient=True) as progress:
            task = progress.add_task("measuring")

            def report(what: str, figure: str) -> None:
                table.add_row(what, figure)
                progress.update(task, description=f"measured {what}")

            machine = measure(host, report, seconds=seconds)
        path = output or machine_file_path(host.cpu)
        try:
            machine.save(path)
        except OSError as e:
            raise AotcError(f"cannot write the machine file: {e.strerror or e}",
                            file=str(path)) from None
        out.print(table)
        out.print(f"machine file: {path}" + ("" if output else
                                            " (read by --target cpu from now on)"))


def main() -> None:
    try:
        app()
    except SystemExit as e:
        # click reports bad usage with exit status 2 already; keep it
        sys.exit(e.code)


if __name__ == "__main__":
    main()
