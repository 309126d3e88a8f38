"""Print benchmark rows as a markdown table (for RESULTS.md) or one dict per line."""

from __future__ import annotations

from collections.abc import Sequence


def print_rows(head: Sequence[str], rows: Sequence[Sequence[object]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(map(str, r)) + " |")
    else:
        for r in rows:
            print(dict(zip(head, r, strict=True)))
