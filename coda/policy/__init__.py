"""CoDA policies: pi0.5 (openpi-exact Flax) and an OpenVLA-OFT-style backbone.

The policy protocol (``sample_chunks``, weighted ``loss``, observations, state-only mode) is
documented in ``coda.policy.base``. Typical use from the simulator (state-only, no rendering)::

    policy = get_policy("small")            # pi0.5, CPU-trainable, state-only, 7-dim actions
    params = policy.init(jax.random.key(0))
    tok = tokenizer_for(policy.config)
    tokens, mask = tok.tokenize_batch(instructions)               # [B, L]
    obs = make_observation(tokens, mask, state=sim_state,         # sim_state: [B, D], D varies
                           max_state_dim=policy.config.max_state_dim)
    chunks = policy.sample_chunks(params, obs, rng, num_candidates=8)   # [B, 8, H, 7]

    cfg = train_config(peak_lr=3e-4)
    state = init_train_state(params, cfg)
    step = make_train_step(policy, cfg)                           # jitted
    state, metrics = step(state, Batch(obs, actions, weights=awr_weights), rng)
    save_train_state(path, state); state = restore_train_state(path, state)

Names (``POLICIES``): pi05, pi05_libero (openpi dims), tiny (parity fixture dims), small,
small_tiny (test size), oft, oft_tiny. Backbones (``BACKBONES``): pi05, oft. openpi checkpoints:
``load_openpi(params_dir, expected=policy.param_shapes())``; norm stats: ``load_norm_stats``.
"""

from __future__ import annotations

from ml_collections import ConfigDict

from coda.policy.base import Batch, Observation, Policy, make_observation, pad_state
from coda.policy.checkpoints import NormStats, load_norm_stats, load_openpi, save_norm_stats
from coda.policy.configs import CONFIGS, get_config
from coda.policy.oft import OFTPolicy
from coda.policy.pi05 import Pi05Policy
from coda.policy.tokenizer import PromptTokenizer, tokenize_for_config, tokenizer_for
from coda.policy.train import (
    TrainState,
    init_train_state,
    make_optimizer,
    make_train_step,
    restore_train_state,
    save_params,
    save_train_state,
    train_config,
)

BACKBONES = {"pi05": Pi05Policy, "oft": OFTPolicy}
POLICIES = CONFIGS  # name -> config factory


def get_policy(name: str | ConfigDict, **overrides) -> Policy:
    """A policy by config name (or from a ConfigDict); unknown names list the valid ones."""
    config = get_config(name, **overrides) if isinstance(name, str) else name
    if config.backbone not in BACKBONES:
        raise ValueError(f"unknown backbone {config.backbone!r}; valid: {sorted(BACKBONES)}")
    return BACKBONES[config.backbone](config)


__all__ = [
    "BACKBONES",
    "CONFIGS",
    "POLICIES",
    "Batch",
    "NormStats",
    "OFTPolicy",
    "Observation",
    "Pi05Policy",
    "Policy",
    "PromptTokenizer",
    "TrainState",
    "get_config",
    "get_policy",
    "init_train_state",
    "load_norm_stats",
    "load_openpi",
    "make_observation",
    "make_optimizer",
    "make_train_step",
    "pad_state",
    "restore_train_state",
    "save_norm_stats",
    "save_params",
    "save_train_state",
    "tokenize_for_config",
    "tokenizer_for",
    "train_config",
]
