"""Step 4: ≤ C critiques of the round's failures per mode (clustered into modes by memory), then
targeted-vs-control validation of candidate modes (Ω stored only when validated)."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import jax

from coda.critic import select_failures
from coda.engine import validate as V
from coda.engine.generate import GenerationError
from coda.engine.kinds import kind_of, kind_of_record
from coda.engine.programs import store_program
from coda.loop import collect, distributed
from coda.loop.state import RunState, Spend
from coda.loop.steps.generate import validation_bases
from coda.registries import CRITICS
from coda.sim.scene import Scene

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Critiqued:
    """The critic's part of step 4."""

    parents: Mapping[int, list[dict]]  # every mode's generation parents after this round
    failures: tuple  # accepted critiques (the report's failure traces)
    critiques: int  # failed episodes sent to the critic (Budgets.critiques)
    row: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Validated:
    """The control experiments of step 4."""

    spend: Spend
    row: Mapping[str, Any]


def _critic(svc: Any) -> Any:
    """The configured critic, given everything a critic may take (each registered critic picks
    what its signature names)."""
    cc = svc.config.critic
    bound = collect.BoundFactory(svc.agents, 1)  # shared compiled agents, bucket tokens
    return CRITICS.build(
        cc.name,
        policy=bound,  # the offline critic's probes roll the policy out again
        params=bound.params,
        backend=svc.backend,
        num_chunks=int(svc.config.sim.num_chunks),
        n_probes=int(cc.n_probes),
        n_repeats=int(cc.n_repeats),
        memory=svc.memory,
        split=distributed.host_split(),  # each host rolls out its share of the probes
        client=svc.llm,  # the VLM critic: keyframes + factored scene to the critic role
        max_keyframes=int(cc.max_keyframes),
        image_size=int(cc.image_size),
        log_dir=os.path.join(svc.workdir, "llm") if distributed.is_primary() else None,
    )


def critique(
    svc: Any, state: RunState, r: int, episodes: tuple, k_sel: jax.Array, k_crit: jax.Array
) -> Critiqued:
    """≤ `loop.critiques_per_mode` failures per mode to the critic; accepted diagnoses join
    memory's modes and their scenes the modes' parents (≤ `loop.max_parents` each)."""
    lc = svc.config.loop
    chosen = select_failures(list(episodes), int(lc.critiques_per_mode), k_sel)
    row: dict[str, Any] = {"critiqued": len(chosen), "diagnosed": 0}
    parents = {m: list(ps) for m, ps in state.mode_parents.items()}
    failures = []
    if chosen:
        t0 = time.perf_counter()
        crits = _critic(svc).diagnose(chosen, k_crit, round=r)
        row["critic_seconds"] = time.perf_counter() - t0
        for c in crits:
            if c.ok and c.assignment is not None:
                row["diagnosed"] += 1
                mine = parents.setdefault(int(c.assignment.mode_id), [])
                if len(mine) < int(lc.max_parents):
                    mine.append(c.episode.compiled.scene.to_dict())
                failures.append(c)
    return Critiqued(parents, tuple(failures), len(chosen), row)


def _batches(svc: Any, m: Any, parents: list[Scene], seed: int) -> Any:
    """Targeted / control batches of mode `m` on the first bases that give them (None: none)."""
    lc = svc.config.loop
    if not parents:
        return None
    kind = kind_of(parents[0].task["family"])  # our families' engine, or LIBERO's edits
    for bases in validation_bases(svc, parents):
        try:
            return kind.validation_batches(
                m,
                bases,
                int(lc.validate_n),
                seed,
                control=str(lc.get("validation_control", "matched")),
                pairing=str(lc.get("validation_pairing", "sibling")),
                rest=str(lc.get("validation_rest", "keep")),
                evidence=parents,  # the engine writes the program from the mode's failures
                engine=svc.engine,
                memory=svc.memory,
            )
        except (GenerationError, ValueError, KeyError) as e:
            log.info("mode %d: no validation batches on %d bases (%s)", m.id, len(bases), e)
    return None


