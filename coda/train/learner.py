"""One learner for §3.5: collect with best-of-j, fit the chunk critic, improve the policy.

Host code stays thin: rollouts go through `coda.sim.rollout` backends with a `PolicyAgent`
(params traced), rewards / shaping / n-step targets are computed on the rollout's endpoint
states, and every update is a jitted step (the policy's `make_train_step`, the critic's
`make_critic_train_step`).

Modes (`LearnerConfig.mode`):
* ``shaped``: critic targets use r̃ with Φ (β > 0), AWR policy updates;
* ``sparse``: the same with β = 0 (the sparse-only ablation);
* ``frozen_policy``: the policy never changes; the critic is trained and only selects chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda.policy import init_train_state, make_train_step, train_config
from coda.policy.base import Batch, Observation, Policy
from coda.sim.state import SimState, flat_observation
from coda.train import awr as awr_lib
from coda.train.agent import AgentParams, ObsNorm, PolicyAgent
from coda.train.critic import (
    ChunkCritic,
    Transitions,
    init_critic_state,
    make_critic_fit,
    sample_batch,
)
from coda.train.shaping import chunk_rewards, chunk_transitions, concat_transitions

MODES = ("shaped", "sparse", "frozen_policy")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    mode: str = "shaped"
    gamma: float = 0.99  # per control step
    beta: float = 1.0  # shaping scale (forced to 0 in "sparse" mode)
    n_step: int = 3  # chunk backups
    num_candidates: int = 4  # best-of-j for data collection (1 = plain sampling)
    critic_heads: int = 2
    critic_hidden: int = 256
    critic_lr: float = 3e-4
    critic_tau: float = 0.01
    critic_batch: int = 128
    policy_batch: int = 32
    policy_lr: float = 3e-4
    policy_warmup: int = 50
    # EMA of the policy weights (0 = off). With it, rollouts act with the EMA weights: long BC
    # runs with small noisy flow-matching batches give a far more precise policy that way; keep
    # it off for short AWR fine-tuning, where an EMA would hide the few updates made.
    policy_ema: float = 0.0
    # Fraction of every AWR batch drawn from the planner demos D_t (`set_demos`), weight 1: an
    # anchor to demonstrated behaviour while the policy's own successes are rare (demo mixing as
    # in AWAC / RLPD); 0 = pure AWR on the replay.
    demo_fraction: float = 0.0
    awr_temperature: float = 0.1
    awr_max_weight: float = 20.0
    replay_size: int = 20000  # transitions kept (oldest dropped)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown learner mode {self.mode!r}; valid: {list(MODES)}")
        if not 0.0 <= self.demo_fraction < 1.0:
            raise ValueError(f"demo_fraction must be in [0, 1), got {self.demo_fraction}")

    @property
    def effective_beta(self) -> float:
        return 0.0 if self.mode == "sparse" else float(self.beta)


class Learner:
    """Holds the policy / critic train states, the replay of chunk transitions and the obs norm."""

    def __init__(
        self,
        policy: Policy,
        cfg: LearnerConfig,
        rng: jax.Array,
        *,
        policy_params: Any = None,
        norm: ObsNorm | None = None,
        total_policy_steps: int = 10000,
    ):
        self.policy, self.cfg = policy, cfg
        k_pol, k_crit = jax.random.split(rng)
        params = policy_params if policy_params is not None else policy.init(k_pol)
        self.tcfg = train_config(
            peak_lr=cfg.policy_lr,
            end_lr=cfg.policy_lr / 10,
            warmup_steps=cfg.policy_warmup,
            decay_steps=max(total_policy_steps, cfg.policy_warmup + 1),
            ema_decay=cfg.policy_ema or None,
        )
        self.pstate = init_train_state(params, self.tcfg)
        self._pstep = make_train_step(policy, self.tcfg)
        self.critic = ChunkCritic.for_policy(
            policy, num_heads=cfg.critic_heads, hidden=cfg.critic_hidden
        )
        self.cstate = init_critic_state(self.critic, k_crit, cfg.critic_lr)
        self._cfit = make_critic_fit(self.critic, cfg.critic_lr, cfg.critic_tau, cfg.critic_batch)
        self.norm = norm or ObsNorm.identity(int(policy.config.max_state_dim))
        self.replay: Transitions | None = None
        self.demos: Batch | None = None
        self.policy_updates = 0
        self._adv = jax.jit(self.critic.advantage)

    # ----------------------------------------------------------------- acting
    def agent(self, bucket, num_candidates: int | None = None) -> PolicyAgent:
        j = self.cfg.num_candidates if num_candidates is None else num_candidates
        key = (id(bucket), j)
        cache = self.__dict__.setdefault("_agents", {})
        if key not in cache:
            cache[key] = PolicyAgent.for_bucket(
                self.policy, bucket, num_candidates=j, critic=self.critic if j > 1 else None
            )
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
        self, result, bucket, phi_fn: Callable[[SimState], jax.Array] | None = None
    ) -> dict:
        """Rewards (+ Φ at endpoints when shaping) -> n-step transitions appended to the replay."""
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
        )
        parts = [self.replay, tr] if self.replay is not None else [tr]
        self.replay = concat_transitions(parts)
        if self.replay.size > self.cfg.replay_size:
            self.replay = jax.tree.map(lambda x: x[-self.cfg.replay_size :], self.replay)
        return {"transitions": int(tr.size), "rewarded": int(cr.done.sum())}

    # ----------------------------------------------------------------- updates
    def update_critic(self, steps: int, rng: jax.Array) -> dict:
        if self.replay is None:
            raise ValueError("no transitions yet: add a rollout first")
        self.cstate, metrics = self._cfit(self.cstate, self.replay, jax.random.split(rng, steps))
        return {k: float(v) for k, v in metrics.items()}

    def update_policy_awr(self, steps: int, rng: jax.Array) -> dict:
        """AWR on replay transitions with advantages from the current critic."""
        if self.cfg.mode == "frozen_policy":
            return {"skipped": 1.0}
        if self.replay is None:
            raise ValueError("no transitions yet: add a rollout first")
        metrics = {}
        for k in jax.random.split(rng, steps):
            k1, k2 = jax.random.split(k)
            self.pstate, metrics = self._pstep(self.pstate, self.awr_policy_batch(k1), k2)
            self.policy_updates += 1
        return {k: float(v) for k, v in metrics.items()}

    def set_demos(self, demos: Batch | None) -> None:
        """Planner demos D_t mixed into AWR batches (`LearnerConfig.demo_fraction`)."""
        self.demos = demos

    def awr_policy_batch(self, rng: jax.Array) -> Batch:
        """One AWR batch: replay rows weighted exp(A/λ) (normalised, clipped), then
        round(demo_fraction · batch) demo rows with weight 1 when demos are set."""
        k_replay, k_demo = jax.random.split(rng)
        nb = self.cfg.policy_batch
        n_demo = round(self.cfg.demo_fraction * nb) if self.demos is not None else 0
        mb = sample_batch(self.replay, k_replay, nb - n_demo)
        obs = mb.obs()
        adv = self._adv(self.cstate.params, obs, mb.actions)
        batch = awr_lib.awr_batch(
            obs, mb.actions, adv, self.cfg.awr_temperature, self.cfg.awr_max_weight
        )
        if n_demo == 0:
            return batch
        idx = jax.random.randint(k_demo, (n_demo,), 0, self.demos.actions.shape[0])
        return awr_lib.concat_batches([batch, awr_lib.take(self.demos, idx)])

    def update_policy_bc(self, demos: Batch, steps: int, rng: jax.Array) -> dict:
        """Behaviour cloning on planner demos D_t (weights 1)."""
        if self.cfg.mode == "frozen_policy":
            return {"skipped": 1.0}
        n = demos.actions.shape[0]
        metrics = {}
        for k in jax.random.split(rng, steps):
            k1, k2 = jax.random.split(k)
            idx = jax.random.randint(k1, (self.cfg.policy_batch,), 0, n)
            self.pstate, metrics = self._pstep(self.pstate, awr_lib.take(demos, idx), k2)
            self.policy_updates += 1
        return {k: float(v) for k, v in metrics.items()}

    def demo_batch(self, result, bucket, only_success: bool = True) -> Batch:
        agent = self.agent(bucket, 1)
        return awr_lib.demo_batch(
            result, agent.tokens, agent.token_mask, self.norm, agent.max_state_dim, only_success
        )


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
    from coda.train.agent import PolicyAgent, state_features
    from coda.train.shaping import chunk_discount, mc_returns

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
