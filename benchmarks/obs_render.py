"""Cost of image observations (`policy.obs_mode = "images"`) next to state-only, in one run.

    .venv/bin/python benchmarks/obs_render.py --out benchmarks/results/obs_render.json

On one bucket of B same-structure pick-place variants (the loop's bucket size) and the states of
a planner rollout's C+1 chunk endpoints, measures:

1. render: ms per rendered endpoint (both cameras, agent view + wrist, one variant) with
   `coda.sim.observe.render_qpos` (one GL context per bucket structure) at the smoke resolution
   (32 px), the default (64 px) and LIBERO / pi0.5 sizes (224, 256); plus the one-off cost of the
   GL context for a new structure.
2. policy step: the native backend's jitted per-chunk step (`rollout._policy_chunk`: decode,
   policy sample, actions -> controls) for the loop's smoke and default policy sizes
   (configs/coda.py), state-only vs images (rendering excluded), compile time apart.
3. rollout: a whole native rollout of C chunks (physics + policy + rendering) state-only vs
   images, at the smoke and default sizes.

Ratios are images / state. Render and policy-step ms are medians over repeats.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from coda.loop.driver import policy_overrides  # noqa: E402
from coda.policy import get_policy  # noqa: E402
from coda.sim import render as R  # noqa: E402
from coda.sim import rollout as RO  # noqa: E402
from coda.sim.observe import ImageSpec, render_qpos  # noqa: E402
from coda.sim.planner import planner_for  # noqa: E402
from coda.train.agent import AgentParams, ObsNorm, PolicyAgent  # noqa: E402
from configs.coda import get_config  # noqa: E402

CAMERAS = (("base_0_rgb", "left_wrist_0_rgb"), ("front", "wrist"))


def _bucket(n: int, seed: int):
    from coda.eval.suites import build_buckets
    from coda.sim import tasks

    src = tasks.get_family("pick_place").propose(np.random.default_rng(seed), split="train")
    return build_buckets([src] * n, list(range(1, n + 1)), "train", batch_size=n)[0]


def _median_ms(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(out))


def bench_render(bucket, qpos: np.ndarray, sizes, repeats: int) -> dict:
    """ms per endpoint (both cameras, one variant) at each size; qpos [B, T, nq]."""
    b, t = qpos.shape[:2]
    out = {}
    for size in sizes:
        spec = ImageSpec(*CAMERAS, size)
        t0 = time.perf_counter()
        render_qpos(bucket.models, qpos[:, 0], spec)  # GL context for this size (+ warm-up)
        first = time.perf_counter() - t0

        def run(spec=spec):
            for k in range(t):
                render_qpos(bucket.models, qpos[:, k], spec)

        ms = _median_ms(run, max(3, repeats // 3)) / (b * t)
        out[str(size)] = {
            "ms_per_endpoint": round(ms, 3),
            "ms_per_camera_frame": round(ms / 2, 3),
            "first_call_s": round(first, 3),
            "bytes_per_endpoint_uint8": spec.bytes_per_endpoint,
        }
    return out


def _agent(variant: str, mode: str, bucket):
    c = get_config(variant)
    c.policy.obs_mode = mode
    policy = get_policy(c.policy.name, **policy_overrides(c.policy, c.sim.horizon))
    agent = PolicyAgent.for_bucket(policy, bucket)
    params = AgentParams(
        policy.init(jax.random.key(0)), ObsNorm.identity(int(policy.config.max_state_dim))
    )
    return c, policy, agent, params


def bench_policy(variant: str, bucket, chunks: int, repeats: int) -> dict:
    """Per-chunk jitted policy step and whole rollouts, state-only vs images; the two modes are
    timed alternately (a shared machine's load drifts) and each reports its median."""
    state, sens = bucket.initial_state()
    consts = {k: jnp.asarray(v) for k, v in bucket.consts.items()}
    target = jnp.asarray(bucket.init_ctrl[:, :6])
    backend = RO.NativeBackend()
    rows, steps, rolls = {}, {}, {}
    for mode in ("state", "images"):
        c, policy, agent, params = _agent(variant, mode, bucket)
        spec = agent.image_spec
        images = None
        if spec is not None:
            nq = bucket.models[0].nq
            images = jnp.asarray(render_qpos(bucket.models, state[:, 1 : 1 + nq], spec))
        carry = agent.init(bucket.batch_size, jax.random.key(1))

        def step(agent=agent, params=params, images=images, carry=carry):
            out = RO._policy_chunk(
                agent,
                bucket.layout,
                params,
                jnp.asarray(sens, jnp.float32),
                consts,
                target,
                carry,
                jax.random.key(2),
                images,
            )
            jax.block_until_ready(out)

        def roll(agent=agent, params=params):
            res = backend.rollout(bucket, agent, params, jax.random.key(3), chunks)
            jax.block_until_ready(res.success)

        t0 = time.perf_counter()
        step()
        compile_s = time.perf_counter() - t0
        roll()  # warm-up (ν / decode jits)
        steps[mode], rolls[mode] = step, roll
        rows[mode] = {
            "params": int(sum(x.size for x in jax.tree.leaves(params.policy))),
            "image_size": spec.size if spec else None,
            "image_tokens_per_camera": (spec.size // 8) ** 2 if spec else 0,
            "compile_s": round(compile_s, 2),
        }
    t_step = {m: [] for m in steps}
    t_roll = {m: [] for m in rolls}
    for r in range(repeats):
        for m in steps:
            t_step[m].append(_median_ms(steps[m], 1))
            if r % 3 == 0:
                t_roll[m].append(_median_ms(rolls[m], 1))
    for m in steps:
        roll_ms = float(np.median(t_roll[m]))
        rows[m]["policy_step_ms"] = round(float(np.median(t_step[m])), 2)
        rows[m]["rollout_ms"] = round(roll_ms, 1)
        rows[m]["rollout_ms_per_chunk"] = round(roll_ms / chunks, 2)
    s, i = rows["state"], rows["images"]
    rows["ratio_images_over_state"] = {
        "policy_step": round(i["policy_step_ms"] / s["policy_step_ms"], 2),
        "rollout": round(i["rollout_ms"] / s["rollout_ms"], 2),
    }
    rows["batch"] = bucket.batch_size
    rows["chunks"] = chunks
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--batch", type=int, default=8, help="variants per bucket (smoke: 8)")
    ap.add_argument("--chunks", type=int, default=8, help="chunks per rollout (smoke: 8)")
    ap.add_argument("--sizes", default="32,64,224,256")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    load0 = os.getloadavg()
    ok, gl = R.gl_available()
    if not ok:
        raise SystemExit(gl)
    bucket = _bucket(args.batch, 0)
    demo = RO.NativeBackend().rollout(
        bucket, planner_for(bucket), None, jax.random.key(0), args.chunks
    )
    qpos = np.asarray(demo.qpos, np.float64)  # [B, C+1, nq]: states the policy would see
    sizes = [int(s) for s in args.sizes.split(",")]
    render = bench_render(bucket, qpos, sizes, args.repeats)
    policy = {
        v or "default": bench_policy(v, bucket, args.chunks, args.repeats) for v in ("smoke", "")
    }
    for rows in policy.values():
        size = rows["images"]["image_size"]
        r = render[str(size)]["ms_per_endpoint"] if str(size) in render else None
        rows["render_ms_per_chunk_whole_bucket"] = (
            round(r * bucket.batch_size, 2) if r is not None else None
        )
        rows["ratio_images_over_state"]["step_plus_render"] = (
            round(
                (rows["images"]["policy_step_ms"] + r * bucket.batch_size)
                / rows["state"]["policy_step_ms"],
                2,
            )
            if r is not None
            else None
        )
    out = {
        "command": "MUJOCO_GL="
        + os.environ.get("MUJOCO_GL", "")
        + " .venv/bin/python "
        + " ".join(["benchmarks/obs_render.py", *sys.argv[1:]]),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "jax": jax.__version__,
            "jax_backend": jax.default_backend(),
            "gl_backend": gl,
            "gl_renderer": R.gl_renderer(),
            "loadavg_at_start": load0,
            "loadavg_at_end": os.getloadavg(),
        },
        "bucket": {
            "family": "pick_place",
            "batch": bucket.batch_size,
            "endpoints": qpos.shape[1],
            "ngeom": int(bucket.models[0].ngeom),
        },
        "render_both_cameras": render,
        "policy": policy,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