def _test_row(m: Any, res: V.TestResult) -> dict[str, Any]:
    """One test in the metrics row: counts, raw and adjusted p, the correction, what decided."""
    return {
        "mode": m.id,
        "targeted": res.targeted_successes,
        "control": res.control_successes,
        "n": res.targeted_n,
        "p_value": float(res.p_value),
        "p_adjusted": float(res.p_adjusted if res.p_adjusted is not None else res.p_value),
        "correction": res.correction,
        "n_tests": res.n_tests,
        "alpha": res.alpha,
        "decided_by": res.decided_by,
    }


def validate(svc: Any, state: RunState, r: int, k_val: jax.Array) -> Validated:
    """Refuted modes the policy keeps failing in re-opened (`loop.retest_after`), then ≤
    `loop.max_validations` candidate modes tested: targeted vs control success, one-sided; all of
    the round's experiments run first, then they are decided together with the multiplicity
    correction `loop.validation_correction` (holm | bh | none) over the round's p-values."""
    lc, cc = svc.config.loop, svc.config.critic
    row: dict[str, Any] = {"validated": [], "refuted": []}
    # refuted modes the policy keeps failing in: one more control experiment (0 = never)
    row["reopened"] = svc.memory.reopen_refuted(
        round=r, min_new=int(lc.retest_after), max_retests=int(lc.max_retests)
    )
    # execution modes name no scene factor to vary: no control experiment can test them
    cands = [
        m
        for m in svc.memory.modes(status="candidate")
        if m.id in state.mode_parents and m.factor != "execution"
    ]
    hs = distributed.host_split()  # each host rolls out its share of the buckets
    nc, size = int(svc.config.sim.num_chunks), int(lc.bucket_size)
    spend = Spend()
    tested = []  # (mode, batches, raw test) per experiment, in candidate order
    for i, m in enumerate(cands[: int(lc.max_validations)]):
        parents = [kind_of_record(d).load(d) for d in state.mode_parents[m.id]]
        vb = _batches(svc, m, parents, r * 1000 + i)
        if vb is None:
            continue
        kt, kc = jax.random.split(jax.random.fold_in(k_val, i))
        t, st = collect.success_of(
            svc.backend, [v.compiled for v in vb.targeted], svc.agents, kt, nc, size, hs
        )
        c, sc = collect.success_of(
            svc.backend, [v.compiled for v in vb.control], svc.agents, kc, nc, size, hs
        )
        spend = spend + Spend(st + sc, 0.0)
        n = len(t)
        tested.append((m, vb, V.one_sided_test(int(t.sum()), n, int(c.sum()), n, method="fisher")))
    # decided together: the correction over this round's p-values
    method = str(lc.get("validation_correction", "none"))
    outcomes = []  # (mode id, accepted) per test
    for (m, vb, _), res in zip(tested, V.correct([x for *_, x in tested], method), strict=True):
        V.apply_validation(svc.memory, m.id, res, round=r, critic=cc.name)
        if res.accepted:
            store_program(
                svc.memory,
                vb.program,
                round=r,
                mode_id=m.id,
                variants=[v.record() for v in vb.targeted],
                meta={
                    "validation": res.as_dict(),
                    "control_factor": vb.control_factor,
                    "pairing": vb.pairing,
                },
            )
        row["validated" if res.accepted else "refuted"].append(_test_row(m, res))
        outcomes.append((m.id, res.accepted))
    if outcomes:  # this round's tests per critic (absent: no test this round)
        mine = V.round_refutations(svc.memory, outcomes, cc.name)
        row["round_refutations"] = {
            k: {"validated": v.n_validated, "refuted": v.n_refuted, "rate": v.rate}
            for k, v in mine.items()
        }
    return Validated(spend, row)


@dataclasses.dataclass(frozen=True)
class CritiqueRound:
    """Step 4 whole: the critic's diagnoses, then the control experiments."""

    parents: Mapping[int, list[dict]]
    failures: tuple
    critiques: int
    spend: Spend
    row: Mapping[str, Any]


def critique_and_validate(
    svc: Any, state: RunState, r: int, episodes: tuple, key: jax.Array
) -> CritiqueRound:
    """`critique` the round's failures, then `validate` candidate modes (with the parents the
    critique added)."""
    k_sel, k_crit, k_val = jax.random.split(key, 3)
    crit = critique(svc, state, r, episodes, k_sel, k_crit)
    val = validate(svc, state.with_modes(parents=crit.parents), r, k_val)
    row = {**crit.row, **val.row}
    return CritiqueRound(crit.parents, crit.failures, crit.critiques, val.spend, row)
