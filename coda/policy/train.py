"""Backbone-agnostic training: AdamW + global-norm clip + warmup-cosine, EMA, orbax checkpoints."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp
from flax import struct
from ml_collections import ConfigDict

from coda.policy.base import Batch, Params, Policy


def train_config(**overrides) -> ConfigDict:
    """Optimiser defaults (openpi-like: AdamW, clip 1.0, warmup-cosine, EMA 0.99)."""
    c = ConfigDict(
        dict(
            peak_lr=2.5e-5,
            init_lr=0.0,
            end_lr=2.5e-6,
            warmup_steps=1000,
            decay_steps=30000,
            weight_decay=1e-10,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            clip_norm=1.0,
            ema_decay=0.99,  # None / 0 disables EMA
            # A second phase (fine-tuning after BC): from step `finetune_start` on, warm up to
            # `finetune_lr` over `finetune_warmup` steps, then cosine to finetune_lr / 10 over
            # `finetune_decay_steps`. 0 = one schedule for the whole run. The BC phase then
            # decays over `finetune_start` steps, so it does not depend on what comes after.
            finetune_start=0,
            finetune_lr=0.0,
            finetune_warmup=1,
            finetune_decay_steps=0,
            # EMA decay from `finetune_start` on (-1: ema_decay throughout; 0: the EMA is the
            # raw weights). Sized to the updates a fine-tuning round makes: an EMA of 0.999
            # carries a third of a 400-update round.
            finetune_ema_decay=-1.0,
        )
    )
    for k, v in overrides.items():
        if k not in c:
            raise ValueError(f"unknown train config field {k!r}; fields: {sorted(c.keys())}")
        c[k] = v
    return c


@struct.dataclass
class TrainState:
    step: jax.Array  # [] int32
    params: Params
    opt_state: Any
    ema_params: Params | None


def make_schedule(cfg: ConfigDict) -> optax.Schedule:
    """Linear warmup from init_lr to peak_lr, then cosine decay to end_lr at decay_steps; with
    `finetune_start` > 0 a second warmup-cosine phase from that step (BC start, then fine-tuning
    at its own rate: the tail of one long BC cosine is too low a rate to learn from rollouts)."""
    ft = int(cfg.get("finetune_start", 0) or 0)
    decay = cfg.decay_steps if ft <= 0 else ft
    first = optax.warmup_cosine_decay_schedule(
        init_value=cfg.init_lr,
        peak_value=cfg.peak_lr,
        warmup_steps=cfg.warmup_steps,
        decay_steps=max(decay, cfg.warmup_steps + 1),
        end_value=cfg.end_lr,
    )
    if ft <= 0:
        return first
    if cfg.finetune_lr <= 0:
        raise ValueError(f"finetune_start={ft} needs finetune_lr > 0, got {cfg.finetune_lr}")
    warm = max(int(cfg.finetune_warmup), 1)
    second = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.finetune_lr,
        warmup_steps=warm,
        decay_steps=max(int(cfg.finetune_decay_steps), warm + 1),
        end_value=cfg.finetune_lr / 10,
    )
    return optax.join_schedules([first, second], [ft])


def make_optimizer(cfg: ConfigDict) -> optax.GradientTransformation:
    schedule = make_schedule(cfg)
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay),
    )


def init_train_state(params: Params, cfg: ConfigDict) -> TrainState:
    # Own copies: the jitted step donates its state, which must not delete the caller's params.
    params = jax.tree.map(lambda x: jnp.array(x, copy=True), params)
    ema = jax.tree.map(jnp.copy, params) if cfg.ema_decay else None
    return TrainState(jnp.zeros((), jnp.int32), params, make_optimizer(cfg).init(params), ema)


def make_train_step(
    policy: Policy, cfg: ConfigDict, *, jit: bool = True
) -> Callable[[TrainState, Batch, jax.Array], tuple[TrainState, dict]]:
    """(state, batch, rng) -> (state, metrics); metrics include loss, grad_norm, lr."""
    tx = make_optimizer(cfg)
    schedule = make_schedule(cfg)
    decay = cfg.ema_decay
    ft, ft_decay = int(cfg.get("finetune_start", 0) or 0), float(cfg.get("finetune_ema_decay", -1))
    if not 0.0 <= ft_decay < 1.0 and ft_decay != -1.0:
        raise ValueError(f"finetune_ema_decay must be -1 (off) or in [0, 1), got {ft_decay}")

    def step(state: TrainState, batch: Batch, rng: jax.Array):
        (loss, metrics), grads = jax.value_and_grad(policy.loss, has_aux=True)(
            state.params, batch, rng
        )
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = state.ema_params
        if decay:
            d = decay
            if ft > 0 and ft_decay >= 0:  # the fine-tuning phase's own horizon
                d = jnp.where(state.step >= ft, ft_decay, decay)
            ema = jax.tree.map(lambda e, p: d * e + (1.0 - d) * p, ema, params)
        metrics = dict(metrics, grad_norm=optax.tree.norm(grads), lr=schedule(state.step))
        new = TrainState(state.step + 1, params, opt_state, ema)
        return new, metrics

    return jax.jit(step, donate_argnums=0) if jit else step


def make_scan_train_step(
    policy: Policy,
    cfg: ConfigDict,
    sample: Callable[[Any, jax.Array], Batch],
    *,
    shard: Callable[[Batch], Batch] | None = None,
    jit: bool = True,
) -> Callable[[TrainState, Any, jax.Array], tuple[TrainState, dict]]:
    """K updates in one call: (state, data, keys [K]) -> (state, metrics of the last update).

    A `lax.scan` over the keys; update i splits keys[i] into (k_batch, k_loss), draws its
    minibatch with ``sample(data, k_batch)`` inside the scan (``data`` is any pytree of device
    arrays, e.g. a `coda.train.replay.Replay`) and runs the same step as `make_train_step` with
    k_loss. So K calls of the single step on ``sample(data, k_batch_i)`` give the same result.
    One dispatch per K updates matters where dispatch dominates (accelerators). ``shard``
    (optional) places each minibatch, e.g. a sharding constraint for data parallelism.
    """
    step = make_train_step(policy, cfg, jit=False)

    def run(state: TrainState, data: Any, keys: jax.Array):
        def body(s, k):
            k_batch, k_loss = jax.random.split(k)
            batch = sample(data, k_batch)
            if shard is not None:
                batch = shard(batch)
            return step(s, batch, k_loss)

        state, ms = jax.lax.scan(body, state, keys)
        return state, jax.tree.map(lambda x: x[-1], ms)

    return jax.jit(run, donate_argnums=0) if jit else run


# --- orbax save / restore ---------------------------------------------------------------------


def save_train_state(path: str, state: TrainState) -> None:
    """Write params, optimizer state and EMA to ``path`` (a new directory)."""
    path = os.path.abspath(os.fspath(path))
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, state)
        ckptr.wait_until_finished()


def restore_train_state(path: str, target: TrainState) -> TrainState:
    """Restore into the structure (and dtypes/shapes) of ``target``; values are bit-exact."""
    path = os.path.abspath(os.fspath(path))
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    with ocp.StandardCheckpointer() as ckptr:
        return ckptr.restore(path, abstract)


def save_params(path: str, params: Params) -> None:
    """Params only, in openpi's pure-dict layout (``{'params': tree}``), loadable by load_openpi."""
    path = os.path.abspath(os.fspath(path))
    ckptr = ocp.PyTreeCheckpointer()
    ckptr.save(path, {"params": params})
