"""The loop's rounds (§3.5): the start (round 0) and steps 1-8 of every later round.

Round 0 seeds the training pool (verified scene programs per family), clones the scripted
planner's demos into the policy (the SFT start; strategies without it start untrained), builds
the fixed evaluation suites and evaluates. Every later round:

  1 allocate the scene budget B (strategy: UCB over validated modes, ε novel, replay, ...);
  2 generate targeted variants (engine programs) / novel seeds / resamples, verified;
  3 roll the policy out N times per variant (best-of-j by the chunk critic), transitions into
    the replay (Φ-shaped for modes with a potential), deployments into memory;
  4 critique ≤ C failures per mode (clustered into modes by memory), validate candidate modes
    (targeted vs control batches, one-sided test; Ω stored only when validated);
  5 compile Φ for validated modes (Text2potential with repair) and route each mode by its
    success band (BC on planner demos below it, shaped AWR inside, re-evaluation above);
  6 K_Q critic and K_π policy updates (more blocks while enough modes are in the band and
    success has not plateaued);
  7 evaluate on the fixed suites; p̂_j, learning progress, band membership;
  8 checkpoint and decide whether to stop.
Host code decides; the learner's jitted scans compute. Each step's randomness comes from
(seed, round, step), so a resumed round replays exactly.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter, defaultdict
from typing import Any

import jax
import numpy as np

from coda.engine import validate as V
from coda.engine.allocate import allocate, band_actions, largest_remainder, mode_stats
from coda.engine.generate import GenerationError, generate_targeted, make_validation_batches
from coda.engine.programs import memory_factor, store_program
from coda.loop import collect, distributed
from coda.loop.evaluation import coverage_entropy, targeting_precision
from coda.loop.state import RunState, round_rng
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.planner import planner_for
from coda.sim.scene import Scene

log = logging.getLogger(__name__)


class Gen:
    """One verified scene of a round: where it came from and what it targets."""

    __slots__ = ("compiled", "mode_id", "kind", "factor", "phase")

    def __init__(self, compiled: CompiledScene, mode_id: int | None, kind: str, factor, phase):
        self.compiled, self.mode_id, self.kind = compiled, mode_id, kind
        self.factor, self.phase = factor, phase

    @property
    def family(self) -> str:
        return self.compiled.scene.task["family"]


# ----------------------------------------------------------------------------- 1 allocate


def plan(ctx: Any, state: RunState, r: int) -> tuple[list[tuple[str, int | None, int]], dict]:
    """Step 1: [(kind, mode id or pool index, count)] for this round's budget, + a record."""
    s, lc = ctx.strategy, ctx.config.loop
    B = int(lc.budget)
    lo, hi = tuple(lc.band)
    if s.allocation == "none":
        return [], {}
    if s.allocation == "novel":
        return [("novel", None, B)], {"novel": B}
    if s.allocation in ("success_rate", "domain_randomization"):
        pool = ctx.pool
        if s.allocation == "success_rate":
            w = [1.0 - state.program_success.get(c.scene.program or "", 0.0) + 0.05 for c in pool]
        else:
            w = [1.0] * len(pool)
        return _resample_plan(w, B)
    modes = ctx.memory.modes()
    usable = [m for m in modes if m.id in state.mode_parents]
    stats = [
        mode_stats(
            m,
            times_allocated=state.times_allocated.get(m.id, 0),
            has_program=m.id in state.mode_potentials,
        )
        for m in usable
    ]
    if s.allocation == "ucb":
        a = allocate(
            stats,
            B,
            r,
            c_explore=float(lc.c_explore),
            epsilon=float(lc.epsilon),
            replay_fraction=float(lc.replay_fraction),
            band=(lo, hi),
            rng_seed=int(ctx.config.seed),
        )
        for m, n in a.ucb.items():
            if n:
                state.times_allocated[m] = state.times_allocated.get(m, 0) + 1
        per_mode = a.per_mode()
        n_novel = a.n_novel
        if not per_mode and str(lc.get("no_mode_budget", "novel")) == "pool":
            return _pool_plan(ctx, B, int(round(float(lc.epsilon) * B)))
    else:  # uniform over validated modes, ε novel
        valid = [m.mode_id for m in stats if m.status == "validated"]
        n_novel = B if not valid else int(round(float(lc.epsilon) * B))
        split = largest_remainder([1.0] * len(valid), B - n_novel) if valid else []
        per_mode = {m: n for m, n in zip(valid, split, strict=True) if n}
    reqs = [("targeted", m, n) for m, n in sorted(per_mode.items())]
    if n_novel:
        reqs.append(("novel", None, n_novel))
    return reqs, {**{str(m): n for m, n in per_mode.items()}, "novel": n_novel}


