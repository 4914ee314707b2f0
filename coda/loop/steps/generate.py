"""Step 2: verified scenes for an allocator's plan (targeted variants, resamples, novel tasks)."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from coda.engine.generate import GenerationError
from coda.engine.kinds import kind_of_record
from coda.loop.allocators import Plan
from coda.loop.evaluation import coverage_entropy
from coda.loop.sources import task_key
from coda.loop.state import RunState, round_rng
from coda.sim.compile import CompiledScene
from coda.sim.regions import which
from coda.sim.scene import Scene

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Gen:
    """One verified scene of a round: where it came from and what it targets."""

    compiled: CompiledScene
    mode_id: int | None
    kind: str  # "targeted" | "resample" | "novel"
    factor: str | None
    phase: str
    # a resample's pool scene program: its rollouts' success counts for that program (a
    # redrawn scene has no program of its own; success_rate_guided weighs the pool by it)
    parent: str | None = None

    @property
    def family(self) -> str:
        return self.compiled.scene.task["family"]


@dataclasses.dataclass(frozen=True)
class Generated:
    """The round's scenes and the metrics row's generation entries."""

    scenes: tuple[Gen, ...]
    tried: int  # variants proposed (Budgets.scenes_generated)
    accepted: int  # variants that passed verification
    heldout_dropped: int = 0  # verified scenes of a held-out (ood_tasks) task, not used
    # verified scenes that recreate an evaluation scene (a source that can tell; else None)
    duplicates_dropped: int | None = None
    # with sim.hard_regions: the scenes in each declared region ("hard<i>") or in none
    in_regions: dict[str, int] | None = None

    def row(self) -> dict[str, Any]:
        cells = [(g.family, g.factor or "novel", g.phase) for g in self.scenes]
        row = {
            "heldout_tasks_dropped": self.heldout_dropped,
            "generated": self.tried,
            "accepted": self.accepted,
            "verification_pass_rate": self.accepted / self.tried if self.tried else math.nan,
            "coverage_entropy": coverage_entropy(cells),
            "kinds": dict(Counter(g.kind for g in self.scenes)),
        }
        if self.duplicates_dropped is not None:
            row["evaluation_duplicates_dropped"] = self.duplicates_dropped
        if self.in_regions is not None:
            row["in_regions"] = dict(self.in_regions)
        return row


def region_counts(regions: Sequence[Any], gens: Sequence[Gen]) -> dict[str, int] | None:
    """{"hard<i>": scenes in region i, "nominal": in none} of the round's scenes (None without
    declared regions): where a strategy's data landed, the focused experiment's mechanism."""
    if not regions:
        return None
    where = Counter(which(regions, g.compiled.scene) for g in gens)
    return {
        "nominal": where.get(-1, 0),
        **{f"hard{i}": where.get(i, 0) for i in range(len(regions))},
    }


def validation_bases(svc: Any, parents: list[Scene]) -> list[list[Scene]]:
    """The scenes a mode's targeted / control pairs (and, once it is validated, its targeted
    variants) are edited from, in the order to try.

    ``loop.validation_bases="pool"``: the training pool's scenes of the parents' families
    first, then the parents. The parents are the diagnosed *failures*, where the policy rarely
    succeeds whatever is edited, so both batches sit near 0 % and no test can separate them
    (benchmarks/results/validation_power.md); pool scenes are in the success band, where
    recreating the difficulty can show. ``"parents"``: the parents only (the method's reading).
    """
    if str(svc.config.loop.get("validation_bases", "parents")) != "pool":
        return [parents]
    fams = {p.task["family"] for p in parents}
    pool = [c.scene for c in svc.pool if c.scene.task["family"] in fams]
    return [pool, parents] if pool else [parents]


def _targeted(svc: Any, state: RunState, mode_id: int, n: int, rng) -> tuple[list[Gen], int]:
    """(variants, tried) of a mode's generation program on the first of its bases (the ones
    its test was run on, in order) that gives any verified variant; ([], tried) when none does
    (the request then falls back to novel tasks). A base set where every edit is impossible
    (e.g. pool scenes a parent's task edit does not apply to) does not end the search."""
    mode = svc.memory.get_mode(mode_id)
    records = state.mode_parents.get(mode_id, [])
    seed, tried = int(rng.integers(2**31)), 0
    if not records:  # no failure to write the program from
        return [], tried
    kind = kind_of_record(records[0])  # our families' engine, or LIBERO's edits
    parents = [kind_of_record(d).load(d) for d in records]
    for bases in validation_bases(svc, parents):
        try:
            g = kind.generate_targeted(
                mode,
                bases,
                n,
                seed,
                split=svc.config.sim.split,
                engine=svc.engine,
                memory=svc.memory,
                evidence=parents or None,  # the program is written from the mode's failures
                strict=False,
            )
        except (GenerationError, ValueError, KeyError) as e:
            log.info("mode %s: no targeted variants on %d bases (%s)", mode_id, len(bases), e)
            continue
        tried += g.attempted
        if g.variants:
            gens = [Gen(v.compiled, mode_id, "targeted", v.factor, mode.phase) for v in g.variants]
            return gens, tried
        log.info("mode %s: no verified targeted variant on %d bases", mode_id, len(bases))
    return [], tried


def generate(svc: Any, state: RunState, r: int, plan: Plan) -> Generated:
    """Verified scenes for every request of `plan`; what a targeted request could not make is
    made up with novel tasks."""
    rng = round_rng(svc.config.seed, r, 2)
    out: list[Gen] = []
    tried = accepted = novel_needed = 0
    factors = svc.source.resamplable(plan.factors)
    wheres = plan.where or ("",) * len(plan.requests)
    for (kind, ref, n), where in zip(plan.requests, wheres, strict=True):
        if kind == "targeted":
            gens, n_tried = _targeted(svc, state, ref, n, rng)
            tried += n_tried
            accepted += len(gens)
            out += gens
            novel_needed += n - len(gens)
        elif kind == "novel":
            novel_needed += n
        else:  # resample one pool scene's factor (no diagnosis)
            n_tried, made = svc.source.resample(svc.pool[ref], factors, n, rng, where)
            tried += n_tried
            accepted += len(made)
            parent = svc.pool[ref].scene.program
            out += [Gen(c, None, "resample", f, "-", parent) for c, f in made]
    if novel_needed:
        n_tried, made = svc.source.novel(novel_needed, rng)
        tried += n_tried
        accepted += len(made)
        out += [Gen(c, None, "novel", None, "-") for c in made]
    kept = drop_heldout(out, _heldout_keys(svc))
    held = len(out) - len(kept)
    kept, dups = drop_duplicates(svc, kept)
    counts = region_counts(getattr(svc.source, "regions", ()), kept)
    return Generated(tuple(kept), tried, accepted, held, in_regions=counts, duplicates_dropped=dups)


def drop_duplicates(svc: Any, gens: list[Gen]) -> tuple[list[Gen], int | None]:
    """The scenes that recreate none of the evaluation suites' scenes (other than `id`, the
    pool's own), for a source that can tell (`evaluation_duplicate`, e.g. LIBERO's: a layout
    shift or swap landing on a held-out initial state of the same task); (gens, None) else."""
    check = getattr(svc.source, "evaluation_duplicate", None)
    suites = getattr(svc, "suites", None) or {}
    if check is None or not suites:
        return list(gens), None
    episodes = tuple(
        (p, int(s))
        for n, su in suites.items()
        if n != "id"
        for p, s in zip(su.programs, su.seeds, strict=True)
    )
    kept = [g for g in gens if check(g.compiled, episodes) is None]
    return kept, len(gens) - len(kept)


def _heldout_keys(svc: Any) -> frozenset:
    """The ood_tasks suite's task identities (the source computes them once: suites are fixed)."""
    suite = (getattr(svc, "suites", None) or {}).get("ood_tasks")
    if suite is None or not suite.programs:
        return frozenset()
    return svc.source.heldout_task_keys(suite.programs)


def drop_heldout(gens: list[Gen], keys: frozenset) -> list[Gen]:
    """The scenes whose task is not one of the held-out tasks (`sources.task_key`): no arm
    trains on an ood_tasks task, whichever way it was generated (novel seeds, task resamples,
    the engine's task edits)."""
    if not keys:
        return list(gens)
    return [g for g in gens if task_key(g.compiled.scene) not in keys]
