"""One learner for §3.5: collect with best-of-j, fit the chunk critic, improve the policy.

Host code stays thin: rollouts go through `coda.sim.rollout` backends with a `PolicyAgent`
(params traced), rewards / shaping / n-step targets are computed on the rollout's endpoint
states. Everything the learner learns from lives on device in a `LearnerState` pytree (policy
and critic train states, a `Replay` ring buffer of chunk transitions, a buffer of planner demos,
the obs norm, an rng and step counters), which orbax saves and restores (`save` / `restore`: a
round can resume). Updates run K per jitted call (`LearnerConfig.updates_per_call`): a
`lax.scan` whose minibatches are drawn from the device buffers inside the scan
(`coda.policy.train.make_scan_train_step`, `coda.train.multistep.make_critic_scan`). Prompts
are cut to the width the data needs (`coda.policy.base.token_bucket`), not `max_token_len`.
With a `mesh` (`multistep.data_mesh()`), minibatches are split over its devices (data parallel).

Modes (`LearnerConfig.mode`):
* ``shaped``: critic targets use r̃ with Φ (β > 0), AWR policy updates;
* ``sparse``: the same with β = 0 (the sparse-only ablation);
* ``frozen_policy``: the policy never changes; the critic is trained and only selects chunks.

The config, the state pytree and the on-device batches are in `coda.train.learner_state`,
re-exported here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from coda import lifetime
from coda.policy import init_train_state, train_config
from coda.policy.base import Batch, Observation, Policy, fit_prompt, prompt_width, token_bucket
from coda.policy.train import make_scan_train_step
from coda.sim.observe import image_spec_for, with_images
from coda.sim.state import SimState, flat_observation
from coda.train import awr as awr_lib
from coda.train import critic_quality
from coda.train.agent import AgentParams, ObsNorm, PolicyAgent, bucket_prompts, state_features
from coda.train.critic import ChunkCritic, Transitions, init_critic_state, make_critic_fit

# the config, state and batches live in coda.train.learner_state; re-exported here
from coda.train.learner_state import (  # noqa: F401
    ADVANTAGES,
    MODES,
    OTHER_SOURCE,
    SOURCES,
    LearnerConfig,
    LearnerState,
    awr_rows,
    cut_batch,
    demo_rows,
    empty_demos,
    empty_transitions,
    restore_learner_state,
    save_learner_state,
)
from coda.train.multistep import check_divisible, make_critic_scan, replicate, shard_rows
from coda.train.replay import Replay
from coda.train.replay import insert as replay_insert
from coda.train.shaping import (
    chunk_discount,
    chunk_rewards,
    chunk_transitions,
    concat_transitions,
    mc_returns,
)


def _cfg_key(cfg) -> tuple:
    return tuple(sorted((k, v) for k, v in cfg.items()))


def _critic_key(critic: ChunkCritic) -> tuple:
    return tuple(getattr(critic, f.name) for f in dataclasses.fields(critic))


# A learner holds its own programs; this cache only lets Learners of one (policy object, config,
# mesh) share them. Keyed by the policy's identity, so a new run never hits an old run's entry:
# bounded, and emptied when a run ends (coda.lifetime.release).
_PROGRAMS = lifetime.RunCache("train.learner_programs", maxsize=8)


def _programs(policy: Policy, tcfg_key: tuple, critic_key: tuple, mesh: Mesh | None) -> dict:
    """Compiled-once update programs shared by every Learner of one (policy, config, mesh)."""

    def make() -> dict:
        tcfg = train_config(**dict(tcfg_key))
        critic = ChunkCritic(*critic_key)
        return {"tcfg": tcfg, "critic": critic, "mesh": mesh, "policy": {}, "critic_scan": {}}

    return _PROGRAMS.get((policy, tcfg_key, critic_key, mesh), make)


class Learner:
    """The policy / critic train states, the device replay of chunk transitions and demos, the
    obs norm — one `LearnerState` (`self.state`) — and the K-step update programs."""

    def __init__(
        self,
        policy: Policy,
        cfg: LearnerConfig,
        rng: jax.Array,
        *,
        policy_params: Any = None,
        norm: ObsNorm | None = None,
        total_policy_steps: int = 10000,
        mesh: Mesh | None = None,
    ):
        self.policy, self.cfg, self.mesh = policy, cfg, mesh
        check_divisible(cfg.policy_batch, mesh, "policy batch")
        check_divisible(cfg.critic_batch, mesh, "critic batch")
        if cfg.finetune_batch:
            check_divisible(cfg.finetune_batch, mesh, "fine-tuning batch")
        k_pol, k_crit = jax.random.split(rng)
        params = policy_params if policy_params is not None else policy.init(k_pol)
        ft = {}
        if cfg.finetune_start > 0 and cfg.finetune_lr > 0:
            ft = dict(
                finetune_start=cfg.finetune_start,
                finetune_lr=cfg.finetune_lr,
                finetune_warmup=1,
                finetune_decay_steps=max(cfg.finetune_steps, 2),
                finetune_ema_decay=float(cfg.finetune_ema),
            )
        self.tcfg = train_config(
            peak_lr=cfg.policy_lr,
            end_lr=cfg.policy_lr / 10,
            warmup_steps=cfg.policy_warmup,
            decay_steps=max(total_policy_steps, cfg.policy_warmup + 1),
            ema_decay=cfg.policy_ema or None,
            **ft,
        )
        critic = ChunkCritic.for_policy(
            policy, num_heads=cfg.critic_heads, hidden=cfg.critic_hidden
        )
        self.image_spec = image_spec_for(policy.config)  # None: state-only policy
        self._progs = _programs(policy, _cfg_key(self.tcfg), _critic_key(critic), mesh)
        self.critic = self._progs["critic"]
        state = LearnerState(
            policy=init_train_state(params, self.tcfg),
            critic=init_critic_state(self.critic, k_crit, cfg.critic_lr),
            replay=Replay.create(empty_transitions(policy), cfg.replay_size),
            demos=Replay.create(empty_demos(policy), cfg.demo_capacity),
            norm=norm or ObsNorm.identity(int(policy.config.max_state_dim)),
            rng=jax.random.key_data(jax.random.fold_in(rng, 2)),
            policy_updates=jnp.zeros((), jnp.int32),
            critic_updates=jnp.zeros((), jnp.int32),
            token_len=jnp.zeros((), jnp.int32),
        )
        self.state = replicate(state, mesh)
        self._fresh = 0  # replay rows added since the last critic update (held_out_ranking)

    # ----------------------------------------------------------------- state views
    pstate = property(lambda self: self.state.policy, lambda self, v: self._set(policy=v))
    cstate = property(lambda self: self.state.critic, lambda self, v: self._set(critic=v))
    norm = property(lambda self: self.state.norm, lambda self, v: self._set(norm=v))

    def _set(self, **kw) -> None:
        # on the mesh like the rest of the state (host-built values: the obs norm, the rng); a
        # multi-host checkpoint can only save arrays that span the hosts (no-op without a mesh)
        self.state = self.state.replace(**replicate(kw, self.mesh))

    @property
    def policy_updates(self) -> int:
        return int(self.state.policy_updates)

    @property
    def critic_updates(self) -> int:
        return int(self.state.critic_updates)

    @property
    def replay_size(self) -> int:
        """Transitions currently in the device replay."""
        return int(self.state.replay.size)

    @property
    def token_len(self) -> int:
        """Prompt width (bucketed) every update trains on: what the buffered data needs."""
        return max(int(self.state.token_len), 1)

    def next_key(self) -> jax.Array:
        """A fresh key from the learner's own rng (part of the state, so resumes continue it)."""
        key, sub = jax.random.split(jax.random.wrap_key_data(self.state.rng))
        self._set(rng=jax.random.key_data(key))
        return sub

    # ----------------------------------------------------------------- acting
    def agent(self, bucket, num_candidates: int | None = None) -> PolicyAgent:
        """The rollout agent for `bucket`, its prompts cut to the width they need."""
        j = self.cfg.num_candidates if num_candidates is None else num_candidates
        # keyed by the instructions (what the agent's tokens are), not id(bucket): a new bucket
        # can reuse a collected one's id and would act on its prompts
        key = (tuple(bucket_prompts(bucket)), j)
        cache = self.__dict__.setdefault("_agents", {})
        if len(cache) >= 1024:
            cache.clear()
        if key not in cache:
            agent = PolicyAgent.for_bucket(
                self.policy, bucket, num_candidates=j, critic=self.critic if j > 1 else None
            )
            width = token_bucket(prompt_width(agent.token_mask), agent.tokens.shape[1])
            tok, tm = fit_prompt(agent.tokens, agent.token_mask, width)
            cache[key] = dataclasses.replace(agent, tokens=tok, token_mask=tm)
        return cache[key]

    @property
    def acting_params(self) -> Any:
        """The policy weights rollouts use: the EMA when enabled, else the raw weights."""
        ema = self.pstate.ema_params
        return ema if ema is not None else self.pstate.params

    def agent_params(self) -> AgentParams:
        return AgentParams(self.acting_params, self.norm, self.cstate.params)

    def rollout(self, backend, bucket, rng, num_chunks: int, num_candidates: int | None = None):
        agent = self.agent(bucket, num_candidates)
        return backend.rollout(bucket, agent, self.agent_params(), rng, num_chunks)

    def fit_norm(self, states: SimState) -> None:
        self.norm = ObsNorm.fit(flat_observation(states), int(self.policy.config.max_state_dim))

    # ----------------------------------------------------------------- data
    def add_rollout(
        self,
        result,
        bucket,
        phi_fn: Callable[[SimState], jax.Array] | None = None,
        source: np.ndarray | None = None,
    ) -> dict:
        """Rewards (+ Φ at endpoints when shaping) -> n-step transitions into the replay (with
        the chunk-start frames for an image-mode policy, rendered from qpos if not recorded);
        `source` [B]: each variant's `SOURCES` id (None: "other")."""
        result = with_images(result, bucket, self.image_spec)
        beta = self.cfg.effective_beta
        cr = chunk_rewards(
            result,
            bucket.success,
            bucket.sym,
            gamma=self.cfg.gamma,
            horizon=int(self.policy.config.action_horizon),
            phi_fn=phi_fn if beta > 0 else None,
        )
        agent = self.agent(bucket, 1)
        tr = chunk_transitions(
            result,
            cr,
            tokens=agent.tokens,
            token_mask=agent.token_mask,
            norm=self.norm,
            max_state_dim=agent.max_state_dim,
            beta=beta,
            gamma=self.cfg.gamma,
            horizon=agent.horizon,
            n_step=self.cfg.n_step,
            source=source,
        )
        self.add_transitions(tr)
        return {"transitions": int(tr.size), "rewarded": int(cr.done.sum())}

    def add_transitions(self, tr: Transitions) -> None:
        """Append chunk transitions [N] to the device replay (ring buffer, on device)."""
        if tr.size == 0:
            return
        width = int(self.policy.config.max_token_len)
        need = token_bucket(prompt_width(tr.token_mask), width)
        tok, tm = fit_prompt(tr.tokens, tr.token_mask, width)
        tr = tr.replace(tokens=jnp.asarray(tok, jnp.int32), token_mask=jnp.asarray(tm))
        if tr.source is None:  # rows added without a source count as "other"
            tr = tr.replace(source=jnp.full((tr.size,), OTHER_SOURCE, jnp.int32))
        self._set(
            replay=replay_insert(self.state.replay, replicate(tr, self.mesh)),
            token_len=jnp.maximum(self.state.token_len, need),
        )
        self._fresh += int(tr.size)  # not yet trained on

    def set_demos(self, demos: Batch | None) -> None:
        """Planner demos D_t mixed into AWR batches (`LearnerConfig.demo_fraction`); None clears."""
        empty = Replay.create(empty_demos(self.policy), self.cfg.demo_capacity)
        if demos is None:
            self._set(demos=replicate(empty, self.mesh))
            return
        n = int(demos.actions.shape[0])
        if n > self.cfg.demo_capacity:
            raise ValueError(f"{n} demo rows exceed LearnerConfig.demo_capacity")
        width = int(self.policy.config.max_token_len)
        need = token_bucket(prompt_width(demos.obs.token_mask), width)
        rows = replicate(demo_rows(demos, width), self.mesh)
        self._set(
            demos=replay_insert(replicate(empty, self.mesh), rows),
            token_len=jnp.maximum(self.state.token_len, need),
        )

    @property
    def has_demos(self) -> bool:
        return int(self.state.demos.size) > 0

    # ----------------------------------------------------------------- updates
    def _chunks(self, rng: jax.Array, steps: int):
        keys = jax.random.split(rng, steps)
        k = self.cfg.updates_per_call
        return [keys[i : i + k] for i in range(0, steps, k)]

    def _critic_scan(self):
        token_len = self.token_len
        progs = self._progs["critic_scan"]
        if token_len not in progs:
            c = self.cfg
            progs[token_len] = make_critic_scan(
                self.critic,
                c.critic_lr,
                c.critic_tau,
                c.critic_batch,
                token_len=token_len,
                mesh=self.mesh,
            )
        return progs[token_len]

    def update_critic(self, steps: int, rng: jax.Array) -> dict:
        """`steps` critic updates on replay minibatches, K per jitted call."""
        if self.replay_size == 0:
            raise ValueError("no transitions yet: add a rollout first")
        fit, metrics = self._critic_scan(), {}
        cstate = self.state.critic
        for keys in self._chunks(rng, steps):
            cstate, metrics = fit(cstate, self.state.replay, keys)
        self._set(critic=cstate, critic_updates=self.state.critic_updates + steps)
        self._fresh = 0
        return {k: float(v) for k, v in metrics.items()}

    def held_out_ranking(self) -> dict[str, float]:
        """The critic's AUCs on the chunks added since its last update, before it trains on
        them (`critic_quality.ranking`); empty when there are none."""
        n = self._fresh
        if n == 0:
            return {}
        rows = critic_quality.newest_rows(self.state.replay, n)
        return critic_quality.ranking(self.critic, self.state.critic.params, rows, self.token_len)

    @property
    def policy_batch(self) -> int:
        """Rows per policy update now: `finetune_batch` once the fine-tuning phase has begun."""
        c = self.cfg
        if c.finetune_batch and c.finetune_start and self.policy_updates >= c.finetune_start:
            return int(c.finetune_batch)
        return int(c.policy_batch)

    def _policy_scan(self, kind: str, token_len: int, n_demo: int = 0):
        c, b = self.cfg, self.policy_batch  # programs are shared: the settings are the key
        key = (kind, n_demo, token_len, b, c.awr_temperature, c.awr_max_weight)
        key += (c.awr_positive_only, c.advantage)
        progs = self._progs["policy"]
        if key not in progs:
            c, mesh = self.cfg, self.mesh
            if kind == "awr":
                sample = functools.partial(
                    _awr_sample,
                    self.critic,
                    batch=b,
                    n_demo=n_demo,
                    temperature=c.awr_temperature,
                    max_weight=c.awr_max_weight,
                    token_len=token_len,
                    positive_only=c.awr_positive_only,
                    advantage=c.advantage,
                    spec=self.image_spec,
                )
            elif kind == "bc_mix":
                sample = functools.partial(
                    _bc_mix_sample, batch=b, n_new=n_demo, token_len=token_len
                )
            else:
                sample = functools.partial(_bc_sample, batch=b, token_len=token_len)
            shard = functools.partial(shard_rows, mesh=mesh)
            progs[key] = make_scan_train_step(self.policy, self.tcfg, sample, shard=shard)
        return progs[key]

    def _run_policy(self, run, data, steps: int, rng: jax.Array) -> dict:
        pstate, metrics = self.state.policy, {}
        for keys in self._chunks(rng, steps):
            pstate, metrics = run(pstate, data, keys)
        self._set(policy=pstate, policy_updates=self.state.policy_updates + steps)
        return {k: float(v) for k, v in metrics.items()}

    def _n_demo(self) -> int:
        return round(self.cfg.demo_fraction * self.policy_batch) if self.has_demos else 0

    def update_policy_awr(self, steps: int, rng: jax.Array) -> dict:
        """AWR on replay transitions with advantages from the current critic, K per call."""
        if self.cfg.mode == "frozen_policy":
            return {"skipped": 1.0}
        if self.replay_size == 0:
            raise ValueError("no transitions yet: add a rollout first")
        run = self._policy_scan("awr", self.token_len, self._n_demo())
        data = (self.state.critic.params, self.state.replay, self.state.demos)
        return self._run_policy(run, data, steps, rng)

    def awr_policy_batch(self, rng: jax.Array, with_source: bool = False) -> Any:
        """One AWR batch as the updates draw it (`awr_rows`): own-rollout rows weighted by their
        advantage, then round(demo_fraction · batch) demo rows with weight 1 when demos are set.
        `with_source`: (batch, the own rows' `SOURCES` ids)."""
        c, n_demo, token_len, b = self.cfg, self._n_demo(), self.token_len, self.policy_batch
        progs = self._progs["policy"]
        key = ("awr_batch", n_demo, token_len, b, c.awr_temperature)
        key += (c.awr_max_weight, c.awr_positive_only, c.advantage, with_source)
        if key not in progs:
            progs[key] = jax.jit(
                functools.partial(
                    _awr_sample,
                    self.critic,
                    batch=b,
                    n_demo=n_demo,
                    temperature=c.awr_temperature,
                    max_weight=c.awr_max_weight,
                    token_len=token_len,
                    positive_only=c.awr_positive_only,
                    advantage=c.advantage,
                    spec=self.image_spec,
                    with_source=with_source,
                )
            )
        data = (self.state.critic.params, self.state.replay, self.state.demos)
        return progs[key](data, rng)

    def weight_shares(self, rng: jax.Array, n_batches: int = 16) -> dict[str, float]:
        """Each data source's share of the AWR loss's total weight, over `n_batches` batches
        drawn as the updates draw them: own-rollout rows by `SOURCES`, and "demos" (the policy
        loss is linear in the row weights, so this is each source's share of the gradient's
        weight). Empty dict before any transition."""
        if self.replay_size == 0:
            return {}
        tot = np.zeros(len(SOURCES) + 1)
        for i in range(n_batches):
            batch, src = self.awr_policy_batch(jax.random.fold_in(rng, i), with_source=True)
            w, src = np.asarray(batch.weights, np.float64), np.asarray(src)
            n_own = src.shape[0]
            tot[: len(SOURCES)] += np.bincount(src, w[:n_own], minlength=len(SOURCES))
            tot[-1] += w[n_own:].sum()
        total = tot.sum()
        if total <= 0:
            return {name: 0.0 for name in (*SOURCES, "demos")}
        return {name: float(x / total) for name, x in zip((*SOURCES, "demos"), tot, strict=True)}

    def update_policy_bc(
        self,
        demos: Batch,
        steps: int,
        rng: jax.Array,
        new: np.ndarray | None = None,
        new_share: float = 0.0,
    ) -> dict:
        """Behaviour cloning on planner demos D_t (weights 1), K per call. With `new` (a bool
        per row) and `new_share` > 0, every batch draws round(`new_share` · batch) rows from
        the `new` rows and the rest from the others (both uniformly); otherwise every row
        alike."""
        if self.cfg.mode == "frozen_policy":
            return {"skipped": 1.0}
        width = token_bucket(prompt_width(demos.obs.token_mask), demos.obs.tokens.shape[1])
        replay = Replay.from_rows(demo_rows(demos, width))
        if new is None or new_share <= 0.0 or not np.any(new) or np.all(new):
            data = replicate(replay, self.mesh)
            return self._run_policy(self._policy_scan("bc", width), data, steps, rng)
        n_new = min(max(round(new_share * self.policy_batch), 1), self.policy_batch - 1)
        data = replicate((replay, jnp.asarray(new, bool)), self.mesh)
        return self._run_policy(self._policy_scan("bc_mix", width, n_new), data, steps, rng)

    def demo_batch(self, result, bucket, only_success: bool = True) -> Batch:
        agent = self.agent(bucket, 1)
        keep = np.asarray(result.valid, bool) & ~np.asarray(result.failed, bool)
        if only_success:
            keep &= np.asarray(result.success, bool)
        result = with_images(result, bucket, self.image_spec, keep)
        return awr_lib.demo_batch(
            result,
            agent.tokens,
            agent.token_mask,
            self.norm,
            agent.max_state_dim,
            only_success,
            self.image_spec,
        )

    # ----------------------------------------------------------------- checkpoints
    def save(self, path: str) -> None:
        """Write the whole `LearnerState` to `path` (a new directory) with orbax."""
        save_learner_state(path, self.state)

    def restore(self, path: str) -> None:
        """Replace the state with the one saved at `path` (same config / policy structure)."""
        self.state = replicate(restore_learner_state(path, self.state), self.mesh)


