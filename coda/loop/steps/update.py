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

from coda.loop import demo_pool
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
    segments: tuple = ()  # where the kept demo rows came from (RunState.demo_segments)


def bc_update(svc: Any, state: RunState, gens: tuple[Gen, ...], key: jax.Array) -> Updated:
    """Planner demos on this round's scenes join the kept demo rows (≤ `loop.demo_cap`);
    `loop.policy_updates` BC updates on them (`loop.bc_round_share` of every batch from the
    rows added after round 0 when set)."""
    lc, lrn = svc.config.loop, svc.learner
    t0 = time.perf_counter()
    k_demo, _, k_p = jax.random.split(key, 3)
    new, spend = bc_demos_for(svc, [g.compiled for g in gens], k_demo)
    segs = demo_pool.segments_of(state)
    demos, segs = demo_pool.add(state.demos, segs, new, "round", int(lc.demo_cap))
    row: dict[str, Any] = {"demo_rows": demo_pool.composition(segs)}
    if demos is not None:
        share = float(lc.get("bc_round_share", 0.0))
        new_rows = demo_pool.new_rows(segs)
        m = lrn.update_policy_bc(demos, int(lc.policy_updates), k_p, new_rows, share)
        row["policy_loss"] = m.get("loss")
        row["shares"] = demo_pool.mixed_shares(segs, share)
    return Updated(row, demos, spend, time.perf_counter() - t0, tuple(segs))


def seed_bc_update(svc: Any, state: RunState, key: jax.Array) -> Updated:
    """`loop.policy_updates` BC updates on the kept demo rows (round 0's seed demonstrations);
    nothing new is collected."""
    t0 = time.perf_counter()
    segs = demo_pool.segments_of(state)
    row: dict[str, Any] = {"demo_rows": demo_pool.composition(segs)}
    if state.demos is not None:
        m = svc.learner.update_policy_bc(state.demos, int(svc.config.loop.policy_updates), key)
        row["policy_loss"] = m.get("loss")
        row["shares"] = demo_pool.shares_row({"demos": 1.0}, segs)
    return Updated(row, state.demos, Spend(), time.perf_counter() - t0, tuple(segs))


def awr_update(
    svc: Any,
    state: RunState,
    gens: tuple[Gen, ...],
    routing: Mapping[str, str],
    n_in_band: int,
    key: jax.Array,
) -> Updated:
    """Planner demos (clean + `loop.demo_dart`) on the targeted variants of the modes routed to
    "bc" (below the band) and, `loop.novel_demos`, on the fresh scenes join the demo rows AWR
    batches mix in, kept across rounds (`demo_pool`); then blocks of `loop.critic_updates`
    critic and `loop.policy_updates` AWR updates, another block while enough modes are in the
    band and success has not plateaued (≤ 1 + `loop.max_extra_blocks`). The row has each data
    source's share of the AWR batches' weight (`Learner.weight_shares`)."""
    lc, lrn = svc.config.loop, svc.learner
    t0 = time.perf_counter()
    k_demo, k_q, k_p = jax.random.split(key, 3)
    row: dict[str, Any] = {}
    kept, segs, spend = state.demos, demo_pool.segments_of(state), Spend()
    if lrn.replay_size <= 0:
        return Updated(row, kept, spend, time.perf_counter() - t0, tuple(segs))
    bc_modes = {int(k) for k, v in routing.items() if v == "bc"}
    parts = [("routed", [g for g in gens if g.mode_id in bc_modes], tuple(lc.demo_dart))]
    if bool(lc.get("novel_demos", False)):
        parts.append(("novel", [g for g in gens if g.kind == "novel"], ()))
    added: dict[str, int] = {}
    for i, (source, demo_gens, dart) in enumerate(parts):
        if not demo_gens:
            continue
        k = jax.random.fold_in(k_demo, i)
        new, sp = bc_demos_for(svc, [g.compiled for g in demo_gens], k, dart)
        spend = spend + sp
        kept, segs = demo_pool.add(kept, segs, new, source, int(lc.demo_cap))
        added[source] = 0 if new is None else int(new.actions.shape[0])
    if added and kept is not None:
        lrn.set_demos(kept)
    if added:
        row["demo_rows_added"] = added
    row["demo_rows"] = demo_pool.composition(segs)
    row["critic_ranking"] = lrn.held_out_ranking()  # this round's chunks, not yet trained on
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
    shares = lrn.weight_shares(jax.random.fold_in(k_p, 1_000_003))
    row["shares"] = demo_pool.shares_row(shares, segs if lrn.has_demos else [])
    return Updated(row, kept, spend, time.perf_counter() - t0, tuple(segs))


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
