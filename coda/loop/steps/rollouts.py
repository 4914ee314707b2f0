"""Step 3: N rollouts of the policy per generated scene (best-of-j by the chunk critic); what
they teach goes where the strategy sends it (the replay, the critic's failures, memory)."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from coda.critic import episodes_from_rollout
from coda.engine.programs import memory_factor
from coda.loop import collect, distributed
from coda.loop.evaluation import targeting_precision
from coda.loop.state import RunState, Spend
from coda.loop.steps.generate import Gen
from coda.train import SOURCES


@dataclasses.dataclass(frozen=True)
class Collected:
    """What step 3 returns."""

    episodes: tuple  # failed episodes of each scene's first rollout (for the critic)
    per_mode: Mapping[int, list[int]]  # mode -> [successes, trials] this round
    program_success: Mapping[str, float]  # the pool's programs' success this round
    spend: Spend
    row: Mapping[str, Any]


class _Tally:
    """Counts over the round's rollouts (per mode, per program, targeting hits)."""

    def __init__(self) -> None:
        self.per_mode: dict = defaultdict(lambda: [0, 0])
        self.per_program: dict = defaultdict(lambda: [0, 0])
        self.hits = self.n_targeted = self.n_ok = self.n_all = self.transitions = 0

    def add(self, g: Gen, program: str, k_ok: int, n: int) -> None:
        """One scene's `k_ok` of `n` successes; a resample's count for its pool parent."""
        program = g.parent or program
        self.n_all += n
        self.n_ok += k_ok
        if g.kind == "targeted":
            self.n_targeted += 1
        if g.mode_id is not None:
            self.per_mode[g.mode_id][0] += k_ok
            self.per_mode[g.mode_id][1] += n
        self.per_program[program][0] += k_ok
        self.per_program[program][1] += n


def _jobs(gens: tuple[Gen, ...], size: int) -> list[tuple[int | None, list[Gen], Any]]:
    """(mode, its generated scenes, bucket) in bucket order: modes ascending, untargeted last."""
    by_mode: dict[int | None, list[Gen]] = defaultdict(list)
    for g in gens:
        by_mode[g.mode_id].append(g)
    jobs = []
    for mode_id, group in sorted(by_mode.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        for bucket in collect.buckets_of([g.compiled for g in group], size):
            jobs.append((mode_id, group, bucket))
    return jobs


def _remember(svc: Any, r: int, meta: dict, bucket: Any, succ: np.ndarray, n: int) -> None:
    """Each scene of a bucket and its deployment (n rollouts, successes) into memory."""
    with svc.memory.batch():
        for c, k_ok in zip(bucket.variants, succ, strict=True):
            g = meta[id(c)]
            fac = memory_factor(g.factor) if g.factor else None
            sp = svc.memory.add_scene_program(
                c.scene.program or c.scene.to_json(),
                round=r,
                mode_id=g.mode_id,
                factor=fac,
                meta={"kind": g.kind, "family": g.family},
            )
            svc.memory.add_deployment(
                round=r,
                scene_program_id=sp,
                n_rollouts=n,
                n_success=int(k_ok),
                policy=svc.strategy.name,
            )


_SOURCE_OF_KIND = {"targeted": "targeted", "resample": "pool", "novel": "novel"}


def _sources(bucket: Any, meta: dict) -> np.ndarray:
    """Each rollout row's data source (`coda.train.SOURCES` ids: the variant's kind; padding
    rows repeat the last variant's and are dropped with it)."""
    ids = [SOURCES.index(_SOURCE_OF_KIND.get(meta[id(c)].kind, "other")) for c in bucket.variants]
    n = int(bucket.batch_size)
    return np.asarray(ids + [ids[-1]] * (n - len(ids)), np.int32)


def last_auc(history: Sequence[dict]) -> float:
    """The critic's most recent held-out ranking AUC by return (`Learner.held_out_ranking`, in
    a round row's update entry); NaN before any was measured."""
    for h in reversed(history):
        auc = ((h.get("update") or {}).get("critic_ranking") or {}).get("auc_return")
        if auc is not None and math.isfinite(float(auc)):
            return float(auc)
    return math.nan


def candidates(j: int, min_auc: float, history: Sequence[dict]) -> int:
    """best-of-j at collection only while the critic's last measured held-out AUC is at least
    `loop.select_min_auc` (0 = always): a critic that ranks fresh chunks worse than chance
    picks worse chunks than the policy's own sample (round 1's AUC 0.38-0.45 in the focused
    experiment); before any measurement a gated critic is not trusted (j = 1)."""
    if j <= 1 or min_auc <= 0:
        return j
    auc = last_auc(history)
    return j if math.isfinite(auc) and auc >= min_auc else 1


def roll_out(svc: Any, state: RunState, r: int, gens: tuple[Gen, ...], key: jax.Array) -> Collected:
    """N rollouts per variant with the collection sampler, the buckets spread over the hosts;
    transitions to the strategy's update recipe (Φ-shaped where the mode has a potential),
    failures of the first rollout to its critique, deployments into memory."""
    lc, s = svc.config.loop, svc.strategy
    N = int(lc.rollouts_per_variant)
    j = candidates(int(lc.num_candidates), float(lc.get("select_min_auc", 0.0)), state.history)
    jobs = _jobs(gens, int(lc.bucket_size))
    results = collect.rollouts_of(
        svc.backend,
        [b for _, _, b in jobs],
        lambda b: svc.collect_agents(b, j),
        key,
        svc.config.sim.num_chunks,
        N,
        distributed.host_split(objects=True),
    )
    episodes: list = []
    tally, spend = _Tally(), Spend()
    for bi, (mode_id, group, bucket) in enumerate(jobs):
        meta = {id(g.compiled): g for g in group}
        src = state.mode_potentials.get(mode_id) if mode_id is not None else None
        phi = s.potential.phi(src, bucket) if src is not None else None
        succ = np.zeros(len(bucket.variants), int)
        source = _sources(bucket, meta)
        for n, (res, sec) in enumerate(results[bi]):
            spend = spend + Spend(res.env_steps, sec)
            succ += np.asarray(res.success)[: len(bucket.variants)]
            tally.transitions += s.update.observe(svc.learner, res, bucket, phi, source)
            if n == 0 and s.critique.reads_failures:  # the failures the critic reads (step 4)
                mids = [meta[id(c)].mode_id for c in bucket.variants]
                eps = episodes_from_rollout(bucket, res, failed_only=True, mode_ids=mids)
                episodes += eps
                for ep in eps:
                    gg = meta[id(ep.compiled)]
                    if gg.kind == "targeted" and ep.stopped_phase == gg.phase:
                        tally.hits += 1
        for c, k_ok in zip(bucket.variants, succ, strict=True):
            tally.add(meta[id(c)], c.scene.program or "", int(k_ok), N)
        _remember(svc, r, meta, bucket, succ, N)
    success = {p: k / n for p, (k, n) in tally.per_program.items() if p in svc.pool_programs and n}
    row = {
        "collect_success": tally.n_ok / tally.n_all if tally.n_all else math.nan,
        "rollouts": tally.n_all,
        "transitions": tally.transitions,
        "targeting_precision": targeting_precision(tally.hits, tally.n_targeted),
        "targeted": tally.n_targeted,
    }
    if float(lc.get("select_min_auc", 0.0)) > 0:
        row["collect_candidates"] = j  # best-of-j at this round's collection, after the gate
    return Collected(tuple(episodes), dict(tally.per_mode), success, spend, row)
