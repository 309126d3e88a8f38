"""Building a bundle with make and running its `run_model` as a separate process (tests, verify)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aotc.package.bundle import MANIFEST
from aotc.package.loaded import BundleError, LoadedBundle
from aotc.package.program import DTYPES
from aotc.package.templates import runtime_dir

__all__ = [
    "BuildError",
    "BundleError",
    "LoadedBundle",
    "RunModelError",
    "build_bundle",
    "build_runtime_library",
    "read_manifest",
    "run_model_command",
    "run_model_process",
]


class BuildError(RuntimeError):
    """make failed; the message holds its output."""


class RunModelError(RuntimeError):
    """run_model exited with a non-zero status."""

    def __init__(self, returncode: int, output: str) -> None:
        self.returncode = returncode
        self.output = output
        super().__init__(f"run_model exited with status {returncode}:\n{output}")


def read_manifest(bundle_dir: Path) -> dict:
    return json.loads((Path(bundle_dir) / MANIFEST).read_text())


def _flags(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else " ".join(value)


def build_bundle(
    bundle_dir: Path,
    cc: str = "cc",
    cflags: str | Sequence[str] | None = None,
    ldflags: str | Sequence[str] | None = None,
    target: str = "all",
    extra_env: dict[str, str] | None = None,
) -> None:
    """Runs `make TARGET` in the bundle ("all": libNAME.a + run_model, "shared": libNAME.so)."""
    cmd = ["make", "-C", str(bundle_dir), f"-j{os.cpu_count() or 1}", f"CC={cc}"]
    if cflags is not None:
        cmd.append(f"CFLAGS={_flags(cflags)}")
    if ldflags is not None:
        cmd.append(f"LDFLAGS={_flags(ldflags)}")
    cmd.append(target)
    env = {**os.environ, **(extra_env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


def build_runtime_library(out_dir: Path, cc: str = "cc", cflags: Sequence[str] = ("-O2",),
                          objects: Sequence[Path] = ()) -> Path:
    """Compiles the C runtime into out_dir/libaotc_runtime.so with its symbols exported
    (aotc_parallel_for, aotc_pool_create, ...): what a JIT or a tuner loads beside kernel objects.
    `objects` (kernel objects) are linked in, so their parallel loops run on the runtime's pool."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / "libaotc_runtime.so"
    src = runtime_dir()
    cmd = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-DAOTC_INTERNAL=",
           *cflags, f"-I{src}", "-o", str(lib), str(src / "aotc_runtime.c"), str(src / "aotc_pool.c"),
           *map(str, objects), "-lpthread", "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return lib


def run_model_command(
    bundle_dir: Path,
    args: Sequence[str],
    runner: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    """Runs `[runner...] bundle_dir/run_model args...` and returns the finished process."""
    cmd = [*(runner or []), str(Path(bundle_dir).absolute() / "run_model"), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout
    )


def run_model_process(
    bundle_dir: Path,
    inputs: list[np.ndarray],
    threads: int | None = None,
    runner: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> list[np.ndarray]:
    """Runs the bundle's run_model on `inputs` (through .npy files) and returns its outputs."""
    meta = read_manifest(bundle_dir)
    with tempfile.TemporaryDirectory(prefix="aotc-run-") as tmp:
        in_paths = [Path(tmp) / f"in{i}.npy" for i in range(len(inputs))]
        out_paths = [Path(tmp) / f"out{i}.npy" for i in range(len(meta["outputs"]))]
        for path, x in zip(in_paths, inputs, strict=True):
            np.save(path, np.asarray(x, order="C"))
        args = [] if threads is None else ["--threads", str(threads)]
        args += [str(p) for p in in_paths + out_paths]
        proc = run_model_command(bundle_dir, args, runner=runner, env=env)
        if proc.returncode != 0:
            raise RunModelError(proc.returncode, proc.stdout + proc.stderr)
        outs = []
        for path, info in zip(out_paths, meta["outputs"], strict=True):
            y, want = np.load(path), np.dtype(DTYPES[info["dtype"]][1])
            if y.dtype.kind == "V" and y.dtype.itemsize == want.itemsize:  # ml_dtypes' types
                y = y.view(want)  # bfloat16 ('<V2') and the narrow types ('|V1')
            if y.dtype != want:
                raise RunModelError(0, f"output {info['name']} has dtype {y.dtype}")
            outs.append(y)
        return outs
