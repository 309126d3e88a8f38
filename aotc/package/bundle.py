"""The bundle writer: a Program becomes a folder of C sources, objects and build files, written
whole and moved into place only when complete (aotc.package.output_folder)."""

from __future__ import annotations

from pathlib import Path

from aotc import __version__
from aotc.errors import AotcError
from aotc.package import gpu_source, templates
from aotc.package.c_header import render_header
from aotc.package.c_source import render_linked_source, render_source
from aotc.package.output_folder import MANIFEST, write_folder
from aotc.package.program import Program, TensorInfo
from aotc.package.validate import check_program
from aotc.package.weights import WEIGHTS_FORMATS, weights_files

__all__ = ["MANIFEST", "bundle_files", "manifest", "write_bundle"]


def _tensor_json(t: TensorInfo) -> dict[str, object]:
    out: dict[str, object] = {"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                              "bytes": t.nbytes}
    if t.dyn_axes:  # the axes that follow the run-time dimension (shape: at its maximum)
        out["dim_axes"] = list(t.dyn_axes)
    if t.computed_axis >= 0:  # the axis whose length the data decides (shape: its bound)
        out["computed_axis"] = t.computed_axis
    return out


def manifest(program: Program, weights_format: str) -> dict[str, object]:
    """What tools (build helpers, `aotc inspect`) read about a bundle without parsing C."""
    gpu = ({"gpu": {"api": program.gpu.dialect, "arch": program.cpu},
            "allow_tf32": program.allow_tf32, "mma": list(program.gpu.mma)}
           if program.gpu is not None else {})
    return {
        "aotc_version": __version__,
        "kind": "c",
        "name": program.name,
        "triple": program.triple,
        "cpu": program.cpu,
        "cpu_features": list(program.cpu_features),
        "num_threads": program.num_threads,
        "inputs": [_tensor_json(t) for t in program.inputs],
        "outputs": [_tensor_json(t) for t in program.outputs],
        **({"dims": [{"name": d.name, "min": d.lo, "max": d.hi} for d in program.dims]}
           if program.dims else {}),
        "steps": len(program.steps),
        "arena_size": program.arena_size,
        "arena_lower_bound": program.arena_lower_bound,
        "arena_no_reuse": program.arena_no_reuse,
        "weights_bytes": len(program.weights),
        "weights_format": weights_format,
        "stats": program.stats,
        # a GPU bundle: its device API and what the kernels were compiled for, whether
        # float32 products were allowed onto tf32 tensor cores (--allow-tf32) and the matrix
        # instructions the kernels call
        **gpu,
    }


def bundle_files(program: Program, weights_format: str = "incbin") -> dict[str, bytes]:
    """File name -> contents of the bundle folder (the manifest is added when it is written)."""
    if weights_format not in WEIGHTS_FORMATS:
        raise AotcError(
            f"unknown weights format '{weights_format}'",
            hint=f"choose one of: {', '.join(WEIGHTS_FORMATS)}",
        )
    check_program(program)
    n = program.name
    if program.gpu is None:
        code = {
            f"{n}.c": render_source(program).encode(),
            f"{n}_linked.c": render_linked_source(program).encode(),
            f"{n}_kernels.o": bytes(program.kernel_object),
            f"{n}_kernels.ll": program.kernel_ll.encode(),
        }
    else:
        code = {
            f"{n}.c": gpu_source.render_gpu_source(program).encode(),
            f"{n}_linked.c": gpu_source.render_gpu_linked_source(program).encode(),
            **gpu_source.code_files(program),
        }
    files: dict[str, bytes] = {
        f"{n}.h": render_header(program).encode(),
        **code,
        **weights_files(n, bytes(program.weights), weights_format),
        **templates.runtime_sources(program),
        "run_model.c": templates.render_run_model(program, weights_format).encode(),
        "Makefile": templates.render_makefile(program, weights_format).encode(),
        "CMakeLists.txt": templates.render_cmake(program, weights_format).encode(),
        "README.md": templates.render_readme(program).encode(),
    }
    return files


def _write_file(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def write_bundle(program: Program, out_dir: Path, weights_format: str = "incbin") -> None:
    """Writes the bundle of `program` to out_dir, replacing an existing folder only when aotc
    wrote it and only once the new one is complete; on any failure nothing new is left behind."""
    files = bundle_files(program, weights_format)

    def fill(tmp: Path) -> None:
        for name, data in files.items():
            _write_file(tmp / name, data)

    write_folder(Path(out_dir), fill, manifest(program, weights_format),
                 built=templates.built_files(program.name, program.gpu and program.gpu.dialect))
