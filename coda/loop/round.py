"""A round as the composition of its steps: `start` (round 0) and `run_round` (rounds ≥ 1).

Round 0 seeds the training pool (verified scene programs of the source), clones the scripted
planner's demos into the policy (the SFT start; strategies without it start untrained), builds
the fixed evaluation suites and evaluates. Every later round:

  1 allocate the scene budget B (the strategy's allocator);
  2 generate targeted variants (engine programs) / resamples / novel seeds, verified;
  3 roll the policy out N times per variant (best-of-j by the chunk critic), transitions into
    the replay (Φ-shaped for modes with a potential), deployments into memory;
  4 critique ≤ C failures per mode (clustered into modes by memory), validate candidate modes
    (targeted vs control batches, one-sided test; Ω stored only when validated);
  5 compile Φ for validated modes (Text2potential with repair) and route each mode by its
    success band (BC on planner demos below it, shaped AWR inside, re-evaluation above);
  6 K_Q critic and K_π policy updates (more blocks while enough modes are in the band and
    success has not plateaued);
  7 p̂_j, learning progress, band membership; evaluation on the fixed suites;
  8 the stop decision (`decide`); the driver checkpoints.

Each step is a function of the frozen services, the run state and its inputs, and returns a
value; this module folds them into the next `RunState` and the round's metrics row. Each step's
randomness comes from (seed, round, step), so a resumed round replays exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax

from coda import lifetime
from coda.loop import distributed
from coda.loop.services import Services
from coda.loop.state import RunState, Spend
from coda.loop.steps.demos import sft_demos
from coda.loop.steps.evaluate import evaluate
from coda.loop.steps.generate import generate
from coda.loop.steps.modes import score_modes
from coda.loop.steps.potentials import potentials_row, route_modes
from coda.loop.steps.rollouts import roll_out


def _step(bar: Any, what: str) -> None:
    """A step of a round begins: the progress bar says which, and the process's memory
    mappings are checked (one warning near vm.max_map_count, `coda.lifetime.check`)."""
    bar.set_description(what)
    lifetime.check(what)


@dataclasses.dataclass(frozen=True)
class Start:
    """What round 0 makes besides its row: the pool, the demo layouts and the suites."""

    pool: list
    held: list[str]
    rows: list[dict]  # scenes.jsonl


# ----------------------------------------------------------------------------- round 0


def start(
    svc: Services, state: RunState, key: jax.Array, bar: Any
) -> tuple[Services, RunState, dict, Start]:
    """Round 0: seeding, planner demos, BC (the SFT start), the fixed suites, first evaluation.
    Returns the services with the pool and suites, the state after round 0 (demos and budgets
    in it; the row not yet in its history), the row, and what the driver writes to the folder."""
    s = svc.strategy
    k_demo, k_bc, k_eval, k_pre = jax.random.split(key, 4)
    _step(bar, "round 0: seeding")
    pool, held, rows, generated = svc.source.seed_pool()
    if not pool:
        raise RuntimeError("no seeded scene passed verification; nothing to train or evaluate")
    budgets = state.budgets.plus(scenes_generated=generated, scenes_accepted=len(pool))
    _step(bar, "round 0: planner demos")
    demo_scenes = svc.source.demo_scenes(pool)
    demos, planner, spend = sft_demos(svc, list(pool) + list(demo_scenes), k_demo, fit=True)
    _step(bar, "round 0: suites")
    svc = svc.with_start(pool, svc.source.build_suites(pool, held))
    row: dict[str, Any] = {"round": 0, "planner_success_pool": planner, "pool": len(pool)}
    row["demo_layouts"] = len(pool) + len(demo_scenes)
    row["demo_rows"] = 0 if demos is None else int(demos.actions.shape[0])
    if svc.config.eval.before_bc:
        _step(bar, "round 0: untrained policy on ID")
        pre = evaluate(svc, k_pre, ["id"])
        spend = spend + pre.spend
        row["untrained_id"] = pre.results["id"].as_dict()
    if demos is not None:
        _step(bar, "round 0: BC on planner demos")
        bc = s.start.run(svc, demos, k_bc, distributed.is_primary())
        if "update_seconds" in bc:
            budgets = budgets.plus(update_seconds=bc.pop("update_seconds"))
        row.update(bc)
    budgets = budgets.plus(set_policy_updates=svc.learner.policy_updates)
    _step(bar, "round 0: evaluation")
    ev = evaluate(svc, k_eval)
    row.update(ev.row())
    budgets = budgets.plus(spend + ev.spend)
    segs = [] if demos is None else [["start", int(demos.actions.shape[0])]]
    state = state.replace(budgets=budgets, demos=demos, demo_segments=segs)
    return svc, state, row, Start(list(pool), list(held), rows)


# ----------------------------------------------------------------------------- rounds ≥ 1


def run_round(
    svc: Services, state: RunState, r: int, key: jax.Array, bar: Any
) -> tuple[RunState, dict, tuple]:
    """Steps 1-7 of round r: (the state after it, without the row in its history or the stop
    decision; the metrics row; the round's accepted critiques, for the report's traces)."""
    s, lc = svc.strategy, svc.config.loop
    ks = jax.random.split(key, 6)
    svc.memory.begin_round(r)
    state = s.memory.round_start(state)  # what of the mode tables survives into this round
    t0 = time.perf_counter()
    row: dict[str, Any] = {"round": r}
    _step(bar, f"round {r}: allocate + generate")
    plan = s.allocator.plan(svc, state, r)
    row["allocation"] = dict(plan.record)
    if plan.times_allocated is not None:
        state = state.replace(times_allocated=dict(plan.times_allocated))
    gen = generate(svc, state, r, plan)
    row.update(gen.row())
    budgets = state.budgets.plus(scenes_generated=gen.tried, scenes_accepted=gen.accepted)
    gens, per_mode, routing, failures = gen.scenes, {}, {}, ()
    if gens:
        _step(bar, f"round {r}: rollouts ({len(gens)} scenes)")
        col = roll_out(svc, state, r, gens, ks[0])
        row.update(col.row)
        per_mode = col.per_mode
        budgets = budgets.plus(col.spend)
        state = state.replace(program_success={**state.program_success, **col.program_success})
        _step(bar, f"round {r}: critique + validate")
        crit = s.critique.run(svc, state, r, col.episodes, ks[1])
        if crit is not None:
            row["critique"] = dict(crit.row)
            state = state.with_modes(parents=crit.parents)
            budgets = budgets.plus(crit.spend, critiques=crit.critiques)
            failures = crit.failures
        _step(bar, f"round {r}: Φ + routing")
        pot = s.potential.compile(svc, state, r, ks[2])
        if pot is not None:
            state = state.with_modes(potentials=pot.programs)
            budgets = budgets.plus(pot.spend)
        rt = route_modes(svc, r, per_mode)
        routing = rt.tools
        row["potentials"] = potentials_row(pot, rt)
    modes = score_modes(svc, state, r, per_mode)
    row.update(modes)
    if gens or not getattr(s.update, "needs_scenes", True):  # kept data: no scenes needed
        _step(bar, f"round {r}: updates")
        up = s.update.run(svc, state, r, gens, routing, modes["modes_in_band"], ks[3])
        if up is not None:
            row["update"] = dict(up.row)
            state = state.replace(demos=up.demos, demo_segments=[list(x) for x in up.segments])
            lrn = svc.learner
            budgets = budgets.plus(
                up.spend,
                update_seconds=up.seconds,
                set_policy_updates=lrn.policy_updates,
                set_critic_updates=lrn.critic_updates,
            )
    if r % int(svc.config.eval.every) == 0 or r == int(lc.rounds):
        _step(bar, f"round {r}: evaluation")
        ev = evaluate(svc, ks[4])
        row.update(ev.row())
        budgets = budgets.plus(ev.spend)
    row["seconds"] = time.perf_counter() - t0
    return state.replace(budgets=budgets), row, failures


def decide(svc: Services, state: RunState, row: dict) -> RunState:
    """Step 8: the state with the round's plateau counter and why the run stops ("" to go on)."""
    lc = svc.config.loop
    best_id, plateau = state.best_id, state.plateau
    idr = row.get("suites", {}).get("id", {}).get("rate")
    if idr is not None and not math.isnan(idr):
        if idr > best_id + 1e-9:
            best_id, plateau = idr, 0
        else:
            plateau += int(lc.policy_updates)
    stopped = ""
    if row["round"] >= int(lc.rounds):
        stopped = f"{lc.rounds} rounds done"
    elif int(lc.max_env_steps) and state.budgets.env_steps >= int(lc.max_env_steps):
        spent, cap = state.budgets.env_steps, int(lc.max_env_steps)
        stopped = f"env-step budget spent ({spent:,} >= {cap:,})"
    else:
        stopped = svc.strategy.critique.stop_reason(svc.config, row)
    return state.replace(best_id=best_id, plateau=plateau, stopped=stopped)


__all__ = ["Spend", "Start", "decide", "run_round", "start"]
