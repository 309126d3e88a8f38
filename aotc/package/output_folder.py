"""Output folders: aotc writes a folder whole and replaces only what it wrote itself.

Every folder aotc writes (a C bundle, `--emit onnx`) holds a manifest that lists the files aotc
put there and the files its build makes. A folder is written into a temporary sibling and
renamed into place when complete. An existing folder is replaced only when it is empty or when
its manifest accounts for every entry in it; a folder holding anything else (the user's files),
the current folder or one of its parents, and a folder holding the input model are refused
before any work starts, so a user's file is never deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from aotc.errors import AotcError

MANIFEST = "aotc_bundle.json"
_HINT = "choose a new folder (or an empty one) for -o"


def read_manifest(folder: Path) -> dict | None:
    """The folder's aotc manifest, or None when it has none (or an unreadable one)."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "aotc_version" in data else None


def foreign_entries(folder: Path) -> list[str] | None:
    """Entries of an existing folder that aotc did not write (nor its build make), sorted;
    None when the folder holds no aotc manifest."""
    manifest = read_manifest(folder)
    if manifest is None:
        return None
    ours = {*manifest.get("files", ()), *manifest.get("built", ())}
    return sorted(p.name for p in Path(folder).iterdir() if p.name not in ours)


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output_folder(output: Path, sources: Sequence[Path] = ()) -> None:
    """Refuses (AotcError) an output folder that aotc may not write or replace: see the module
    docstring. `sources` are the input files, which must not lie inside it."""
    output = Path(output)
    where = str(output)
    if output.exists() and not output.is_dir():
        raise AotcError("exists and is not a folder", file=where, hint=_HINT)
    resolved = output.resolve()
    if _is_within(Path.cwd().resolve(), resolved):
        raise AotcError("is the current folder or one of its parents: aotc replaces its output "
                        "folder whole", file=where, hint=_HINT)
    for source in sources:
        if _is_within(Path(source).resolve(), resolved):
            raise AotcError(f"holds the input {Path(source).name}: aotc replaces its output "
                            "folder whole", file=where, hint=_HINT)
    parent = resolved.parent
    if not parent.is_dir():
        raise AotcError(f"the folder {parent} does not exist", file=where,
                        hint="create it first or choose another -o")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise AotcError(f"cannot write into {parent} (permission denied)", file=where)
    if resolved.is_dir():
        _check_replaceable(resolved, where)


def _check_replaceable(folder: Path, where: str) -> None:
    if not any(folder.iterdir()):
        return
    foreign = foreign_entries(folder)
    if foreign is None:
        raise AotcError(f"is not empty and aotc did not write it (no {MANIFEST})", file=where,
                        hint=_HINT)
    if foreign:
        shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8
                                          else "")
        raise AotcError(f"holds files aotc did not write: {shown}", file=where,
                        hint="move them elsewhere, or choose another folder for -o")


def write_folder(output: Path, fill: Callable[[Path], None], manifest: dict[str, object],
                 built: Iterable[str] = ()) -> None:
    """Writes a folder: `fill(tmp)` writes the files into a temporary sibling, then the manifest
    (`manifest` plus the list of files and of `built`, what the folder's build makes) is added
    and the folder renamed into place, replacing an existing one that check_output_folder
    accepts (checked again here). Missing parents are created. On any failure nothing new is
    left behind."""
    out_dir = Path(output).absolute()
    if out_dir.exists() and not out_dir.is_dir():
        raise AotcError("exists and is not a folder", file=str(output), hint=_HINT)
    if out_dir.is_dir():
        out_dir = out_dir.resolve()
        _check_replaceable(out_dir, str(output))
    created = [p for p in reversed(out_dir.parents) if not p.exists()]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp",
                                    dir=out_dir.parent))
        os.chmod(tmp, 0o755)
        fill(tmp)
        files = sorted([p.name for p in tmp.iterdir()] + [MANIFEST])
        record = {**manifest, "files": files, "built": sorted(set(built))}
        (tmp / MANIFEST).write_text(json.dumps(record, indent=2, default=str) + "\n")
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
