"""`run(config, workdir)`: the run folder, round 0, the rounds, checkpoints and resume, the report.

Run folder:
    config.json  pool.jsonl (training pool)  scenes.jsonl  suites.json (fixed suites)
    memory.sqlite (live)  checkpoints/round_XXXX/ (learner, memory snapshot, state.json)
    metrics.jsonl  tb/ (TensorBoard)  failures/ (diagnosed failure traces)  report.md/.html
Re-running with the same workdir (or `--resume`) continues after the last complete round.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import time
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict

from coda import lifetime, runconfig
from coda.loop import checkpoint as ckpt
from coda.loop import collect, distributed, records, rounds
from coda.loop.compat import adopt_start, check_same_config
from coda.loop.evaluation import evaluate_suites, load_suites, pooled_ood, save_suites
from coda.loop.state import Budgets, RunState
from coda.loop.strategies import Strategy, get_strategy
from coda.policy.configs import obs_overrides
from coda.registries import ENGINES

log = logging.getLogger(__name__)


def policy_overrides(pc: ConfigDict, horizon: int) -> dict[str, Any]:
    """`coda.policy.get_policy` overrides from the config's policy size fields."""
    w, ew, depth, heads = int(pc.width), int(pc.expert_width), int(pc.depth), int(pc.heads)
    return dict(
        max_token_len=int(pc.max_token_len),
        vlm=dict(
            width=w,
            depth=depth,
            mlp_dim=4 * w,
            num_heads=heads,
            num_kv_heads=1,
            head_dim=w // heads,
        ),
        expert=dict(
            width=ew,
            depth=depth,
            mlp_dim=4 * ew,
            num_heads=heads,
            num_kv_heads=1,
            head_dim=w // heads,
        ),
        state_hidden=int(pc.state_hidden),
        num_state_tokens=int(pc.num_state_tokens),
        num_sample_steps=int(pc.sample_steps),
        sample_noise_scale=float(pc.sample_noise_scale),
        action_horizon=int(horizon),
        **obs_overrides(pc),
        **({"max_state_dim": int(pc.max_state_dim)} if int(pc.get("max_state_dim", 0)) else {}),
    )


def learner_config(config: ConfigDict, mode: str) -> tuple[Any, int]:
    """The loop's `LearnerConfig` from `config.loop` and its total policy updates (round 0's
    `bc_steps` + every round's blocks)."""
    from coda.train import LearnerConfig

    lc = config.loop
    after = int(lc.rounds) * int(lc.policy_updates) * (1 + int(lc.max_extra_blocks))
    # loop.finetune_lr / finetune_batch: rounds >= 1 learn at their own rate and / or batch
    # (with a rate, BC decays over bc_steps alone: round 0 does not depend on later rounds)
    finetune = float(lc.finetune_lr) > 0 or int(lc.finetune_batch) > 0
    cfg = LearnerConfig(
        mode=mode,
        num_candidates=int(lc.num_candidates),
        policy_lr=float(lc.policy_lr),
        policy_batch=int(lc.policy_batch),
        policy_warmup=int(lc.policy_warmup),
        critic_batch=int(lc.critic_batch),
        demo_fraction=float(lc.demo_fraction),
        awr_positive_only=bool(lc.awr_positive_only),
        advantage=str(lc.advantage),
        policy_ema=float(lc.policy_ema),
        updates_per_call=int(lc.updates_per_call),
        replay_size=int(lc.replay_size),
        demo_capacity=int(lc.demo_cap),
        finetune_start=int(lc.bc_steps) if finetune else 0,
        finetune_lr=float(lc.finetune_lr),
        finetune_batch=int(lc.finetune_batch),
        finetune_steps=after,
    )
    return cfg, int(lc.bc_steps) + after