def _resample_plan(weights: list[float], n: int) -> tuple[list[tuple[str, int | None, int]], dict]:
    """`n` resampled pool scenes split over the pool by `weights` (largest remainder)."""
    counts = largest_remainder(weights, n)
    reqs: list[tuple[str, int | None, int]] = [
        ("resample", i, k) for i, k in enumerate(counts) if k
    ]
    return reqs, {f"pool{i}": k for _, i, k in reqs}


def _pool_plan(ctx: Any, B: int, n_novel: int) -> tuple[list[tuple[str, int | None, int]], dict]:
    """No validated mode to target or replay yet (`loop.no_mode_budget="pool"`): ε novel, the
    rest resampled pool scenes (layout / attributes of the training programs), where the policy
    succeeds often enough to learn from its own rollouts; fresh seeded tasks alone sat at ~7 %
    success in the loop (benchmarks/results/loop_selfimit.md)."""
    reqs, record = _resample_plan([1.0] * len(ctx.pool), B - n_novel)
    if n_novel:
        reqs.append(("novel", None, n_novel))
    return reqs, {**record, "novel": n_novel}


# ----------------------------------------------------------------------------- 2 generate


def generate(ctx: Any, state: RunState, r: int, reqs) -> tuple[list[Gen], dict]:
    """Step 2: verified scenes for every request; failed targeted requests fall back to novel."""
    rng = round_rng(ctx.config.seed, r, 2)
    out: list[Gen] = []
    tried = accepted = 0
    novel_needed = 0
    split = ctx.config.sim.split
    for kind, ref, n in reqs:
        if kind == "targeted":
            mode = ctx.memory.get_mode(ref)
            parents = [Scene.from_dict(d) for d in state.mode_parents.get(ref, [])]
            g, seed = None, int(rng.integers(2**31))
            for bases in validation_bases(ctx, parents):  # the bases its test was run on
                try:
                    g = generate_targeted(
                        mode,
                        None,
                        bases,
                        n,
                        seed,
                        0.0,
                        split=split,
                        engine=ctx.engine,
                        memory=ctx.memory,
                        strict=False,
                    )
                    break
                except (GenerationError, ValueError, KeyError) as e:
                    log.info("mode %s: no targeted variants on %d bases (%s)", ref, len(bases), e)
            if g is None:
                novel_needed += n
                continue
            tried += g.attempted
            accepted += len(g.variants)
            for v in g.variants:
                out.append(Gen(v.compiled, ref, "targeted", v.factor, mode.phase))
            novel_needed += n - len(g.variants)
        elif kind == "novel":
            novel_needed += n
        else:  # resample one pool scene's factor (no diagnosis)
            factors = ctx.source.resample_factors(ctx.strategy.allocation)
            n_tried, made = ctx.source.resample(ctx.pool[ref], factors, n, rng)
            tried += n_tried
            accepted += len(made)
            out += [Gen(c, None, "resample", f, "-") for c, f in made]
    if novel_needed:
        n_tried, made = ctx.source.novel(novel_needed, rng)
        tried += n_tried
        accepted += len(made)
        out += [Gen(c, None, "novel", None, "-") for c in made]
    cells = [(g.family, g.factor or "novel", g.phase) for g in out]
    return out, {
        "generated": tried,
        "accepted": accepted,
        "verification_pass_rate": accepted / tried if tried else math.nan,
        "coverage_entropy": coverage_entropy(cells),
        "kinds": dict(Counter(g.kind for g in out)),
    }


# ----------------------------------------------------------------------------- 3 rollout


