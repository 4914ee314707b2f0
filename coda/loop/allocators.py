"""Step 1 of a round, as strategies' behaviour: how a round's scene budget B is spent.

An allocator answers `plan(svc, state, r) -> Plan`: requests of ``targeted`` variants of a memory
mode, ``novel`` seeded tasks or ``resample``d pool scenes (`coda.loop.steps.generate` turns them
into verified scenes), a record for the metrics row, and the UCB counters after this round.
Allocators read (never write) the services and the run state; a strategy holds one
(`coda.loop.strategies`). A new allocation rule is a class with these two members, registered
with a strategy that uses it (tests/test_strategies.py registers one from a test file).

No JAX here: `coda.runconfig` reads `targets_modes` before JAX is imported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from coda.engine.allocate import allocate, largest_remainder, mode_stats


class Request(NamedTuple):
    """Scenes to make: `count` of `kind` ("targeted": of mode `ref`; "resample": of pool scene
    `ref`; "novel": fresh seeded tasks, `ref` None)."""

    kind: str
    ref: int | None
    count: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """What an allocator decided for one round."""

    requests: tuple[Request, ...] = ()
    record: Mapping[str, int] = dataclasses.field(default_factory=dict)  # the metrics row's entry
    times_allocated: Mapping[int, int] | None = None  # UCB counters n_j after it (None: as were)
    factors: tuple[str, ...] = ()  # what a "resample" request may redraw (the source narrows it)
    # per request, where its resamples must land (coda.sim.regions.accept_for: "" anywhere,
    # "nominal" outside every sim.hard_regions region, "hard:<i>" inside region i); () = ""
    where: tuple[str, ...] = ()


class Allocator(Protocol):
    """How a strategy spends a round's scene budget."""

    targets_modes: bool  # spends on memory's validated modes (what a transferred memory drives)

    def plan(self, svc: Any, state: Any, r: int) -> Plan: ...


def _mode_stats(svc: Any, state: Any) -> list:
    """Allocation's numbers of the modes the loop can generate for (those with a parent)."""
    usable = [m for m in svc.memory.modes() if m.id in state.mode_parents]
    return [
        mode_stats(
            m,
            times_allocated=state.times_allocated.get(m.id, 0),
            has_program=m.id in state.mode_potentials,
        )
        for m in usable
    ]


def _targeted(per_mode: Mapping[int, int], n_novel: int, **kw: Any) -> Plan:
    reqs = [Request("targeted", m, n) for m, n in sorted(per_mode.items())]
    if n_novel:
        reqs.append(Request("novel", None, n_novel))
    record = {**{str(m): n for m, n in per_mode.items()}, "novel": n_novel}
    return Plan(tuple(reqs), record, **kw)


def resample_plan(
    weights: Sequence[float],
    n: int,
    factors: tuple[str, ...],
    n_novel: int | None = None,
    **kw: Any,
) -> Plan:
    """`n` resampled pool scenes split over the pool by `weights` (largest remainder), then, if
    `n_novel` is given, that many fresh tasks (recorded even when 0)."""
    counts = largest_remainder(weights, n)
    reqs = [Request("resample", i, k) for i, k in enumerate(counts) if k]
    record: dict[str, int] = {f"pool{i}": k for _, i, k in reqs}
    if n_novel is not None:
        if n_novel:
            reqs.append(Request("novel", None, n_novel))
        record["novel"] = n_novel
    return Plan(tuple(reqs), record, factors=factors, **kw)


@dataclasses.dataclass(frozen=True)
class NoScenes:
    """Nothing generated (the zero-shot baseline)."""

    targets_modes = False

    def plan(self, svc: Any, state: Any, r: int) -> Plan:
        return Plan()


@dataclasses.dataclass(frozen=True)
class NovelTasks:
    """The whole budget on fresh seeded tasks (what BC on planner demos spends it on)."""

    targets_modes = False

    def plan(self, svc: Any, state: Any, r: int) -> Plan:
        B = int(svc.config.loop.budget)
        return Plan((Request("novel", None, B),), {"novel": B})


