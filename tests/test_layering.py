"""The packages depend one way: `targets` implements what `lowering` describes (intrinsics,
the machine model, measuring), so no module of `lowering` imports `targets`; of `aotc` it uses
the user-error type alone (`aotc.errors`, a leaf module)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_lowering_imports_no_target() -> None:
    offending = {}
    for path in sorted((ROOT / "lowering").rglob("*.py")):
        bad = sorted(n for n in _imported(path) if n.split(".")[0] == "targets"
                     or (n.split(".")[0] == "aotc" and n != "aotc.errors"))
        if bad:
            offending[str(path.relative_to(ROOT))] = bad
    assert not offending, offending
