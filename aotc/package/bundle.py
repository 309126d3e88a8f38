"""The bundle writer: a Program becomes a folder of C sources, objects and build files, written
into a temporary folder and moved into place only when complete."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from aotc import __version__
from aotc.errors import AotcError
from aotc.package import templates
from aotc.package.c_header import render_header
from aotc.package.c_source import render_source
from aotc.package.program import Program, TensorInfo
from aotc.package.validate import check_program
from aotc.package.weights import WEIGHTS_FORMATS, weights_files

MANIFEST = "aotc_bundle.json"


def _tensor_json(t: TensorInfo) -> dict[str, object]:
    return {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes}


def manifest(program: Program, weights_format: str) -> dict[str, object]:
    """What tools (build helpers, `aotc inspect`) read about a bundle without parsing C."""
    return {
        "aotc_version": __version__,
        "name": program.name,
        "triple": program.triple,
        "cpu": program.cpu,
        "cpu_features": list(program.cpu_features),
        "num_threads": program.num_threads,
        "inputs": [_tensor_json(t) for t in program.inputs],
        "outputs": [_tensor_json(t) for t in program.outputs],
        "steps": len(program.steps),
        "arena_size": program.arena_size,
        "arena_lower_bound": program.arena_lower_bound,
        "arena_no_reuse": program.arena_no_reuse,
        "weights_bytes": len(program.weights),
        "weights_format": weights_format,
        "stats": program.stats,
    }


def bundle_files(program: Program, weights_format: str = "incbin") -> dict[str, bytes]:
    """File name -> contents of the bundle folder."""
    if weights_format not in WEIGHTS_FORMATS:
        raise AotcError(
            f"unknown weights format '{weights_format}'",
            hint=f"choose one of: {', '.join(WEIGHTS_FORMATS)}",
        )
    check_program(program)
    n = program.name
    files: dict[str, bytes] = {
        f"{n}.h": render_header(program).encode(),
        f"{n}.c": render_source(program).encode(),
        f"{n}_kernels.o": bytes(program.kernel_object),
        f"{n}_kernels.ll": program.kernel_ll.encode(),
        **weights_files(n, bytes(program.weights), weights_format),
        **templates.runtime_sources(),
        "run_model.c": templates.render_run_model(program).encode(),
        "Makefile": templates.render_makefile(program, weights_format).encode(),
        "CMakeLists.txt": templates.render_cmake(program, weights_format).encode(),
        "README.md": templates.render_readme(program).encode(),
        MANIFEST: (json.dumps(manifest(program, weights_format), indent=2, default=str) + "\n").encode(),
    }
    return files


def _write_file(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def _move_into_place(tmp: Path, out_dir: Path) -> None:
    """Renames tmp to out_dir; an existing out_dir is swapped out and deleted afterwards."""
    if not out_dir.exists():
        os.rename(tmp, out_dir)
        return
    old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(out_dir, old)
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        os.rename(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_bundle(program: Program, out_dir: Path, weights_format: str = "incbin") -> None:
    """Writes the bundle of `program` to out_dir, replacing an existing folder only once the new
    one is complete; on any failure nothing new is left behind."""
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not out_dir.is_dir():
        raise AotcError(f"output path {out_dir} exists and is not a folder", hint="choose a folder")
    files = bundle_files(program, weights_format)
    created = [p for p in reversed(out_dir.parents) if not p.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
        os.chmod(tmp, 0o755)
        for name, data in files.items():
            _write_file(tmp / name, data)
        _move_into_place(tmp, out_dir)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(created):  # parents this call made, innermost first
            try:
                folder.rmdir()
            except OSError:
                break
        raise
