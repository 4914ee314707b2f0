"""Chunk value critic Q(o, τ, a_{t:t+H}): an ensemble of heads, a Polyak target, n-step backups.

Inputs are the normalised padded flat state (the same features the policy sees), a bag of
instruction-token embeddings (τ) and the whole action chunk flattened. Heads are independent
MLPs with LayerNorm; `V(o, τ)` is a separate MLP.

Targets (one transition per executed chunk, built by `coda.train.shaping.chunk_transitions`):

    y_t      = G_t^(m) + Γ^m (1 - d) V_targ(o_{t+m})   (n-step chunk backup)
    Q_k(o_t, a_t) <- y_t          for every head k
    V(o_t)        <- min_k Q_targ,k(o_t, a_t)          (pessimistic behaviour value)

with Γ = γ^H the per-chunk discount, m = min(n, chunks left), d = termination inside those m
chunks. Bootstrapping from V_targ (rather than max over actions) keeps the backup on-policy for
the chunk distribution that collected the data; the min over heads fights over-estimation in V
and in best-of-j scores. Advantages are A = min_k Q_k(o, a) - V(o).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from coda.policy.base import Observation


class MLP(nn.Module):
    hidden: int
    depth: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(self.depth):
            x = nn.Dense(self.hidden)(x)
            x = nn.LayerNorm()(x)
            x = nn.swish(x)
        return nn.Dense(1)(x)[..., 0]


class CriticNet(nn.Module):
    """(state [B, D], state_mask [B, D], tokens [B, L], token_mask [B, L], actions [B, H, A])."""

    vocab_size: int
    num_heads: int = 2
    hidden: int = 256
    depth: int = 2
    embed_dim: int = 32

    def setup(self):
        self.embed = nn.Embed(self.vocab_size, self.embed_dim)
        self.q_heads = [MLP(self.hidden, self.depth, name=f"q{k}") for k in range(self.num_heads)]
        self.v_head = MLP(self.hidden, self.depth, name="v")

    def context(self, state, state_mask, tokens, token_mask) -> jax.Array:
        m = token_mask.astype(jnp.float32)[..., None]  # [B, L, 1]
        emb = jnp.sum(self.embed(tokens) * m, -2) / jnp.maximum(jnp.sum(m, -2), 1.0)  # [B, E]
        return jnp.concatenate([state * state_mask, emb], -1)  # [B, D + E]

    def q(self, state, state_mask, tokens, token_mask, actions) -> jax.Array:
        """-> [K, B]"""
        ctx = self.context(state, state_mask, tokens, token_mask)
        x = jnp.concatenate([ctx, actions.reshape(actions.shape[0], -1)], -1)
        return jnp.stack([h(x) for h in self.q_heads])

    def v(self, state, state_mask, tokens, token_mask) -> jax.Array:
        """-> [B]"""
        return self.v_head(self.context(state, state_mask, tokens, token_mask))

    def __call__(self, state, state_mask, tokens, token_mask, actions):
        return self.q(state, state_mask, tokens, token_mask, actions), self.v(
            state, state_mask, tokens, token_mask
        )


@struct.dataclass
class Transitions:
    """Flat chunk transitions [N] with their n-step returns (see module docstring)."""

    state: jax.Array  # [N, D] normalised padded state at the chunk start
    state_mask: jax.Array  # [N, D] bool
    tokens: jax.Array  # [N, L] int32
    token_mask: jax.Array  # [N, L] bool
    actions: jax.Array  # [N, H, A]
    ret: jax.Array  # [N] discounted (shaped) chunk rewards over the m backup chunks
    boot_state: jax.Array  # [N, D] normalised state m chunks later
    boot_disc: jax.Array  # [N] Γ^m (1 - d): zero when the episode terminated within m chunks
    mc: jax.Array  # [N] discounted (shaped) return to the end of the episode (MC advantages)
    success: jax.Array  # [N] 1.0 when the chunk's episode succeeded (ν at its last endpoint)
    # [N, n_cam, S, S, 3] uint8 frames at the chunk start, for image-mode policies (the critic
    # never reads them); None for state-only policies
    images: Any = None
    # [N] int32: where the row's episode came from (`learner_state.SOURCES`: targeted / pool /
    # novel scenes, "other" when not given); the gradient-share report reads it, no update does
    source: Any = None

    @property
    def size(self) -> int:
        return self.state.shape[0]

    def obs(self) -> Observation:
        return Observation(self.tokens, self.token_mask, self.state, self.state_mask)


@struct.dataclass
class CriticState:
    step: jax.Array  # [] int32
    params: Any
    target_params: Any
    opt_state: Any


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkCritic:
    """Hashable handle (by identity) around `CriticNet`: init, Q/V evaluation, candidate scores."""

    vocab_size: int
    max_state_dim: int
    horizon: int
    action_dim: int = 7
    max_token_len: int = 32
    num_heads: int = 2
    hidden: int = 256
    depth: int = 2

    def __post_init__(self):
        if self.num_heads < 2:
            raise ValueError(f"the critic needs an ensemble of >= 2 heads, got {self.num_heads}")

    @classmethod
    def for_policy(cls, policy, **kw) -> ChunkCritic:
        c = policy.config
        return cls(
            vocab_size=int(c.vocab_size),
            max_state_dim=int(c.max_state_dim),
            horizon=int(c.action_horizon),
            action_dim=int(c.env_action_dim),
            max_token_len=int(c.max_token_len),
            **kw,
        )

    @property
    def net(self) -> CriticNet:
        return CriticNet(self.vocab_size, self.num_heads, self.hidden, self.depth)

    def init(self, rng: jax.Array) -> Any:
        d, h, a, length = self.max_state_dim, self.horizon, self.action_dim, self.max_token_len
        args = (
            jnp.zeros((1, d)),
            jnp.ones((1, d), bool),
            jnp.zeros((1, length), jnp.int32),
            jnp.ones((1, length), bool),
            jnp.zeros((1, h, a)),
        )
        return self.net.init(rng, *args)["params"]

    def q(self, params, obs: Observation, actions: jax.Array) -> jax.Array:
        """Q of every head: [K, B] for actions [B, H, A]."""
        return self.net.apply(
            {"params": params},
            obs.state,
            obs.state_mask,
            obs.tokens,
            obs.token_mask,
            actions,
            method=CriticNet.q,
        )

    def q_min(self, params, obs: Observation, actions: jax.Array) -> jax.Array:
        return jnp.min(self.q(params, obs, actions), axis=0)  # [B]

    def v(self, params, obs: Observation) -> jax.Array:
        return self.net.apply(
            {"params": params},
            obs.state,
            obs.state_mask,
            obs.tokens,
            obs.token_mask,
            method=CriticNet.v,
        )  # [B]

    def advantage(self, params, obs: Observation, actions: jax.Array) -> jax.Array:
        """A = min_k Q_k(o, a) - V(o): [B]."""
        return self.q_min(params, obs, actions) - self.v(params, obs)

    def score_candidates(self, params, obs: Observation, cands: jax.Array) -> jax.Array:
        """Pessimistic scores of j candidates per observation: [B, j] for cands [B, j, H, A]."""
        b, j = cands.shape[:2]
        rep = jax.tree.map(lambda x: jnp.repeat(x, j, axis=0), obs)  # [B*j, ...]
        q = self.q_min(params, rep, cands.reshape((b * j,) + cands.shape[2:]))
        return q.reshape(b, j)


def critic_optimizer(lr: float = 3e-4, clip_norm: float = 10.0) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(clip_norm), optax.adam(lr))


def init_critic_state(critic: ChunkCritic, rng: jax.Array, lr: float = 3e-4) -> CriticState:
    params = critic.init(rng)
    target = jax.tree.map(jnp.copy, params)
    return CriticState(jnp.zeros((), jnp.int32), params, target, critic_optimizer(lr).init(params))


def critic_loss(
    critic: ChunkCritic, params, target_params, batch: Transitions
) -> tuple[jax.Array, dict]:
    obs = batch.obs()
    boot_obs = Observation(batch.tokens, batch.token_mask, batch.boot_state, batch.state_mask)
    v_next = critic.v(target_params, boot_obs)  # [N]
    y = jax.lax.stop_gradient(batch.ret + batch.boot_disc * v_next)  # [N]
    q = critic.q(params, obs, batch.actions)  # [K, N]
    q_loss = jnp.mean(jnp.sum(jnp.square(q - y[None]), 0))
    v_target = jax.lax.stop_gradient(critic.q_min(target_params, obs, batch.actions))
    v = critic.v(params, obs)
    v_loss = jnp.mean(jnp.square(v - v_target))
    td = jnp.mean(jnp.square(jnp.min(q, 0) - y))
    return q_loss + v_loss, {"q_loss": q_loss, "v_loss": v_loss, "td_error": td}


def make_critic_train_step(
    critic: ChunkCritic, lr: float = 3e-4, tau: float = 0.005, jit: bool = True
) -> Callable[[CriticState, Transitions], tuple[CriticState, dict]]:
    """(state, batch) -> (state, metrics): one Adam step on Q and V, then Polyak target update."""
    tx = critic_optimizer(lr)

    def step(state: CriticState, batch: Transitions):
        (loss, metrics), grads = jax.value_and_grad(
            lambda p: critic_loss(critic, p, state.target_params, batch), has_aux=True
        )(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        target = jax.tree.map(lambda t, p: (1.0 - tau) * t + tau * p, state.target_params, params)
        metrics = dict(metrics, loss=loss)
        return CriticState(state.step + 1, params, target, opt_state), metrics

    return jax.jit(step) if jit else step


def sample_batch(data: Transitions, rng: jax.Array, batch_size: int) -> Transitions:
    idx = jax.random.randint(rng, (batch_size,), 0, data.size)
    return jax.tree.map(lambda x: x[idx], data)


def make_critic_fit(
    critic: ChunkCritic, lr: float = 3e-4, tau: float = 0.005, batch_size: int = 128
) -> Callable[[CriticState, Transitions, jax.Array], tuple[CriticState, dict]]:
    """(state, data [N], keys [S]) -> (state, metrics of the last step): S minibatch steps in one
    jitted `lax.scan` (one dispatch instead of S)."""
    step = make_critic_train_step(critic, lr, tau, jit=False)

    def fit(state: CriticState, data: Transitions, keys: jax.Array):
        def body(s, k):
            s, m = step(s, sample_batch(data, k, batch_size))
            return s, m

        state, ms = jax.lax.scan(body, state, keys)
        return state, jax.tree.map(lambda x: x[-1], ms)

    return jax.jit(fit)
