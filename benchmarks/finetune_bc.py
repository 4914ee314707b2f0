"""BC from planner demos on one training program x N layouts, checkpointing the acting weights.

The fine-tuning benchmarks (`benchmarks/finetune.py`) start from these checkpoints: BC is the
expensive part on this CPU (~0.3-1 s per `small` update), so it runs once per family and every
later experiment reuses the saved weights. Evaluation is not done here (see
`benchmarks/finetune.py --bc-report`), only the loss curve is logged.

    .venv/bin/python benchmarks/finetune_bc.py --family stack --layouts 64 --steps 8000 \
        --out /tmp/coda_ft/bc_stack
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
jax.config.update(
    "jax_compilation_cache_dir", os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

from coda.sim.planner import Perturbed, planner_for  # noqa: E402
from coda.sim.rollout import make_backend  # noqa: E402
from coda.train import Learner, LearnerConfig  # noqa: E402
from coda.train.awr import concat_batches  # noqa: E402

# The training programs: one scene program per family, no distractors (the same ones as
# benchmarks/text2potential.py and tests/test_train_bc_slow.py).
PROGRAMS = {
    "stack": """add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
""",
    "pick_place": """add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_blue")
set_task("pick_place", target="target", goal="goal")
sample_layout()
""",
    "put_inside": """add_object("cube", role="target", instance="cube_red")
add_object("bowl", role="container", instance="bowl_white")
set_task("put_inside", target="target", container="container")
sample_layout()
""",
    "articulated": """add_object("cabinet_drawer", role="cabinet", instance="drawer_white")
set_task("articulated", cabinet="cabinet", action="open")
sample_layout()
""",
}
NUM_CHUNKS = 14
POLICY_OVERRIDES = dict(max_token_len=16)  # prompts here are < 16 tokens; same parameters
# `small` cut to fit this machine's share of 2 shared CPU cores (~0.2-0.5 core per engineer): the
# same state-only pi0.5 structure (prefix transformer + action expert, flow matching, horizon 10,
# 10 sampling steps) at half the width and depth. Chosen with --policy reduced.
REDUCED = dict(
    max_token_len=16,
    vlm=dict(width=96, depth=2, mlp_dim=384, num_heads=2, num_kv_heads=1, head_dim=48),
    expert=dict(width=48, depth=2, mlp_dim=192, num_heads=2, num_kv_heads=1, head_dim=48),
    state_hidden=128,
    num_state_tokens=2,
)
POLICIES = {"small": POLICY_OVERRIDES, "reduced": REDUCED}


def make_policy(name: str):
    from coda.policy import get_policy

    if name not in POLICIES:
        raise KeyError(f"unknown benchmark policy {name!r}; valid: {sorted(POLICIES)}")
    return get_policy("small", **POLICIES[name])


def training_bucket(family: str, layouts: int):
    from coda.eval import build_bucket

    return build_bucket([PROGRAMS[family]] * layouts, list(range(layouts)), split="train")


def save_checkpoint(path: str, learner: Learner, meta: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    blob = {
        "params": jax.device_get(learner.acting_params),
        "norm": jax.device_get(learner.norm),
        **meta,
    }
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(blob, f)
    os.replace(tmp, path)


def load_checkpoint(path: str) -> dict:
    with open(path, "rb") as f:
        return pickle.load(f)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", choices=sorted(PROGRAMS), required=True)
    p.add_argument("--layouts", type=int, default=64)
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ema", type=float, default=0.999)
    p.add_argument("--save-every", type=int, default=1000)
    p.add_argument("--policy", choices=sorted(POLICIES), default="small")
    p.add_argument(
        "--dart",
        type=float,
        nargs="*",
        default=[],
        help="extra DART demo passes over the same layouts, one per noise sigma (clean labels)",
    )
    p.add_argument("--init", default=None, help="continue from this checkpoint's acting weights")
    p.add_argument("--out", required=True, help="directory for step_<n>.pkl checkpoints")
    args = p.parse_args(argv)
    t0 = time.time()
    bucket = training_bucket(args.family, args.layouts)
    backend = make_backend("native")
    demos = backend.rollout(bucket, planner_for(bucket), None, jax.random.key(0), NUM_CHUNKS)
    planner_success = float(np.asarray(demos.success)[bucket.valid].mean())
    policy = make_policy(args.policy)
    init = load_checkpoint(args.init) if args.init else None
    learner = Learner(
        policy,
        LearnerConfig(policy_lr=args.lr, policy_batch=32, policy_warmup=100, policy_ema=args.ema),
        jax.random.key(1),
        total_policy_steps=args.steps,
        policy_params=None if init is None else jax.tree.map(jax.numpy.asarray, init["params"]),
    )
    learner.fit_norm(demos.states)  # the same demos: the same statistics as the init's
    parts = [learner.demo_batch(demos, bucket)]
    n_demos = int(np.asarray(demos.success)[bucket.valid].sum())
    dart_success = []
    for i, sigma in enumerate(args.dart):
        noisy = backend.rollout(
            bucket, Perturbed(planner_for(bucket), sigma), None, jax.random.key(10 + i), NUM_CHUNKS
        )
        dart_success.append(float(np.asarray(noisy.success)[bucket.valid].mean()))
        parts.append(learner.demo_batch(noisy, bucket))
        n_demos += int(np.asarray(noisy.success)[bucket.valid].sum())
    data = concat_batches(parts)
    rows = data.actions.shape
    print(f"{args.family}: {n_demos}/{args.layouts} planner demos succeed; rows {rows}")
    done, rng = 0, jax.random.key(2)
    log = []
    while done < args.steps:
        n = min(args.save_every, args.steps - done)
        rng, k = jax.random.split(rng)
        m = learner.update_policy_bc(data, n, k)
        done += n
        log.append({"step": done, "loss": m["loss"], "t": time.time() - t0})
        meta = {
            "family": args.family,
            "policy": args.policy,
            "program": PROGRAMS[args.family],
            "layouts": args.layouts,
            "demos": n_demos,
            "planner_success": planner_success,
            "dart": list(args.dart),
            "dart_success": dart_success,
            "step": done + (0 if init is None else int(init["step"])),
            "init": args.init,
            "total_steps": args.steps,
            "lr": args.lr,
            "ema": args.ema,
            "loss_curve": log,
        }
        save_checkpoint(os.path.join(args.out, f"step_{done}.pkl"), learner, meta)
        print(json.dumps(log[-1]), flush=True)


if __name__ == "__main__":
    main()
