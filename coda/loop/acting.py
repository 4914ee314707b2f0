"""A finished run's acting policy, rebuilt from its folder (e.g. for `launch.libero`).

`launch.libero --config.policy=<run folder>` (a `launch.main` workdir: its `config.json` and
complete rounds under `checkpoints/`) acts with the run's last complete round;
`<run>/checkpoints/round_000k` names one round. The policy is rebuilt from the run's own
config (architecture, observation mode, horizon, sampler), its learner state restored, and it
acts through the loop's own agents (`coda.loop.collect.Agents`: the acting weights, observation
normalisation and instruction tokens), so the evaluation sees what the run's evaluation saw.

`resolve` is a pure file check (launch.libero calls it before building anything); `load`
builds the policy.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
from ml_collections import ConfigDict

from coda import runconfig
from coda.loop import collect
from coda.loop.checkpoint import CKPT_DIR, complete_rounds, round_dir
from coda.loop.services import learner_config, policy_overrides
from coda.loop.strategies import get_strategy
from coda.policy import get_policy
from coda.train.learner import Learner

ROUND_PREFIX = "round_"


def resolve(path: str) -> tuple[str, int]:
    """(run folder, round) of a run folder (its last complete round) or of one round's folder;
    ValueError in one line naming what is missing."""
    path = os.path.abspath(os.path.expanduser(path))
    head, name = os.path.split(path.rstrip(os.sep))
    if name.startswith(ROUND_PREFIX) and os.path.basename(head) == CKPT_DIR:
        run, r = os.path.dirname(head), name[len(ROUND_PREFIX) :]
        if not (r.isdigit() and int(r) in complete_rounds(run)):
            raise ValueError(f"policy={path!r} is not a complete round of {run!r}")
    else:
        run, r = path, None
    if not os.path.isdir(run):
        raise ValueError(
            f"policy={path!r} is neither planner | random | hold nor an existing run folder"
        )
    if not os.path.exists(os.path.join(run, "config.json")):
        raise ValueError(f"policy={path!r} is not a run folder (no config.json)")
    rounds = complete_rounds(run)
    if not rounds:
        raise ValueError(f"policy={path!r} holds no complete round under {CKPT_DIR}/")
    return run, int(r) if r is not None else rounds[-1]


def load(path: str) -> tuple[Any, dict[str, Any]]:
    """(agent_for: bucket -> (agent, params), info) of a run's policy at the resolved round.
    info: run, round, strategy, policy name, horizon (control steps per chunk)."""
    run, r = resolve(path)
    with open(os.path.join(run, "config.json")) as f:
        cfg = ConfigDict(runconfig.with_added_defaults(json.load(f)))
    strategy = get_strategy(cfg.strategy)
    policy = get_policy(cfg.policy.name, **policy_overrides(cfg.policy, cfg.sim.horizon))
    mode = strategy.update.learner_mode(strategy.potential)
    lc, total = learner_config(cfg, mode, getattr(strategy.update, "advantage", ""))
    learner = Learner(policy, lc, jax.random.PRNGKey(int(cfg.seed) + 1), total_policy_steps=total)
    learner.restore(os.path.join(round_dir(run, r), "learner"))
    info = {
        "run": run,
        "round": r,
        "strategy": str(cfg.strategy),
        "policy": str(cfg.policy.name),
        "horizon": int(cfg.sim.horizon),
        "trained_on": str(cfg.sim.get("source", "families")),
    }
    return collect.Agents(learner), info
