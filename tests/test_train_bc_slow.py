"""BC on 64 planner demos of one family -> the `small` policy succeeds on >= 80% of them.

Slow (2-core CPU: ~0.2 s per update of the 3.5M-parameter `small` policy, ~72 min in all):
`pytest -m slow`. Setup (the easiest honest one): one pick-place scene program (a cube onto a
plate, no distractors), 64 layouts (seeds 0..63), scripted-planner demos of 14 chunks, BC with
batch 32 and an EMA of the weights (which the rollouts act with), then a batched native rollout
of the policy on the same 64 variants. Success along the way is printed (`-s`) as a curve.

Measured (2026-11-29, 2-core CPU, 4289 s): success at 2k, 4k, ..., 20k steps =
0 / 14.1 / 21.9 / 34.4 / 53.1 / 76.6 / 87.5 / 92.2 / 93.8 / 95.3 % (61/64). A 14000-step schedule
stopped at 78.1 %: the flow policy needs the long low-lr tail to become precise enough.
"""

from __future__ import annotations

import os
import pickle
import time

import jax
import numpy as np
import pytest

from coda.policy import get_policy
from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.rollout import make_backend, make_buckets
from coda.sim.sdk import exec_program
from coda.train import Learner, LearnerConfig

pytestmark = pytest.mark.slow

SCENE = """add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_blue")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
BC_STEPS = int(os.environ.get("CODA_BC_STEPS", "20000"))
EVAL_EVERY = 2000


@pytest.mark.timeout(4 * 3600)
def test_bc_on_planner_demos_reaches_80_percent():
    t0 = time.time()
    compiled = [
        compile_scene(exec_program(SCENE, seed=s, isolation="inprocess")) for s in range(64)
    ]
    (bucket,) = make_buckets(compiled)
    backend = make_backend("native")
    demos = backend.rollout(bucket, planner_for(bucket), None, jax.random.key(0), 14)
    assert float(np.mean(demos.success)) >= 0.95  # the demos themselves succeed
    # Prompts are < 16 tokens: a shorter prompt buffer, same parameters as `small`.
    policy = get_policy("small", max_token_len=16)
    learner = Learner(
        policy,
        LearnerConfig(policy_lr=1e-3, policy_batch=32, policy_warmup=100, policy_ema=0.999),
        jax.random.key(1),
        total_policy_steps=BC_STEPS,
    )
    learner.fit_norm(demos.states)
    data = learner.demo_batch(demos, bucket)
    assert data.actions.shape == (64 * 14, 10, 7)
    done, rng = 0, jax.random.key(2)
    while done < BC_STEPS:
        n = min(EVAL_EVERY, BC_STEPS - done)
        rng, k = jax.random.split(rng)
        m = learner.update_policy_bc(data, n, k)
        done += n
        res = learner.rollout(backend, bucket, jax.random.key(3), 14, num_candidates=1)
        success = float(np.mean(res.success))
        print(
            f"BC step {done}: loss {m['loss']:.4f} success {success:.3f} ({time.time() - t0:.0f}s)"
        )
    print(f"BC {BC_STEPS} steps: success {success:.3f} on 64 variants ({time.time() - t0:.0f}s)")
    if os.environ.get("CODA_BC_SAVE"):  # keep the trained weights for offline inspection
        with open(os.environ["CODA_BC_SAVE"], "wb") as f:
            pickle.dump({"params": jax.device_get(learner.acting_params), "norm": learner.norm}, f)
    assert success >= 0.8