class Context:
    """What every step reads: config, strategy, backend, learner, memory, pool, suites."""

    def __init__(self, config: ConfigDict, workdir: str, strategy: Strategy) -> None:
        from coda.memory import MEMORY_MODES
        from coda.policy import get_policy
        from coda.sim.rollout import make_backend
        from coda.train import Learner

        self.config, self.workdir, self.strategy = config, workdir, strategy
        from coda.loop.sources import make_source

        self.source = make_source(config)  # sim.source: our families or a LIBERO suite
        backend = str(config.sim.backend)
        if self.source.native_only and backend == "auto":
            backend = "native"
        self.backend = make_backend(backend, nthread=config.sim.nthread or None)
        lc = config.loop
        # data parallel over every device (every host's in a multi-host run): coda.loop.distributed
        self.mesh = distributed.learner_mesh(str(lc.get("data_parallel", "auto")))
        self.policy = get_policy(
            config.policy.name, **policy_overrides(config.policy, config.sim.horizon)
        )
        # frozen_policy: round 0 still clones the planner (the SFT start); `freeze` then stops
        # every later policy update
        mode = strategy.learner_mode if strategy.update != "frozen" else "shaped"
        cfg, total = learner_config(config, mode)
        self.learner = Learner(
            self.policy,
            cfg,
            jax.random.PRNGKey(config.seed + 1),
            total_policy_steps=total,
            mesh=self.mesh,
        )
        # only host 0 writes the run's memory; other hosts keep an identical replica in RAM
        path = os.path.join(workdir, "memory.sqlite") if distributed.is_primary() else ":memory:"
        self.memory = MEMORY_MODES[strategy.memory](path if strategy.memory != "none" else None)
        from coda.loop import llm as loop_llm

        self.llm = (  # host 0 calls the backend and broadcasts every reply
            distributed.make_llm(lambda: loop_llm.make_client(config, workdir))
            if loop_llm.needs_llm(config)
            else None
        )
        self.sync_llm = loop_llm.UsageSync(self.llm)
        # each registered engine takes what its signature names (the LLM engine: the client
        # and the memory its edit programs are stored in)
        self.engine = ENGINES.build(config.engine.name, client=self.llm, memory=self.memory)
        acting = distributed.acting_devices(self.backend)  # the weights rollouts act with
        self.agents = collect.Agents(self.learner, devices=acting)
        # training-data rollouts (step 3) may sample a narrower flow prior than evaluation
        cn = float(lc.collect_noise_scale)
        if cn != float(config.policy.sample_noise_scale):
            over = {**policy_overrides(config.policy, config.sim.horizon), "sample_noise_scale": cn}
            self.collect_agents = collect.Agents(
                self.learner, policy=get_policy(config.policy.name, **over), devices=acting
            )
        else:
            self.collect_agents = self.agents
        self.eval_agents: dict = {}
        self.budgets = Budgets()
        self.pool: list = []
        self.pool_programs: set[str] = set()
        self.suites: dict = {}
        self.sft_demos = None
        self.demo_scenes: list = []  # extra layouts of the pool's programs, demos only
        self.failures: list = []
        self.last_results: list = []
        self.digests: dict[str, str] = {}  # multi-host: what the hosts agreed on last round

    def freeze(self) -> None:
        """After round 0: the frozen-policy ablation keeps the SFT weights from here on."""
        import dataclasses

        if self.strategy.update == "frozen":
            self.learner.cfg = dataclasses.replace(self.learner.cfg, mode="frozen_policy")

    def spend(self, steps: int, seconds: float) -> None:
        self.budgets.env_steps += int(steps)
        self.budgets.rollout_seconds += float(seconds)

    def evaluate(self, key: jax.Array, names=None) -> tuple[dict, int]:
        agent_for = self.agents  # the rollouts' compiled agents (j = 1), current weights
        suites = self.suites if names is None else {n: self.suites[n] for n in names}
        t0 = time.perf_counter()
        res, steps = evaluate_suites(
            agent_for,
            suites,
            self.backend,
            key,
            int(self.config.sim.num_chunks),
            int(self.config.sim.horizon),
            split=distributed.host_split(),  # each host rolls out its share of the buckets
        )
        self.spend(steps, time.perf_counter() - t0)
        return res, steps


def _step(bar, what: str) -> None:
    """A step of a round begins: the progress bar says which, and the process's memory
    mappings are checked (one warning near vm.max_map_count, `coda.lifetime.check`)."""
    bar.set_description(what)
    lifetime.check(what)