@dataclasses.dataclass(frozen=True)
class PoolResample:
    """The training pool's scenes, each variant one of `factors` redrawn; pool scenes weighted
    uniformly or, `by_failure_rate`, by 1 - their success in the last round + 0.05.

    `where` (the focused experiment's arms; needs `sim.hard_regions`): "nominal" keeps every
    redraw outside the declared regions; "hard" is the oracle: the budget split evenly over the
    regions, each redraw of the region's own factor landing inside it."""

    factors: tuple[str, ...] = ("layout", "attributes")
    by_failure_rate: bool = False
    where: str = ""  # "" | "nominal" | "hard"
    targets_modes = False

    def plan(self, svc: Any, state: Any, r: int) -> Plan:
        if self.by_failure_rate:
            ps = state.program_success
            w = [1.0 - ps.get(c.scene.program or "", 0.0) + 0.05 for c in svc.pool]
        else:
            w = [1.0] * len(svc.pool)
        B = int(svc.config.loop.budget)
        if self.where != "hard":
            plan = resample_plan(w, B, self.factors)
            return dataclasses.replace(plan, where=(self.where,) * len(plan.requests))
        n_regions = len(tuple(svc.config.sim.hard_regions))
        reqs, record, where = [], {}, []
        for i, b in enumerate(largest_remainder([1.0] * n_regions, B)):
            for _, j, k in resample_plan(w, b, self.factors).requests:
                reqs.append(Request("resample", j, k))
                where.append(f"hard:{i}")
            record[f"hard{i}"] = b
        return Plan(tuple(reqs), record, factors=self.factors, where=tuple(where))


@dataclasses.dataclass(frozen=True)
class UCBModes:
    """`coda.engine.allocate` over validated modes: UCB on hardness + learning progress, ε novel
    seeds, replay of modes at or above the band. With no mode to target or replay the budget
    goes to novel seeds or, `loop.no_mode_budget="pool"`, mostly to resampled pool scenes (where
    the policy succeeds often enough to learn from its own rollouts:
    benchmarks/results/loop_selfimit.md)."""

    pool_factors: tuple[str, ...] = ("layout", "attributes")
    targets_modes = True

    def plan(self, svc: Any, state: Any, r: int) -> Plan:
        lc = svc.config.loop
        B = int(lc.budget)
        a = allocate(
            _mode_stats(svc, state),
            B,
            r,
            c_explore=float(lc.c_explore),
            epsilon=float(lc.epsilon),
            replay_fraction=float(lc.replay_fraction),
            band=tuple(lc.band),
            rng_seed=int(svc.config.seed),
        )
        counts = dict(state.times_allocated)
        for m, n in a.ucb.items():
            if n:
                counts[m] = counts.get(m, 0) + 1
        per_mode = a.per_mode()
        if not per_mode and str(lc.get("no_mode_budget", "novel")) == "pool":
            n_novel = int(round(float(lc.epsilon) * B))
            w = [1.0] * len(svc.pool)
            return resample_plan(w, B - n_novel, self.pool_factors, n_novel, times_allocated=counts)
        return _targeted(per_mode, a.n_novel, times_allocated=counts)


@dataclasses.dataclass(frozen=True)
class UniformModes:
    """The same validated modes as UCB split equally (no hardness, no learning progress), ε
    novel; the whole budget novel while no mode is validated."""

    targets_modes = True

    def plan(self, svc: Any, state: Any, r: int) -> Plan:
        lc = svc.config.loop
        B = int(lc.budget)
        valid = [m.mode_id for m in _mode_stats(svc, state) if m.status == "validated"]
        n_novel = B if not valid else int(round(float(lc.epsilon) * B))
        split = largest_remainder([1.0] * len(valid), B - n_novel) if valid else []
        per_mode = {m: n for m, n in zip(valid, split, strict=True) if n}
        return _targeted(per_mode, n_novel)
