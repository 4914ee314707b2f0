"""What every step of a run reads and nothing replaces: `Services`, built once per run.

The services are frozen: config, strategy, scene source, physics backend, learner handle (its
device state is the `LearnerState` pytree it holds), memory, LLM client, engine, the compiled
rollout agents — and, once round 0 has made them, the training pool and the fixed suites
(`with_start`). Steps receive them and return values; what crosses rounds is the `RunState`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import jax
from ml_collections import ConfigDict

from coda.loop import collect, distributed
from coda.loop import llm as loop_llm
from coda.loop.sources import make_source
from coda.loop.strategies import Strategy
from coda.policy import get_policy
from coda.policy.configs import obs_overrides
from coda.registries import ENGINES
from coda.sim.rollout import make_backend
from coda.train import Learner, LearnerConfig


def policy_overrides(pc: ConfigDict, horizon: int) -> dict[str, Any]:
    """`coda.policy.get_policy` overrides from the config's policy size fields."""
    w, ew, depth, heads = int(pc.width), int(pc.expert_width), int(pc.depth), int(pc.heads)

    def stack(width: int) -> dict[str, int]:  # the VLM and the action expert share depth, heads
        return dict(
            width=width,
            depth=depth,
            mlp_dim=4 * width,
            num_heads=heads,
            num_kv_heads=1,
            head_dim=w // heads,
        )

    return dict(
        max_token_len=int(pc.max_token_len),
        vlm=stack(w),
        expert=stack(ew),
        state_hidden=int(pc.state_hidden),
        num_state_tokens=int(pc.num_state_tokens),
        num_sample_steps=int(pc.sample_steps),
        sample_noise_scale=float(pc.sample_noise_scale),
        action_horizon=int(horizon),
        **obs_overrides(pc),
        **({"max_state_dim": int(pc.max_state_dim)} if int(pc.get("max_state_dim", 0)) else {}),
    )


def learner_config(config: ConfigDict, mode: str, advantage: str = "") -> tuple[LearnerConfig, int]:
    """The loop's `LearnerConfig` from `config.loop` and its total policy updates (round 0's
    `bc_steps` + every round's blocks); `advantage` (a strategy's own estimator) overrides
    `loop.advantage`."""
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
        advantage=str(advantage or lc.advantage),
        policy_ema=float(lc.policy_ema),
        finetune_ema=float(lc.finetune_ema),
        updates_per_call=int(lc.updates_per_call),
        replay_size=int(lc.replay_size),
        demo_capacity=int(lc.demo_cap),
        finetune_start=int(lc.bc_steps) if finetune else 0,
        finetune_lr=float(lc.finetune_lr),
        finetune_batch=int(lc.finetune_batch),
        finetune_steps=after,
    )
    return cfg, int(lc.bc_steps) + after


@dataclasses.dataclass(frozen=True)
class Services:
    """What the steps read (module docstring)."""

    config: ConfigDict
    workdir: str
    strategy: Strategy
    source: Any  # coda.loop.sources: FamilySource | LiberoSource
    backend: Any  # coda.sim.rollout: NativeBackend | MjxBackend
    mesh: Any  # the learner's data mesh (None: one device)
    policy: Any
    learner: Any  # coda.train.Learner: the handle whose LearnerState the updates advance
    memory: Any  # coda.memory store of the strategy's memory mode
    llm: Any  # coda.llm client (host 0 calls, others receive), None when no role needs one
    usage: loop_llm.UsageSync  # the LLM ledger's growth -> Budgets
    engine: Any  # coda.engine engine (offline rules | LLM coding agent)
    agents: collect.Agents  # compiled acting agents (evaluation, critic probes, validation)
    collect_agents: collect.Agents  # the training rollouts' agents (their own flow prior)
    pool: tuple = ()  # the verified training pool (round 0)
    pool_programs: frozenset = frozenset()
    suites: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # fixed eval suites

    def with_start(self, pool: list, suites: Mapping[str, Any]) -> Services:
        """These services with round 0's pool and suites."""
        programs = frozenset(p.scene.program for p in pool)
        return dataclasses.replace(self, pool=tuple(pool), pool_programs=programs, suites=suites)


def make_services(config: ConfigDict, workdir: str, strategy: Strategy) -> Services:
    """Source, backend, policy + learner, memory, LLM, engine and agents of a run."""
    source = make_source(config)  # sim.source: our families or a LIBERO suite
    backend = str(config.sim.backend)
    if source.native_only and backend == "auto":
        backend = "native"
    backend = make_backend(backend, nthread=config.sim.nthread or None)
    lc = config.loop
    # data parallel over every device (every host's in a multi-host run): coda.loop.distributed
    mesh = distributed.learner_mesh(str(lc.get("data_parallel", "auto")))
    over = policy_overrides(config.policy, config.sim.horizon)
    policy = get_policy(config.policy.name, **over)
    recipe = strategy.update
    mode = recipe.learner_mode(strategy.potential)
    cfg, total = learner_config(config, mode, getattr(recipe, "advantage", ""))
    learner = Learner(
        policy, cfg, jax.random.PRNGKey(config.seed + 1), total_policy_steps=total, mesh=mesh
    )
    # only host 0 writes the run's memory; other hosts keep an identical replica in RAM
    path = os.path.join(workdir, "memory.sqlite") if distributed.is_primary() else ":memory:"
    memory = strategy.memory.open(path)
    llm = (  # host 0 calls the backend and broadcasts every reply
        distributed.make_llm(lambda: loop_llm.make_client(config, workdir))
        if loop_llm.needs_llm(config)
        else None
    )
    # each registered engine takes what its signature names (the LLM engine: the client and
    # the memory its edit programs are stored in)
    engine = ENGINES.build(config.engine.name, client=llm, memory=memory)
    acting = distributed.acting_devices(backend)  # the weights rollouts act with
    agents = collect.Agents(learner, devices=acting)
    # training-data rollouts (step 3) may sample a narrower flow prior than evaluation
    cn = float(lc.collect_noise_scale)
    collect_agents = agents
    if cn != float(config.policy.sample_noise_scale):
        narrow = get_policy(config.policy.name, **{**over, "sample_noise_scale": cn})
        collect_agents = collect.Agents(learner, policy=narrow, devices=acting)
    return Services(
        config=config,
        workdir=workdir,
        strategy=strategy,
        source=source,
        backend=backend,
        mesh=mesh,
        policy=policy,
        learner=learner,
        memory=memory,
        llm=llm,
        usage=loop_llm.UsageSync(llm),
        engine=engine,
        agents=agents,
        collect_agents=collect_agents,
    )
