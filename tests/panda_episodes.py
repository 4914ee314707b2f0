"""Shared by the Panda planner tests: a batch of LIBERO initial states settled under LIBERO's
protocol, and a planner run to the suite's step cap."""

from __future__ import annotations

import numpy as np

from coda.libero import suites
from coda.libero.panda_env import PandaEnv

NOOP = np.array([[0.0] * 6 + [-1.0]])  # hold still, fingers open


def batch(suite: str, task: str, inits) -> PandaEnv:
    """One environment per initial state of the named task, after LIBERO's no-op steps."""
    env = PandaEnv(suite, task, n_envs=len(inits))
    env.reset(list(inits))
    for _ in range(10):  # LIBERO's protocol: no-op steps first
        env.step(np.repeat(NOOP, len(inits), axis=0))
    return env


def all_succeed(env: PandaEnv, planner, suite: str) -> bool:
    """Whether every environment succeeds within the suite's step cap."""
    done = np.zeros(env.n_envs, bool)
    for _ in range(suites.step_cap(suite)):
        done |= env.step(planner.act(env))[1]
        if done.all():
            break
    return bool(done.all())
