"""Policy throughput on this machine: train-step samples/s, chunk-sampling latency, full-size cost.

    .venv/bin/python benchmarks/policy_step.py [--out benchmarks/results/policy_step.json]

Measures, for ``small`` (state-only pi0.5, the project's default), ``tiny`` (3 cameras, the
openpi fixture dims) and ``oft`` (OFT backbone at small scale): jitted train-step throughput
(compile excluded, reported separately) and ``sample_chunks`` latency for j=1 and j=8 candidates;
for the full ``pi05`` config: the parameter count (jax.eval_shape, nothing allocated) and the
analytic FLOPs per training sample (``coda.policy.flops``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.policy import (  # noqa: E402
    Batch,
    get_policy,
    init_train_state,
    make_observation,
    make_train_step,
    train_config,
)
from coda.policy.flops import pi05_forward_flops, pi05_train_flops_per_sample  # noqa: E402


def _obs(policy, b: int, rng: np.random.Generator):
    c = policy.config
    images = None
    if c.camera_names:
        s = c.siglip.image_size
        images = {
            n: jnp.asarray(rng.uniform(-1, 1, (b, s, s, 3)), jnp.float32) for n in c.camera_names
        }
    state = rng.normal(size=(b, min(40, c.max_state_dim))).astype(np.float32)
    n_tok = min(20, c.max_token_len)
    return make_observation(
        rng.integers(4, min(c.vocab_size, 1000), (b, c.max_token_len)),
        np.arange(c.max_token_len)[None, :].repeat(b, 0) < n_tok,
        state=state if c.num_state_tokens > 0 else None,
        max_state_dim=c.max_state_dim,
        images=images,
    )


def _timeit(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t0)
    return out


def bench_policy(name: str, batch: int, steps: int, sample_repeats: int) -> dict:
    policy = get_policy(name)
    c = policy.config
    rng = np.random.default_rng(0)
    params = policy.init(jax.random.key(0))
    n_params = int(sum(x.size for x in jax.tree.leaves(params)))
    obs = _obs(policy, batch, rng)
    actions = jnp.asarray(0.5 * rng.normal(size=(batch, c.action_horizon, c.env_action_dim)))
    data = Batch(obs, actions.astype(jnp.float32), weights=jnp.ones((batch,)))
    cfg = train_config(warmup_steps=10, decay_steps=1000)
    state = init_train_state(params, cfg)
    step = make_train_step(policy, cfg)
    t0 = time.perf_counter()
    state, m = step(state, data, jax.random.key(0))
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(steps):
        state, m = step(state, data, jax.random.key(i + 1))
    jax.block_until_ready(m)
    dt = time.perf_counter() - t0
    res = {
        "backbone": c.backbone,
        "params": n_params,
        "train": {
            "batch": batch,
            "steps": steps,
            "samples_per_s": batch * steps / dt,
            "step_ms": 1e3 * dt / steps,
            "compile_s": compile_s,
        },
        "sampling": {},
    }
    if c.backbone == "pi05":
        res["sampling_steps"] = int(c.num_sample_steps)
    sample = jax.jit(policy.sample_chunks, static_argnames="num_candidates")
    for b in (1, 16):
        o = _obs(policy, b, rng)
        for j in (1, 8):
            jax.block_until_ready(sample(state.params, o, jax.random.key(0), num_candidates=j))
            times = _timeit(
                lambda o=o, j=j: sample(state.params, o, jax.random.key(1), num_candidates=j),
                sample_repeats,
            )
            res["sampling"][f"B{b}_j{j}"] = {
                "median_ms": 1e3 * float(np.median(times)),
                "min_ms": 1e3 * float(np.min(times)),
                "chunks_per_s": b * j / float(np.median(times)),
            }
    return res


def full_config() -> dict:
    policy = get_policy("pi05")
    shapes = policy.param_shapes()
    n = int(sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)))
    fwd = pi05_forward_flops(policy.config)
    return {
        "params": n,
        "forward_flops_per_sample": fwd,
        "train_flops_per_sample": pi05_train_flops_per_sample(policy.config),
        "assumptions": "3 cameras 224x224, 200 prompt tokens, horizon 50, whole masked attention "
        "matrix computed; train = 3 x forward; norms/softmax/activations ignored",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/results/policy_step.json")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sample-repeats", type=int, default=5)
    args = ap.parse_args()
    results = {
        "command": "python " + " ".join(sys.argv),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "loadavg_at_start": os.getloadavg(),
        },
        "policies": {},
    }
    for name, batch in (("small", 32), ("tiny", 8), ("oft", 32)):
        print(f"benchmarking {name} ...", flush=True)
        results["policies"][name] = bench_policy(name, batch, args.steps, args.sample_repeats)
        print(json.dumps(results["policies"][name], indent=1), flush=True)
    results["pi05_full"] = full_config()
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["pi05_full"], indent=1))


if __name__ == "__main__":
    main()