# ----------------------------------------------------------------------------- round 0


def _seed_pool(ctx: Context) -> tuple[list, list[str]]:
    """Training pool (verified seeded scenes of `ctx.source`) and held-out task programs,
    deterministic in the seed; host 0 writes scenes.jsonl, pool.jsonl, heldout_tasks.json."""
    pool, held, rows, generated = ctx.source.seed_pool()
    if distributed.is_primary():  # every host seeds the same pool; host 0 writes it
        with open(os.path.join(ctx.workdir, "scenes.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        with open(os.path.join(ctx.workdir, "pool.jsonl"), "w") as f:
            f.writelines(json.dumps(p.scene.to_dict()) + "\n" for p in pool)
        with open(os.path.join(ctx.workdir, "heldout_tasks.json"), "w") as f:
            json.dump(held, f)
    ctx.budgets.scenes_generated += generated
    ctx.budgets.scenes_accepted += len(pool)
    return pool, held


def _load_pool(ctx: Context) -> list:
    with open(os.path.join(ctx.workdir, "pool.jsonl")) as f:
        return [ctx.source.compile(json.loads(line)) for line in f if line.strip()]


def _sft_demos(ctx: Context, key: jax.Array, fit: bool) -> Any:
    """Planner demos on the pool and the demo layouts (norm fitted on them when `fit`), plus one
    DART pass per `loop.demo_dart` noise sigma (perturbed execution, clean planner labels: the
    planner shows how to recover from the errors a cloned policy makes) -> BC rows."""
    lc = ctx.config.loop
    results = []
    buckets = collect.buckets_of(list(ctx.pool) + list(ctx.demo_scenes), int(lc.bucket_size))
    passes = [None, *(float(s) for s in lc.demo_dart)]
    for p, sigma in enumerate(passes):
        got = rounds.planner_rollouts(ctx, buckets, jax.random.fold_in(key, p), sigma)
        results += [(b, res, sigma) for b, res in got]
    if fit:
        collect.fit_norm(ctx.learner, [r for _, r, s in results if s is None])
    rows = [collect.demo_rows(ctx.learner, ctx.agents, r, b) for b, r, _ in results]
    planner = float(
        np.mean(
            [np.asarray(r.success)[np.asarray(r.valid)].mean() for _, r, s in results if s is None]
        )
    )
    return collect.concat_batches(rows, int(lc.demo_cap)), planner


def _bc_with_progress(ctx: Context, demos: Any, steps: int, key: jax.Array) -> dict:
    """BC in blocks of `BC_BLOCK` updates under a progress bar with an ETA."""
    from tqdm.auto import tqdm

    m: dict = {}
    quiet = not distributed.is_primary()  # one progress display per run: host 0's
    with tqdm(
        total=steps, desc="BC updates", unit="upd", leave=False, mininterval=2.0, disable=quiet
    ) as pb:
        done, i = 0, 0
        while done < steps:
            n = min(BC_BLOCK, steps - done)
            m = ctx.learner.update_policy_bc(demos, n, jax.random.fold_in(key, i))
            done, i = done + n, i + 1
            pb.update(n)
            pb.set_postfix(loss=f"{m.get('loss', float('nan')):.4f}")
    return m


BC_BLOCK = 100


def start(ctx: Context, state: RunState, key: jax.Array, bar) -> dict:
    """Round 0: seeding, planner demos, BC (the SFT start), the fixed suites, first evaluation."""
    c, lc, s = ctx.config, ctx.config.loop, ctx.strategy
    k_demo, k_bc, k_eval, k_pre = jax.random.split(key, 4)
    _step(bar, "round 0: seeding")
    pool, held = _seed_pool(ctx)
    if not pool:
        raise RuntimeError("no seeded scene passed verification; nothing to train or evaluate")
    ctx.pool = pool
    ctx.pool_programs = {p.scene.program for p in pool}
    _step(bar, "round 0: planner demos")
    ctx.demo_scenes = ctx.source.demo_scenes(pool)
    demos, planner = _sft_demos(ctx, k_demo, fit=True)
    ctx.sft_demos = demos
    _step(bar, "round 0: suites")
    ctx.suites = ctx.source.build_suites(pool, held)
    if distributed.is_primary():
        save_suites(ctx.suites, os.path.join(ctx.workdir, "suites.json"))
    row: dict[str, Any] = {"round": 0, "planner_success_pool": planner, "pool": len(pool)}
    row["demo_layouts"] = len(pool) + len(ctx.demo_scenes)
    row["demo_rows"] = 0 if demos is None else int(demos.actions.shape[0])
    if c.eval.before_bc:
        _step(bar, "round 0: untrained policy on ID")
        pre, _ = ctx.evaluate(k_pre, ["id"])
        row["untrained_id"] = pre["id"].as_dict()
    if s.bc_start and demos is not None:
        _step(bar, "round 0: BC on planner demos")
        t0 = time.perf_counter()
        m = _bc_with_progress(ctx, demos, int(lc.bc_steps), k_bc)
        ctx.budgets.update_seconds += time.perf_counter() - t0
        row["bc_loss"] = m.get("loss")
        if lc.demo_fraction > 0:
            ctx.learner.set_demos(demos)
    ctx.budgets.policy_updates = ctx.learner.policy_updates
    _step(bar, "round 0: evaluation")
    res, _ = ctx.evaluate(k_eval)
    row["suites"] = {n: r.as_dict() for n, r in res.items()}
    row["ood"] = pooled_ood(res).as_dict()
    return row


# ----------------------------------------------------------------------------- rounds


def one_round(ctx: Context, state: RunState, r: int, key: jax.Array, bar) -> dict:
    """Steps 1-7 of round r (module docstring of `coda.loop.rounds`)."""
    ks = jax.random.split(key, 6)
    ctx.memory.begin_round(r)
    if ctx.strategy.memory == "none":  # nothing survives a round: nor do the loop's mode tables
        state.mode_parents.clear()
        state.mode_potentials.clear()
        state.times_allocated.clear()
    ctx.last_results = []
    t0 = time.perf_counter()
    row: dict[str, Any] = {"round": r}
    _step(bar, f"round {r}: allocate + generate")
    reqs, row["allocation"] = rounds.plan(ctx, state, r)
    gens, gen_info = rounds.generate(ctx, state, r, reqs)
    row.update(gen_info)
    ctx.budgets.scenes_generated += gen_info.get("generated", 0)
    ctx.budgets.scenes_accepted += gen_info.get("accepted", 0)
    per_mode: dict = {}
    routing: dict = {}
    if gens and ctx.strategy.update != "none":
        _step(bar, f"round {r}: rollouts ({len(gens)} scenes)")
        episodes, per_mode, info = rounds.collect_round(ctx, state, r, gens, ks[0])
        row.update(info)
        if ctx.strategy.critique:
            _step(bar, f"round {r}: critique + validate")
            row["critique"] = rounds.critique_and_validate(ctx, state, r, episodes, ks[1])
        _step(bar, f"round {r}: Φ + routing")
        pr = rounds.potentials_and_routing(ctx, state, r, per_mode, ks[2])
        routing = pr.get("routing", {})
        row["potentials"] = pr
    modes = rounds.update_modes(ctx, state, r, per_mode)
    row.update(modes)
    if ctx.strategy.update != "none" and gens:
        _step(bar, f"round {r}: updates")
        row["update"] = rounds.update(ctx, state, r, gens, routing, modes["modes_in_band"], ks[3])
    if r % int(ctx.config.eval.every) == 0 or r == int(ctx.config.loop.rounds):
        _step(bar, f"round {r}: evaluation")
        res, _ = ctx.evaluate(ks[4])
        row["suites"] = {n: x.as_dict() for n, x in res.items()}
        row["ood"] = pooled_ood(res).as_dict()
    row["seconds"] = time.perf_counter() - t0
    return row


def _decide(ctx: Context, state: RunState, row: dict) -> str:
    """Step 8: "" to continue, else why the run stops."""
    lc = ctx.config.loop
    r = row["round"]
    idr = row.get("suites", {}).get("id", {}).get("rate")
    if idr is not None and not math.isnan(idr):
        if idr > state.best_id + 1e-9:
            state.best_id, state.plateau = idr, 0
        else:
            state.plateau += int(lc.policy_updates)
    if r >= int(lc.rounds):
        return f"{lc.rounds} rounds done"
    if int(lc.max_env_steps) and ctx.budgets.env_steps >= int(lc.max_env_steps):
        return f"env-step budget spent ({ctx.budgets.env_steps:,} >= {int(lc.max_env_steps):,})"
    validated = row.get("modes", {}).get("validated", 0)
    if (
        ctx.strategy.critique
        and r >= int(lc.min_stop_round)
        and validated
        and not row.get("modes_in_band")
    ):
        return "no validated mode in the success band"
    return ""


# ----------------------------------------------------------------------------- run


def _drop_partial(workdir: str, last: int | None) -> None:
    """What a killed run left beyond its last complete round: with no complete round, the live
    memory, TensorBoard events and failure traces (round 0 starts over); else failure traces of
    later rounds (memory is restored from the round's snapshot, TensorBoard purged)."""
    import glob
    import shutil

    if last is None:
        for f in glob.glob(os.path.join(workdir, "memory.sqlite*")):
            os.remove(f)
        for d in ("tb", "failures", ckpt.CKPT_DIR):
            shutil.rmtree(os.path.join(workdir, d), ignore_errors=True)
        return
    for f in glob.glob(os.path.join(workdir, "failures", "round*_*")):
        if int(os.path.basename(f)[len("round") :].split("_")[0]) > last:
            os.remove(f)


def run(
    config: ConfigDict, workdir: str, resume: bool = True, release: bool = True
) -> dict[str, Any]:
    """The whole run (or its continuation after the last complete round); returns the summary.

    With `release`, what the run compiled is released when it ends, however it ends
    (`coda.lifetime.release`): a process can run one run after another (a study, a notebook,
    the test suite) without its memory mappings growing towards vm.max_map_count."""
    lifetime.count_compiles()
    try:
        return _run(config, workdir, resume)
    finally:
        if release:
            lifetime.release()


def _run(config: ConfigDict, workdir: str, resume: bool) -> dict[str, Any]:
    from tqdm.auto import tqdm

    from coda import report
    from coda.sim import tasks

    runconfig.validate(config, families=tasks.FAMILIES)  # before anything is written
    distributed.check_devices(config)
    strategy = get_strategy(config.strategy)
    primary = distributed.is_primary()  # host 0 alone writes the run folder
    os.makedirs(workdir, exist_ok=True)
    last = distributed.broadcast_json(ckpt.latest_round(workdir))  # host 0's view of the folder
    if last is not None and not resume:
        raise runconfig.ConfigError(
            f"--workdir={workdir!r} already holds rounds 0..{last}; resume, or use a new folder"
        )
    if last is not None:
        check_same_config(workdir, config)
    if primary:
        _drop_partial(workdir, last)
    if last is None and config.loop.get("start_from"):
        if primary:
            adopt_start(config, workdir, strategy)
        last = 0
    if primary:  # replaced atomically: on a resume the other hosts may be reading it (above)
        path = os.path.join(workdir, "config.json")
        with open(path + ".tmp", "w") as f:
            f.write(config.to_json_best_effort(indent=2))
        os.replace(path + ".tmp", path)
    distributed.barrier("run_folder_ready")
    t_start = time.perf_counter()
    ctx = Context(config, workdir, strategy)
    base = jax.random.PRNGKey(config.seed)
    total = int(config.loop.rounds) + 1
    bar = tqdm(total=total, unit="round", dynamic_ncols=True, mininterval=1.0, disable=not primary)
    if last is None:
        state = RunState(key=[int(x) for x in np.asarray(jax.random.key_data(base)).ravel()])
        row = start(ctx, state, jax.random.fold_in(base, 0), bar)
        ctx.sync_llm(ctx.budgets)
        row["budgets"] = copy.deepcopy(vars(ctx.budgets))
        state.round, state.budgets = 0, ctx.budgets
        state.history.append(row)
        _decide(ctx, state, row)
        state = _settle(ctx, state)
        ckpt.save_round(workdir, state, ctx.learner, ctx.memory, {"sft_demos": ctx.sft_demos})
        records.process(workdir, 0, primary)
        if primary:
            records.write_metrics(workdir, state)
            records.tensorboard(workdir, [row], 0)
        if primary:
            bar.write(records.progress_line(row, ctx.budgets))
    else:
        state, extras = ckpt.load_round(workdir, last, ctx.learner, ctx.memory)
        ctx.pool = _load_pool(ctx)
        ctx.pool_programs = {p.scene.program for p in ctx.pool}
        ctx.suites = load_suites(os.path.join(workdir, "suites.json"))
        # the saved demo rows, in the tree structure of a demo batch (no re-collection)
        from coda.train.learner import empty_demos

        ctx.sft_demos = ckpt.restore_batch(extras.get("sft_demos"), empty_demos(ctx.policy))
        ctx.budgets = state.budgets
        if primary:
            records.write_metrics(workdir, state)
            records.tensorboard(workdir, [], state.round + 1)
        if primary:
            bar.write(f"resuming after round {last} from {ckpt.round_dir(workdir, last)}")
    if state.round == 0 and config.loop.get("memory_from"):  # coda.loop.transfer
        from coda.loop import transfer

        if transfer.seed_run(ctx, state, workdir)["created"]:  # round 0 again, with the memory
            ckpt.save_round(workdir, state, ctx.learner, ctx.memory, {"sft_demos": ctx.sft_demos})
    ctx.freeze()
    bar.update(state.round + 1)
    while not state.stopped:
        state.stopped = _decide_after_load(ctx, state)
        if state.stopped:
            break
        r = state.round + 1
        row = one_round(ctx, state, r, jax.random.fold_in(base, r), bar)
        ctx.sync_llm(ctx.budgets)
        row["budgets"] = copy.deepcopy(vars(ctx.budgets))
        state.history.append(row)
        state.round, state.budgets = r, ctx.budgets
        state.stopped = _decide(ctx, state, row)
        state = _settle(ctx, state)
        records.save_failures(ctx, r)
        ckpt.save_round(workdir, state, ctx.learner, ctx.memory, {"sft_demos": ctx.sft_demos})
        records.process(workdir, r, primary)
        if primary:
            records.write_metrics(workdir, state)
            records.tensorboard(workdir, [row], r)
        bar.update(1)
        if primary:
            bar.write(records.progress_line(row, ctx.budgets))
    bar.close()
    if not primary:  # host 0 writes the report; this host's record is what it agreed to
        ctx.memory.close()
        return {
            "headline": f"host {distributed.process_index()}: {state.stopped}",
            "digests": ctx.digests,
        }
    if ctx.llm is not None:
        ctx.llm.save_usage()  # <workdir>/llm/usage.json (this process's calls, by role and round)
    summary = report.write_report(workdir, config, state, ctx, time.perf_counter() - t_start)
    ctx.memory.close()
    return summary


def _settle(ctx: Context, state: RunState) -> RunState:
    """Round end of a multi-host run: the hosts check they agree (run state without wall
    times and LLM spend, learner parameters, memory), then adopt host 0's run state (its
    budgets included). Identity otherwise."""
    if distributed.process_count() == 1:
        return state
    mine = distributed.digests(state, ctx.learner.state, ctx.memory)
    ctx.digests = distributed.check_agreement(f"round {state.round}", mine, state)
    log.info("round %d: %d hosts agree: %s", state.round, distributed.process_count(), mine)
    state = distributed.adopt_primary_state(state)
    ctx.budgets = state.budgets
    return state


def _decide_after_load(ctx: Context, state: RunState) -> str:
    """A run restored at its last round (or whose limits were lowered) stops here."""
    if state.round >= int(ctx.config.loop.rounds):
        return state.stopped or f"{ctx.config.loop.rounds} rounds done"
    return state.stopped