def collect_round(ctx: Any, state: RunState, r: int, gens: list[Gen], key: jax.Array):
    """Step 3: N rollouts per variant; transitions into the replay; deployments into memory.

    Returns (failed episodes of the first rollout, per-mode [successes, trials], record)."""
    from coda.critic import episodes_from_rollout
    from coda.potentials import compile_program

    lc, s = ctx.config.loop, ctx.strategy
    N, j = int(lc.rollouts_per_variant), int(lc.num_candidates)
    by_mode: dict[int | None, list[Gen]] = defaultdict(list)
    for g in gens:
        by_mode[g.mode_id].append(g)
    episodes, per_mode = [], defaultdict(lambda: [0, 0])
    per_program = defaultdict(lambda: [0, 0])
    hits = n_targeted = n_ok = n_all = 0
    transitions = 0
    jobs = []  # (mode, its generated scenes, bucket) in bucket order
    for mode_id, group in sorted(by_mode.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        for bucket in collect.buckets_of([g.compiled for g in group], int(lc.bucket_size)):
            jobs.append((mode_id, group, bucket))
    # N rollouts per bucket with the collection sampler, the buckets spread over the hosts
    results = collect.rollouts_of(
        ctx.backend,
        [b for _, _, b in jobs],
        lambda b: ctx.collect_agents(b, j),
        key,
        ctx.config.sim.num_chunks,
        N,
        distributed.host_split(objects=True),
    )
    for bi, (mode_id, group, bucket) in enumerate(jobs):
        meta = {id(g.compiled): g for g in group}
        phi = None
        src = state.mode_potentials.get(mode_id) if mode_id is not None else None
        if src is not None and s.potential != "none":
            try:
                phi = compile_program(src, bucket.sym).phi
            except Exception as e:  # noqa: BLE001 - a program that does not fit this bucket
                log.info("Φ of mode %s does not compile for this bucket: %s", mode_id, e)
        succ = np.zeros(len(bucket.variants), int)
        for n, (res, sec) in enumerate(results[bi]):
            ctx.spend(res.env_steps, sec)
            ok = np.asarray(res.success)[: len(bucket.variants)]
            succ += ok
            if s.update in ("awr", "frozen"):
                info = ctx.learner.add_rollout(res, bucket, phi_fn=phi)
                transitions += info["transitions"]
            if n == 0:
                ctx.last_results.append((bucket, res))
            if n == 0 and s.critique:  # the failures the critic reads (step 4)
                mids = [meta[id(c)].mode_id for c in bucket.variants]
                eps = episodes_from_rollout(bucket, res, failed_only=True, mode_ids=mids)
                episodes += eps
                for ep in eps:
                    gg = meta[id(ep.compiled)]
                    if gg.kind == "targeted" and ep.stopped_phase == gg.phase:
                        hits += 1
        for c, k_ok in zip(bucket.variants, succ, strict=True):
            g = meta[id(c)]
            n_all += N
            n_ok += int(k_ok)
            if g.kind == "targeted":
                n_targeted += 1
            if g.mode_id is not None:
                per_mode[g.mode_id][0] += int(k_ok)
                per_mode[g.mode_id][1] += N
            per_program[c.scene.program or ""][0] += int(k_ok)
            per_program[c.scene.program or ""][1] += N
        with ctx.memory.batch():
            for c, k_ok in zip(bucket.variants, succ, strict=True):
                g = meta[id(c)]
                fac = memory_factor(g.factor) if g.factor else None
                sp = ctx.memory.add_scene_program(
                    c.scene.program or c.scene.to_json(),
                    round=r,
                    mode_id=g.mode_id,
                    factor=fac,
                    meta={"kind": g.kind, "family": g.family},
                )
                ctx.memory.add_deployment(
                    round=r,
                    scene_program_id=sp,
                    n_rollouts=N,
                    n_success=int(k_ok),
                    policy=s.name,
                )
    for prog, (k, n) in per_program.items():
        if prog in ctx.pool_programs and n:
            state.program_success[prog] = k / n
    return (
        episodes,
        dict(per_mode),
        {
            "collect_success": n_ok / n_all if n_all else math.nan,
            "rollouts": n_all,
            "transitions": transitions,
            "targeting_precision": targeting_precision(hits, n_targeted),
            "targeted": n_targeted,
        },
    )


# ----------------------------------------------------------------------------- 4 critique


def critique_and_validate(ctx: Any, state: RunState, r: int, episodes, key: jax.Array) -> dict:
    """Step 4: ≤ C critiques per mode (clustered into modes), then candidate validation."""
    from coda.critic import select_failures
    from coda.registries import CRITICS

    lc, cc = ctx.config.loop, ctx.config.critic
    k_sel, k_crit, k_val = jax.random.split(key, 3)
    chosen = select_failures(episodes, int(lc.critiques_per_mode), k_sel)
    out: dict[str, Any] = {"critiqued": len(chosen), "diagnosed": 0, "validated": [], "refuted": []}
    if chosen:
        bound = collect.BoundFactory(ctx.agents, 1)  # shared compiled agents, bucket tokens
        # everything a critic may take; each registered critic picks what its signature names
        critic = CRITICS.build(
            cc.name,
            policy=bound,  # the offline critic's probes roll the policy out again
            params=bound.params,
            backend=ctx.backend,
            num_chunks=int(ctx.config.sim.num_chunks),
            n_probes=int(cc.n_probes),
            n_repeats=int(cc.n_repeats),
            memory=ctx.memory,
            split=distributed.host_split(),  # each host rolls out its share of the probes
            client=ctx.llm,  # the VLM critic: keyframes + factored scene to the critic role
            max_keyframes=int(cc.max_keyframes),
            image_size=int(cc.image_size),
            log_dir=os.path.join(ctx.workdir, "llm") if distributed.is_primary() else None,
        )
        t0 = time.perf_counter()
        crits = critic.diagnose(chosen, k_crit, round=r)
        ctx.budgets.critiques += len(chosen)
        out["critic_seconds"] = time.perf_counter() - t0
        for c in crits:
            if c.ok and c.assignment is not None:
                out["diagnosed"] += 1
                parents = state.mode_parents.setdefault(int(c.assignment.mode_id), [])
                if len(parents) < int(lc.max_parents):
                    parents.append(c.episode.compiled.scene.to_dict())
                ctx.failures.append((r, c))
    # refuted modes the policy keeps failing in: one more control experiment (0 = never)
    out["reopened"] = ctx.memory.reopen_refuted(
        round=r, min_new=int(lc.retest_after), max_retests=int(lc.max_retests)
    )
    # execution modes name no scene factor to vary: no control experiment can test them
    cands = [
        m
        for m in ctx.memory.modes(status="candidate")
        if m.id in state.mode_parents and m.factor != "execution"
    ]
    hs = distributed.host_split()  # each host rolls out its share of the buckets
    for i, m in enumerate(cands[: int(lc.max_validations)]):
        parents = [Scene.from_dict(d) for d in state.mode_parents[m.id]]
        control = str(lc.get("validation_control", "matched"))
        vb = None
        for bases in validation_bases(ctx, parents):
            try:
                vb = make_validation_batches(
                    m,
                    bases,
                    int(lc.validate_n),
                    r * 1000 + i,
                    control=control,
                    engine=ctx.engine,
                    memory=ctx.memory,
                )
                break
            except (GenerationError, ValueError, KeyError) as e:
                log.info("mode %d: no validation batches on %d bases (%s)", m.id, len(bases), e)
        if vb is None:
            continue
        nc = int(ctx.config.sim.num_chunks)
        kt, kc = jax.random.split(jax.random.fold_in(k_val, i))
        size = int(lc.bucket_size)
        t, st = collect.success_of(
            ctx.backend, [v.compiled for v in vb.targeted], ctx.agents, kt, nc, size, hs
        )
        c, sc = collect.success_of(
            ctx.backend, [v.compiled for v in vb.control], ctx.agents, kc, nc, size, hs
        )
        ctx.spend(st + sc, 0.0)
        n = len(t)
        res = V.one_sided_test(int(t.sum()), n, int(c.sum()), n, method="fisher")
        V.apply_validation(ctx.memory, m.id, res, round=r, critic=cc.name)
        row = {"mode": m.id, "targeted": int(t.sum()), "control": int(c.sum()), "n": n}
        row["p_value"] = float(res.p_value)
        if res.accepted:
            store_program(
                ctx.memory,
                vb.program,
                round=r,
                mode_id=m.id,
                variants=[v.record() for v in vb.targeted],
                meta={"validation": res.as_dict(), "control_factor": vb.control_factor},
            )
            out["validated"].append(row)
        else:
            out["refuted"].append(row)
    return out


def validation_bases(ctx: Any, parents: list[Scene]) -> list[list[Scene]]:
    """The scenes a mode's targeted / control pairs (and, once it is validated, its targeted
    variants) are edited from, in the order to try.

    ``loop.validation_bases="pool"``: the training pool's scenes of the parents' families
    first, then the parents. The parents are the diagnosed *failures*, where the policy rarely
    succeeds whatever is edited, so both batches sit near 0 % and no test can separate them
    (benchmarks/results/validation_power.md); pool scenes are in the success band, where
    recreating the difficulty can show. ``"parents"``: the parents only (the method's reading).
    """
    if str(ctx.config.loop.get("validation_bases", "parents")) != "pool":
        return [parents]
    fams = {p.task["family"] for p in parents}
    pool = [c.scene for c in ctx.pool if c.scene.task["family"] in fams]
    return [pool, parents] if pool else [parents]


# ----------------------------------------------------------------------------- 5 Φ + routing


def potentials_and_routing(ctx: Any, state: RunState, r: int, per_mode, key: jax.Array) -> dict:
    """Step 5: Text2potential for validated modes without Φ; route modes by their band."""
    from coda.potentials import CompileRequest, FailureRecord, compile_with_repair
    from coda.potentials.checks import Demos
    from coda.potentials.task import make_compiler
    from coda.train.routing import RoutingConfig, route

    s, lc = ctx.strategy, ctx.config.loop
    out: dict[str, Any] = {"compiled": [], "routing": {}}
    validated = [m for m in ctx.memory.modes(status="validated") if m.id in state.mode_parents]
    if s.potential != "none":
        name = str(ctx.config.get("potentials", {}).get("compiler", "offline"))
        compiler = make_compiler(name, ctx.llm)  # R_hone: offline templates | the llm client
        todo = [m for m in validated if m.id not in state.mode_potentials]
        scenes = [Scene.from_dict(state.mode_parents[m.id][0]) for m in todo]
        # one scene per mode, padded to a multiple of the devices MJX shards a bucket over
        mult = int(getattr(ctx.backend, "n_devices", 1))
        buckets = [collect.buckets_of([compile_scene(x)], 1, multiple_of=mult)[0] for x in scenes]
        demos = collect.rollouts_of(  # the modes' planner demos spread over the hosts of a run
            ctx.backend,
            buckets,
            lambda b: (planner_for(b), None),
            key,
            ctx.config.sim.num_chunks,
            1,
            distributed.host_split(objects=True),
            key_of=lambda i, n: key,
        )
        for m, scene, bucket, ((res, sec),) in zip(todo, scenes, buckets, demos, strict=True):
            ctx.spend(res.env_steps, sec)
            req = CompileRequest(
                task=scene.task,
                diagnosis=FailureRecord(m.factor, m.phase, m.label),
                mode_id=m.id,
                round=r,
                ablation=s.potential == "task_description",
            )
            pot, attempts = compile_with_repair(
                compiler,
                req,
                bucket.sym,
                Demos.from_rollout(res, bucket),
                ctx.memory,
                max_rounds=3 if s.repair else 1,
                probe=False,
            )
            ok = pot is not None
            if ok:
                state.mode_potentials[m.id] = attempts[-1].source
            out["compiled"].append({"mode": m.id, "accepted": ok, "attempts": len(attempts)})
    rates = {str(m): k / n for m, (k, n) in per_mode.items() if n}
    if rates:
        routing = route(rates, {k: True for k in rates}, RoutingConfig(band=tuple(lc.band)), r)
        out["routing"] = dict(routing.tools)
        out["lower_importance"] = routing.lower_importance
    return out


def planner_rollouts(ctx: Any, buckets: list, key: jax.Array, sigma: float | None = None):
    """[(bucket, result)]: one planner rollout per bucket (bucket i keyed fold_in(key, i); DART
    noise `sigma` on the executed actions), the buckets spread over the hosts of a run. A task
    the source's planner cannot script gets no rollout."""
    from coda.sim.planner import Perturbed

    keep = [i for i, b in enumerate(buckets) if ctx.source.planner(b) is not None]

    def agent_for(b):
        agent = ctx.source.planner(b)
        return (agent if sigma is None else Perturbed(agent, sigma)), None

    got = collect.rollouts_of(
        ctx.backend,
        [buckets[i] for i in keep],
        agent_for,
        key,
        int(ctx.config.sim.num_chunks),
        1,
        distributed.host_split(objects=True),
        key_of=lambda j, n: jax.random.fold_in(key, keep[j]),
    )
    out = []
    for i, ((res, sec),) in zip(keep, got, strict=True):
        ctx.spend(res.env_steps, sec)
        out.append((buckets[i], res))
    return out


def bc_demos_for(ctx: Any, gens: list[Gen], key: jax.Array):
    """Planner demos on the given scenes as BC rows (routing's "bc", and the SFT baseline)."""
    buckets = collect.buckets_of([g.compiled for g in gens], int(ctx.config.loop.bucket_size))
    rows = [
        collect.demo_rows(ctx.learner, ctx.agents, res, b)
        for b, res in planner_rollouts(ctx, buckets, key)
    ]
    return collect.concat_batches(rows)


# ----------------------------------------------------------------------------- 6 updates


def update(ctx: Any, state: RunState, r: int, gens: list[Gen], routing: dict, n_in_band: int, key):
    """Step 6: K_Q critic + K_π policy updates (AWR, or BC for the SFT baseline)."""
    s, lc, lrn = ctx.strategy, ctx.config.loop, ctx.learner
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    k_demo, k_q, k_p = jax.random.split(key, 3)
    if s.update == "bc":
        new = bc_demos_for(ctx, gens, k_demo)
        demos = collect.concat_batches([ctx.sft_demos, new], int(lc.demo_cap))
        if demos is not None:
            ctx.sft_demos = demos
            m = lrn.update_policy_bc(demos, int(lc.policy_updates), k_p)
            out["policy_loss"] = m.get("loss")
    elif s.update in ("awr", "frozen") and lrn.replay_size > 0:
        bc_modes = {int(k) for k, v in routing.items() if v == "bc"}
        novel_demos = bool(lc.get("novel_demos", False))
        demo_gens = [g for g in gens if g.mode_id in bc_modes]
        if novel_demos:  # the fresh scenes' planner demos join the demo rows AWR batches mix in
            demo_gens += [g for g in gens if g.kind == "novel"]
        if demo_gens:
            new = bc_demos_for(ctx, demo_gens, k_demo)
            demos = collect.concat_batches([ctx.sft_demos, new], int(lc.demo_cap))
            if demos is not None:
                lrn.set_demos(demos)
                if novel_demos:
                    ctx.sft_demos = demos  # kept across rounds (as the sft baseline's are)
            out["demo_rows_added"] = 0 if new is None else int(new.actions.shape[0])
        blocks = 0
        while True:
            kq, kp = jax.random.fold_in(k_q, blocks), jax.random.fold_in(k_p, blocks)
            cm = lrn.update_critic(int(lc.critic_updates), kq)
            pm = lrn.update_policy_awr(int(lc.policy_updates), kp)
            blocks += 1
            # trigger: another block while enough modes are informative and success moves
            more = n_in_band >= int(lc.min_modes_in_band) and state.plateau < int(
                lc.plateau_updates
            )
            if not more or blocks > int(lc.max_extra_blocks):
                break
        out.update(td_error=cm.get("td_error"), policy_loss=pm.get("loss"), blocks=blocks)
    ctx.budgets.update_seconds += time.perf_counter() - t0
    ctx.budgets.policy_updates = lrn.policy_updates
    ctx.budgets.critic_updates = lrn.critic_updates
    return out


# ----------------------------------------------------------------------------- 7 modes


def update_modes(ctx: Any, state: RunState, r: int, per_mode) -> dict:
    """Step 7 (memory side): p̂_j and learning progress from this round's rollouts; the band."""
    lo, hi = tuple(ctx.config.loop.band)
    for mid, (k, n) in per_mode.items():
        try:
            before = ctx.memory.get_mode(mid).hardness
        except KeyError:  # forgotten (no-memory ablation)
            continue
        m = ctx.memory.record_mode_outcome(mid, round=r, n_success=k, n_trials=n)
        if before is not None:
            ctx.memory.record_learning_progress(mid, round=r, before=before, after=m.hardness)
    modes = ctx.memory.modes()
    stats = [
        mode_stats(
            m,
            times_allocated=state.times_allocated.get(m.id, 0),
            has_program=m.id in state.mode_potentials,
        )
        for m in modes
    ]
    in_band = [
        m.id
        for m in modes
        if m.status == "validated" and m.hardness is not None and lo <= m.hardness <= hi
    ]
    refut = V.refutation_rates_from_store(ctx.memory)
    return {
        "modes": dict(Counter(m.status for m in modes)),
        "modes_in_band": len(in_band),
        "band_actions": dict(Counter(a for _, a in band_actions(stats, (lo, hi)))),
        "refutation_rate": {k: v.rate for k, v in refut.items()},
        "mode_table": [
            {
                "id": m.id,
                "factor": m.factor,
                "phase": m.phase,
                "cause": m.label,
                "status": m.status,
                "hardness": m.hardness,
                "lp": m.importance,
                "diagnoses": m.n_diagnoses,
                "trials": m.n_trials,
            }
            for m in modes
        ],
    }
