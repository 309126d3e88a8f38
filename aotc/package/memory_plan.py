"""Liveness-based memory planner: one arena, a 64-byte aligned offset per intermediate buffer."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

ALIGN = 64


def align_up(n: int, align: int = ALIGN) -> int:
    return (n + align - 1) // align * align


@dataclass(frozen=True)
class PlanBuffer:
    """An arena buffer: its size in bytes and the first and last step (inclusive) that use it."""

    id: Hashable
    size: int
    first: int
    last: int

    def overlaps(self, other: PlanBuffer) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[Hashable, int]  # buffer id -> byte offset in the arena (multiple of ALIGN)
    arena_size: int  # bytes, multiple of ALIGN
    lower_bound: int  # max over steps of the aligned sizes of the buffers live at that step
    no_reuse: int  # sum of all aligned sizes: the arena without any reuse


def lower_bound(buffers: list[PlanBuffer]) -> int:
    """The largest total (aligned) size of buffers live at the same step."""
    events: dict[int, int] = {}
    for b in buffers:
        size = align_up(b.size)
        events[b.first] = events.get(b.first, 0) + size
        events[b.last + 1] = events.get(b.last + 1, 0) - size
    best = live = 0
    for step in sorted(events):
        live += events[step]
        best = max(best, live)
    return best


def _best_gap(size: int, busy: list[tuple[int, int]]) -> int:
    """Offset of the smallest free gap that holds `size` among busy [start, end) ranges.

    Falls back to the end of the highest busy range when no gap between them fits.
    """
    best_offset, best_waste = -1, -1
    cursor = 0
    for start, end in sorted(busy):
        gap = start - cursor
        if gap >= size and (best_waste < 0 or gap - size < best_waste):
            best_offset, best_waste = cursor, gap - size
        cursor = max(cursor, end)
    return best_offset if best_offset >= 0 else cursor


# Placement orders tried; the smallest arena wins (ties: the first order).
_ORDERS = (
    lambda b: (-align_up(b.size), b.first, b.last - b.first),  # largest first
    lambda b: (-(b.last - b.first), -align_up(b.size), b.first),  # longest-lived first
    lambda b: (b.first, -align_up(b.size), b.last),  # in program order
)


def _place(buffers: list[PlanBuffer], order: int) -> tuple[dict[Hashable, int], int]:
    """Best-fit placement in one order; returns (offsets, arena size)."""
    live_at: dict[int, list[tuple[int, int]]] = {}  # step -> [(start, end)] placed and live there
    offsets: dict[Hashable, int] = {}
    arena = 0
    for b in sorted(buffers, key=_ORDERS[order]):
        size = align_up(b.size)
        if size == 0:
            offsets[b.id] = 0
            continue
        busy = {r for step in range(b.first, b.last + 1) for r in live_at.get(step, ())}
        offset = _best_gap(size, list(busy))
        offsets[b.id] = offset
        for step in range(b.first, b.last + 1):
            live_at.setdefault(step, []).append((offset, offset + size))
        arena = max(arena, offset + size)
    return offsets, arena


def plan_memory(buffers: list[PlanBuffer]) -> MemoryPlan:
    """Greedy best-fit: each buffer goes into the tightest gap left by the already placed buffers
    whose lifetimes overlap its own, in a few orders (largest first, longest-lived first, program
    order); the smallest arena wins. Zero-size buffers get offset 0."""
    ids = [b.id for b in buffers]
    if len(set(ids)) != len(ids):
        raise ValueError("plan_memory: buffer ids must be unique")
    for b in buffers:
        if b.size < 0 or b.first < 0 or b.last < b.first:
            raise ValueError(f"plan_memory: bad buffer {b}")
    bound = lower_bound(buffers)
    best: tuple[dict[Hashable, int], int] | None = None
    for order in range(len(_ORDERS)):
        offsets, arena = _place(buffers, order)
        if best is None or arena < best[1]:
            best = (offsets, arena)
        if arena == bound:
            break
    assert best is not None
    return MemoryPlan(
        offsets={b.id: best[0][b.id] for b in buffers},
        arena_size=best[1],
        lower_bound=bound,
        no_reuse=sum(align_up(b.size) for b in buffers),
    )


def loop_lifetimes(uses: dict[Hashable, list[int]], loops: list[tuple[int, int, int]],
                   moving: dict[Hashable, set[int]]) -> dict[Hashable, tuple[int, int]]:
    """First and last step of each arena buffer when steps `loops` (open, close, depth) repeat.

    A buffer used only inside one iteration of a loop (a body's temporary) keeps its span: it
    is written before it is read in every iteration. One also used outside the loop (read by
    every iteration, or computed by them for after the loop), or moved by the loop's iterations
    (`moving`: key -> depths: a scan's stacked tensor, a carried value's buffers), lives across
    the whole loop. Inner loops first, so that what an inner loop extends is seen by the outer."""
    spans = {k: (min(v), max(v)) for k, v in uses.items()}
    for start, end, depth in sorted(loops, key=lambda x: -x[2]):
        for k, (first, last) in spans.items():
            if last < start or first > end:
                continue
            if first < start or last > end or depth in moving.get(k, ()):
                spans[k] = (min(first, start), max(last, end))
    return spans
