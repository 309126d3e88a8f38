"""The arena planner: no live overlap, alignment, bounds, and optimal results on simple cases."""

from __future__ import annotations

import random

import pytest

from aotc.package.memory_plan import ALIGN, MemoryPlan, PlanBuffer, align_up, plan_memory


def assert_valid(buffers: list[PlanBuffer], plan: MemoryPlan) -> None:
    assert set(plan.offsets) == {b.id for b in buffers}
    for b in buffers:
        off = plan.offsets[b.id]
        assert off % ALIGN == 0
        assert off + align_up(b.size) <= plan.arena_size
    for i, a in enumerate(buffers):
        for b in buffers[i + 1 :]:
            if a.size == 0 or b.size == 0 or not a.overlaps(b):
                continue
            a0, b0 = plan.offsets[a.id], plan.offsets[b.id]
            assert a0 + a.size <= b0 or b0 + b.size <= a0, (a, b, a0, b0)
    assert plan.arena_size % ALIGN == 0
    assert plan.lower_bound <= plan.arena_size <= plan.no_reuse
    assert plan.no_reuse == sum(align_up(b.size) for b in buffers)


@pytest.mark.parametrize("seed", range(200))
def test_random_plans_are_valid(seed: int) -> None:
    rng = random.Random(seed)
    steps = rng.randint(1, 40)
    buffers = []
    for i in range(rng.randint(0, 60)):
        first = rng.randrange(steps)
        last = min(steps - 1, first + int(rng.expovariate(0.3)))
        size = rng.choice([0, 1, 4, 63, 64, 65, 100, 1000, rng.randint(1, 1 << 20)])
        buffers.append(PlanBuffer(f"t{i}", size, first, last))
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)


def test_chain_hits_lower_bound() -> None:
    # a -> b -> c -> d, each live for two consecutive steps: two slots suffice
    buffers = [PlanBuffer(i, 1000, i, i + 1) for i in range(10)]
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)
    assert plan.arena_size == plan.lower_bound == 2 * align_up(1000)
    assert plan.no_reuse == 10 * align_up(1000)


def test_mixed_sizes_near_lower_bound() -> None:
    # the optimum (5184: big2 at 1024, small2 at 0) needs look-ahead; greedy stays within 20%
    buffers = [
        PlanBuffer("big", 4096, 0, 1),
        PlanBuffer("small1", 1024, 1, 2),
        PlanBuffer("small2", 1024, 2, 3),
        PlanBuffer("big2", 4096, 3, 4),
        PlanBuffer("tiny", 10, 0, 4),
    ]
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)
    assert plan.lower_bound == 5184 and plan.arena_size <= 1.2 * plan.lower_bound


def test_residual_blocks_hit_lower_bound() -> None:
    # x -> a -> b -> (x + b) repeated: the skip input stays live across each block
    buffers, step = [PlanBuffer("x0", 4096, 0, 3)], 0
    for i in range(5):
        buffers += [
            PlanBuffer(f"a{i}", 8192, step + 1, step + 2),
            PlanBuffer(f"b{i}", 4096, step + 2, step + 3),
            PlanBuffer(f"x{i + 1}", 4096, step + 3, step + 6),
        ]
        step += 3
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)
    assert plan.arena_size == plan.lower_bound


def test_large_graph_is_fast() -> None:
    import time

    rng = random.Random(1)
    buffers = [PlanBuffer(i, rng.randint(1, 1 << 16), i, i + rng.choice([1, 1, 2, 3, 40]))
               for i in range(5000)]
    start = time.perf_counter()
    plan = plan_memory(buffers)
    assert time.perf_counter() - start < 10
    assert plan.lower_bound <= plan.arena_size < plan.no_reuse


def test_disjoint_lifetimes_share_offset_zero() -> None:
    buffers = [PlanBuffer("a", 500, 0, 0), PlanBuffer("b", 300, 1, 1), PlanBuffer("c", 700, 2, 2)]
    plan = plan_memory(buffers)
    assert set(plan.offsets.values()) == {0}
    assert plan.arena_size == plan.lower_bound == align_up(700)


def test_all_live_at_once_is_the_sum() -> None:
    buffers = [PlanBuffer(i, 100 * (i + 1), 0, 3) for i in range(5)]
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)
    assert plan.arena_size == plan.lower_bound == plan.no_reuse


def test_best_fit_uses_a_freed_gap() -> None:
    # "x" frees a 2 KiB hole between two long-lived buffers; "y" fits into it
    buffers = [
        PlanBuffer("long1", 4096, 0, 5),
        PlanBuffer("x", 2048, 0, 1),
        PlanBuffer("long2", 4096, 0, 5),
        PlanBuffer("y", 2048, 2, 5),
    ]
    plan = plan_memory(buffers)
    assert_valid(buffers, plan)
    assert plan.arena_size == 4096 + 4096 + 2048


def test_empty_and_zero_sized() -> None:
    assert plan_memory([]) == MemoryPlan({}, 0, 0, 0)
    plan = plan_memory([PlanBuffer("z", 0, 0, 3), PlanBuffer("a", 1, 1, 1)])
    assert plan.offsets == {"z": 0, "a": 0} and plan.arena_size == 64


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        plan_memory([PlanBuffer("a", 1, 0, 0), PlanBuffer("a", 1, 1, 1)])
    with pytest.raises(ValueError):
        plan_memory([PlanBuffer("a", 1, 3, 2)])
    with pytest.raises(ValueError):
        plan_memory([PlanBuffer("a", -1, 0, 0)])


def test_deterministic() -> None:
    rng = random.Random(5)
    buffers = [PlanBuffer(i, rng.randint(1, 5000), s, s + rng.randint(0, 5))
               for i, s in enumerate(rng.randrange(20) for _ in range(50))]
    assert plan_memory(buffers) == plan_memory(list(buffers))