def _awr_sample(critic, data, key, **kw) -> Batch:
    critic_params, replay, demos = data
    return awr_rows(critic, critic_params, replay, demos, key, **kw)


def _bc_sample(demos: Replay, key: jax.Array, *, batch: int, token_len: int) -> Batch:
    return cut_batch(demos.sample(key, batch), token_len)


def _bc_mix_sample(data, key: jax.Array, *, batch: int, n_new: int, token_len: int) -> Batch:
    """`n_new` rows drawn among the `new` rows, `batch - n_new` among the others."""
    demos, new = data
    k_new, k_old = jax.random.split(key)
    i_new, _ = demos.sample_indices_where(k_new, n_new, new)
    i_old, _ = demos.sample_indices_where(k_old, batch - n_new, ~new)
    return cut_batch(demos.take(jnp.concatenate([i_new, i_old])), token_len)


def value_error(critic: ChunkCritic, params, obs: Observation, phi, beta, mc) -> float:
    """Mean squared error of the implied unshaped value V(o) + βΦ(o) against MC sparse returns."""
    v = critic.v(params, obs) + beta * jnp.asarray(phi, jnp.float32)
    return float(jnp.mean(jnp.square(v - jnp.asarray(mc, jnp.float32))))


def critic_convergence(
    policy: Policy,
    results: list,
    bucket,
    phi_fn: Callable[[SimState], jax.Array],
    *,
    norm: ObsNorm,
    rng: jax.Array,
    steps: int = 300,
    eval_every: int = 25,
    beta: float = 1.0,
    cfg: LearnerConfig = LearnerConfig(),
):
    """Train two fresh critics on the same rollouts, with Φ (β) and without (β = 0), and record
    the error of each one's implied *unshaped* value V(o) + βΦ(o) against Monte-Carlo sparse
    returns — the quantity both must learn, so the curves are comparable. -> (steps, err_with,
    err_without) for `routing.refinement_report`.
    """
    agent = PolicyAgent.for_bucket(policy, bucket)
    h = agent.horizon
    big_gamma = chunk_discount(cfg.gamma, h)
    obs_parts, phi_parts, mc_parts = [], [], []
    data = {}
    for b in (beta, 0.0):
        trs = []
        for res in results:
            cr = chunk_rewards(
                res, bucket.success, bucket.sym, gamma=cfg.gamma, horizon=h, phi_fn=phi_fn
            )
            trs.append(
                chunk_transitions(
                    res,
                    cr,
                    tokens=agent.tokens,
                    token_mask=agent.token_mask,
                    norm=norm,
                    max_state_dim=agent.max_state_dim,
                    beta=b,
                    gamma=cfg.gamma,
                    horizon=h,
                    n_step=cfg.n_step,
                )
            )
            if b == beta:
                rows, cols = np.nonzero(cr.mask)
                x, xm = state_features(res.states, norm, agent.max_state_dim)
                x, xm = np.asarray(x)[rows, cols], np.asarray(xm)[rows, cols]
                obs_parts.append(Observation(agent.tokens[rows], agent.token_mask[rows], x, xm))
                phi_parts.append(cr.phi[rows, cols])
                mc_parts.append(mc_returns(cr.reward, cr.mask, big_gamma)[rows, cols])
        data[b] = concat_transitions(trs)
    obs = jax.tree.map(lambda *xs: jnp.asarray(np.concatenate(xs, 0)), *obs_parts)
    phi, mc = np.concatenate(phi_parts), np.concatenate(mc_parts)
    critic = ChunkCritic.for_policy(policy, num_heads=cfg.critic_heads, hidden=cfg.critic_hidden)
    fit = make_critic_fit(critic, cfg.critic_lr, cfg.critic_tau, cfg.critic_batch)
    curves = {}
    k_init, k_data = jax.random.split(rng)
    keys = jax.random.split(k_data, (steps // eval_every, eval_every))
    for b in (beta, 0.0):
        state = init_critic_state(critic, k_init, cfg.critic_lr)  # same init and minibatches
        grid, errs = [], []
        for i, ks in enumerate(keys, start=1):
            state, _ = fit(state, data[b], ks)
            grid.append(i * eval_every)
            errs.append(value_error(critic, state.params, obs, phi, b, mc))
        curves[b] = (grid, errs)
    return curves[beta][0], curves[beta][1], curves[0.0][1]
