"""Search a schedule space: simulated annealing over measured configurations, with the cost model
choosing which neighbours are worth measuring; or, with no time to measure, the cost model alone.

A step changes one knob. Each chain (several start points: the default, the cost model's best,
random ones) ranks its unmeasured neighbours by the cost model and proposes the best few; the
proposals of all chains are measured together (one compile per batch). A chain moves to its best
proposal when it is faster, or with probability exp(-slowdown / temperature), the temperature
falling to zero as the budget runs out.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lowering.search.space import Config, Knob, ScheduleSpace

Evaluate = Callable[[list[Config]], list[float]]  # measured seconds (math.inf = rejected)
MODEL_SAMPLE = 256  # configurations the cost model ranks when the space is larger
MODEL_MARGIN = 0.8  # the model must predict 20% better than the default before we leave it


def config_key(config: Config) -> str:
    return json.dumps(config, sort_keys=True)


def space_size(knobs: Sequence[Knob]) -> int:
    return math.prod(len(k.options) for k in knobs)


def all_configs(knobs: Sequence[Knob]) -> list[Config]:
    names = [k.name for k in knobs]
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(k.options for k in knobs))]


def random_config(knobs: Sequence[Knob], rng: random.Random) -> Config:
    return {k.name: rng.choice(k.options) for k in knobs}


def neighbours(config: Config, knobs: Sequence[Knob]) -> list[Config]:
    """Every configuration that differs from `config` in exactly one knob."""
    out = []
    for k in knobs:
        for opt in k.options:
            if opt != config.get(k.name):
                out.append({**config, k.name: opt})
    return out


def sample_configs(knobs: Sequence[Knob], start: Config, rng: random.Random,
                   limit: int = MODEL_SAMPLE) -> list[Config]:
    """The whole space when it is small; else `start`, its neighbours and random ones."""
    if space_size(knobs) <= limit:
        return all_configs(knobs)
    seen = {config_key(start): start}
    for c in neighbours(start, knobs):
        seen.setdefault(config_key(c), c)
    for _ in range(limit * 4):
        if len(seen) >= limit:
            break
        c = random_config(knobs, rng)
        seen.setdefault(config_key(c), c)
    return list(seen.values())


def choose_by_model(space: ScheduleSpace, seed: int = 0) -> Config:
    """The configuration the cost model predicts fastest (on the bundle's threads); the default
    unless another is clearly better, since the model is rough."""
    default = space.default_config()
    if not space.knobs:
        return default
    rng = random.Random(seed)
    best, best_cost = default, space.threaded_cost(default) * MODEL_MARGIN
    for c in sample_configs(space.knobs, default, rng):
        cost = space.threaded_cost(c)
        if cost < best_cost:
            best, best_cost = c, cost
    return best


@dataclass
class AnnealResult:
    best: Config
    seconds: float
    measured: dict[str, float] = field(default_factory=dict)  # config key -> seconds
    rounds: int = 0


def anneal(
    knobs: Sequence[Knob],
    evaluate: Evaluate,
    model: Callable[[Config], float],
    starts: Sequence[Config],
    *,
    budget_s: float,
    rng: random.Random,
    batch: int = 6,
    max_evals: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    on_round: Callable[[AnnealResult], None] | None = None,
    canonical: Callable[[Config], Config] | None = None,
) -> AnnealResult:
    """Simulated annealing from `starts` until `budget_s` seconds (of `clock`) or `max_evals`
    measurements are spent or every configuration is measured. `canonical` maps a
    configuration to the representative of those that build the same kernel (see
    ScheduleSpace.canonical): each class is measured once and counts as one point."""
    def key_of(c: Config) -> str:
        return config_key(canonical(c) if canonical else c)

    t0 = clock()
    total = space_size(knobs)
    measured: dict[str, float] = {}
    result = AnnealResult(dict(starts[0]), math.inf, measured)

    def spent() -> float:
        used = (clock() - t0) / budget_s if budget_s > 0 else 1.0
        if max_evals is not None:
            used = max(used, len(measured) / max_evals)
        return used

    def run(configs: list[Config]) -> list[float]:
        fresh = {key_of(c): c for c in configs if key_of(c) not in measured}
        if max_evals is not None:
            fresh = dict(list(fresh.items())[: max(0, max_evals - len(measured))])
        if fresh:
            for key, secs in zip(fresh, evaluate(list(fresh.values())), strict=True):
                measured[key] = secs
                if secs < result.seconds:
                    result.best, result.seconds = fresh[key], secs
            result.rounds += 1
            if on_round:
                on_round(result)
        return [measured.get(key_of(c), math.inf) for c in configs]

    chains = [dict(c) for c in starts]
    values = run(chains)
    temperature0 = 0.05  # a 5% slowdown is accepted with probability 1/e at the start
    per_chain = max(1, batch // max(1, len(chains)))
    while spent() < 1.0 and len(measured) < total:
        proposals: list[list[Config]] = []
        for i, cur in enumerate(chains):
            fresh = [c for c in neighbours(cur, knobs) if key_of(c) not in measured]
            if not fresh:  # a local optimum fully explored: restart at an unmeasured point
                fresh = [c for c in (random_config(knobs, rng) for _ in range(32))
                         if key_of(c) not in measured][:1]
                if fresh:
                    chains[i], values[i] = fresh[0], math.inf
            fresh.sort(key=model)
            proposals.append(fresh[:per_chain])
        flat = [c for p in proposals for c in p]
        if not flat:
            break
        run(flat)
        temperature = temperature0 * max(0.0, 1.0 - spent())
        for i, props in enumerate(proposals):
            if not props:
                continue
            cand = min(props, key=lambda c: measured.get(key_of(c), math.inf))
            v = measured.get(key_of(cand), math.inf)
            if not math.isfinite(v):
                continue
            cur = values[i]
            slowdown = (v - cur) / cur if math.isfinite(cur) and cur > 0 else -1.0
            if slowdown < 0 or (temperature > 0 and rng.random() < math.exp(-slowdown / temperature)):
                chains[i], values[i] = cand, v
    return result
