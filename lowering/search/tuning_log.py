"""The tuning log: one JSON object per line, the best configuration measured for a kernel.

Lines are keyed by a hash of `ScheduleSpace.key()` (the computation, the space kind and the
target), so a later compile (or an identical kernel elsewhere) reuses a result without measuring.
Appending keeps the file valid when two compiles share it; the best (fastest) line of a key wins.
A line that cannot be read is skipped with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import AotcError
from lowering.search.space import Config, ScheduleSpace


def default_log_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aotc" / "tuning.jsonl"


def space_hash(space: ScheduleSpace) -> str:
    return hashlib.sha256(space.key().encode()).hexdigest()[:32]


@dataclass
class Entry:
    key: str
    target: str
    kind: str
    config: Config
    seconds: float
    default_seconds: float


class TuningLog:
    def __init__(self, path: Path, warn: Callable[[str], None]) -> None:
        self.path = Path(path)
        self.best: dict[str, Entry] = {}
        if self.path.is_dir():
            raise AotcError("the tuning log is a folder", file=str(self.path),
                            hint="pass a file with --tuning-log")
        if not self.path.exists():
            return
        try:
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            raise AotcError(f"cannot read the tuning log: {e.strerror or e}",
                            file=str(self.path)) from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                entry = Entry(str(d["key"]), str(d["target"]), str(d["kind"]), dict(d["config"]),
                              float(d["seconds"]), float(d["default_seconds"]))
            except (ValueError, KeyError, TypeError):
                warn(f"{self.path}:{n}: skipping a tuning-log line that cannot be read")
                continue
            old = self.best.get(entry.key)
            if old is None or entry.seconds < old.seconds:
                self.best[entry.key] = entry

    def lookup(self, space: ScheduleSpace, key: str | None = None) -> Config | None:
        """The logged configuration of `space`, if every knob of it is still valid."""
        entry = self.best.get(key or space_hash(space))
        if entry is None:
            return None
        options = {k.name: k.options for k in space.knobs}
        if set(entry.config) != set(options):
            return None
        config: Config = {}
        for name, value in entry.config.items():
            # JSON turned tuples into lists: compare options by their JSON text
            same = [o for o in options[name] if json.dumps(o) == json.dumps(value)]
            if not same:
                return None
            config[name] = same[0]
        return config

    def add(self, key: str, space: ScheduleSpace, config: Config, seconds: float,
            default_seconds: float) -> None:
        entry = Entry(key, space.target.name, space.kind, config, seconds,
                      default_seconds)
        old = self.best.get(key)
        if old is None or seconds < old.seconds:
            self.best[key] = entry
        line = json.dumps({**entry.__dict__, "cpu": space.target.cpu,
                           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}, sort_keys=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            raise AotcError(f"cannot write the tuning log: {e.strerror or e}",
                            file=str(self.path)) from None
