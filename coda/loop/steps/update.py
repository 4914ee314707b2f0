"""Step 6: K_Q critic and K_π policy updates — AWR on the replay (+ routed planner demos), or BC
on planner demos (the SFT baseline). The learner is the services' handle; what crosses rounds
(the demo rows BC reads) comes back in the result."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import jax
from tqdm.auto import tqdm

from coda.loop import collect
from coda.loop.state import RunState, Spend
from coda.loop.steps.demos import bc_demos_for
from coda.loop.steps.generate import Gen

BC_BLOCK = 100  # round 0's BC updates per jitted call between progress updates


@dataclasses.dataclass(frozen=True)
class Updated:
    """What step 6 returns."""

    row: Mapping[str, Any]
    demos: Any  # the demo rows kept for later rounds (RunState.demos)
    spend: Spend = Spend()  # the planner demos' rollouts
    seconds: float = 0.0  # wall time of the step (Budgets.update_seconds)


def bc_update(svc: Any, state: RunState, gens: tuple[Gen, ...], key: jax.Array) -> Updated:
    """Planner demos on this round's scenes join the kept demo rows (≤ `loop.demo_cap`);
    `loop.policy_updates` BC updates on them."""
    lc, lrn = svc.config.loop, svc.learner
    t0 = time.perf_counter()
    k_demo, _, k_p = jax.random.split(key, 3)
    new, spend = bc_demos_for(svc, [g.compiled for g in gens], k_demo)
    demos = collect.concat_batches([state.demos, new], int(lc.demo_cap))
    row: dict[str, Any] = {}
    if demos is not None:
        m = lrn.update_policy_bc(demos, int(lc.policy_updates), k_p)
        row["policy_loss"] = m.get("loss")
    kept = state.demos if demos is None else demos
    return Updated(row, kept, spend, time.perf_counter() - t0)


def awr_update(
    svc: Any,
    state: RunState,
    gens: tuple[Gen, ...],
    routing: Mapping[str, str],
    n_in_band: int,
    key: jax.Array,
) -> Updated:
    """Planner demos of the modes routed to "bc" (and, `loop.novel_demos`, of the fresh scenes)
    join the demo rows AWR batches mix in; then blocks of `loop.critic_updates` critic and
    `loop.policy_updates` AWR updates, another block while enough modes are in the band and
    success has not plateaued (≤ 1 + `loop.max_extra_blocks`)."""
    lc, lrn = svc.config.loop, svc.learner
    t0 = time.perf_counter()
    k_demo, k_q, k_p = jax.random.split(key, 3)
    row: dict[str, Any] = {}
    kept, spend = state.demos, Spend()
    if lrn.replay_size <= 0:
        return Updated(row, kept, spend, time.perf_counter() - t0)
    bc_modes = {int(k) for k, v in routing.items() if v == "bc"}
    novel_demos = bool(lc.get("novel_demos", False))
    demo_gens = [g for g in gens if g.mode_id in bc_modes]
    if novel_demos:  # the fresh scenes' planner demos join the demo rows AWR batches mix in
        demo_gens += [g for g in gens if g.kind == "novel"]
    if demo_gens:
        new, spend = bc_demos_for(svc, [g.compiled for g in demo_gens], k_demo)
        demos = collect.concat_batches([state.demos, new], int(lc.demo_cap))
        if demos is not None:
            lrn.set_demos(demos)
            if novel_demos:
                kept = demos  # kept across rounds (as the sft baseline's are)
        row["demo_rows_added"] = 0 if new is None else int(new.actions.shape[0])
    blocks = 0
    while True:
        kq, kp = jax.random.fold_in(k_q, blocks), jax.random.fold_in(k_p, blocks)
        cm = lrn.update_critic(int(lc.critic_updates), kq)
        pm = lrn.update_policy_awr(int(lc.policy_updates), kp)
        blocks += 1
        # trigger: another block while enough modes are informative and success moves
        more = n_in_band >= int(lc.min_modes_in_band) and state.plateau < int(lc.plateau_updates)
        if not more or blocks > int(lc.max_extra_blocks):
            break
    row.update(td_error=cm.get("td_error"), policy_loss=pm.get("loss"), blocks=blocks)
    return Updated(row, kept, spend, time.perf_counter() - t0)


def bc_start(svc: Any, demos: Any, key: jax.Array, progress: bool) -> dict:
    """The SFT start: `loop.bc_steps` BC updates on the planner demos in blocks of `BC_BLOCK`
    (a progress bar with an ETA when `progress`); the demo rows AWR mixes in
    (`loop.demo_fraction`). Returns the row's entries and the update seconds."""
    lc, steps = svc.config.loop, int(svc.config.loop.bc_steps)
    t0 = time.perf_counter()
    m: dict = {}
    bar = dict(desc="BC updates", unit="upd", leave=False, mininterval=2.0, disable=not progress)
    with tqdm(total=steps, **bar) as pb:
        done, i = 0, 0
        while done < steps:
            n = min(BC_BLOCK, steps - done)
            m = svc.learner.update_policy_bc(demos, n, jax.random.fold_in(key, i))
            done, i = done + n, i + 1
            pb.update(n)
            pb.set_postfix(loss=f"{m.get('loss', float('nan')):.4f}")
    if lc.demo_fraction > 0:
        svc.learner.set_demos(demos)
    return {"bc_loss": m.get("loss"), "update_seconds": time.perf_counter() - t0}
