"""Does the `oft` backbone learn by BC where the loop's `oft` cells score 0 %? (issue 15's
transfer pair.)

The loop's round 0 on `configs/coda.py:selfimit` with `policy.name=oft` (two randomly drawn
programs per run — instances, categories, a distractor — 120 extra layouts each, two DART passes)
evaluates at 0/64 ID and 0/256 OOD after 6,000 and after 20,000 BC steps, and 0 % on its own
pool scenes; without the DART passes 6 % ID / 9 % OOD. This probe trains the same network with
the loop's `LearnerConfig` on the two fixed cube programs of `benchmarks/finetune_bc.py`
(pick-place and stack, 64 layouts each, optionally the same two DART passes) and reports success
on 64 held-out layouts of each every 1,000 updates: if it learns here, what breaks the loop's
cells is their data, not the network or the learner.

    .venv/bin/python benchmarks/oft_bc_probe.py --policy oft --steps 4000 --dart \
        --out benchmarks/results/oft_bc_probe_dart.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time

import jax
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
jax.config.update(
    "jax_compilation_cache_dir", os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
)

from finetune_bc import NUM_CHUNKS, PROGRAMS, REDUCED  # noqa: E402

from coda.eval import build_bucket  # noqa: E402
from coda.loop import collect  # noqa: E402
from coda.loop.driver import learner_config  # noqa: E402
from coda.policy import get_policy  # noqa: E402
from coda.sim.planner import Perturbed, planner_for  # noqa: E402
from coda.sim.rollout import make_backend  # noqa: E402
from coda.train import Learner, LearnerConfig  # noqa: E402
from coda.train.awr import concat_batches  # noqa: E402

FAMILIES = ("pick_place", "stack")


def loop_learner_config(steps: int) -> tuple[LearnerConfig, int]:
    """The `LearnerConfig` (and total updates) the loop builds for `configs/coda.py:selfimit`
    with `steps` BC updates (`coda.loop.driver.learner_config`; BC decays over them alone)."""
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("_coda_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    config = mod.get_config("selfimit")
    config.loop.bc_steps = steps
    return learner_config(config, "shaped")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", choices=["oft", "small"], default="oft")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--dart", action="store_true", help="add DART passes at sigma 0.1 and 0.3")
    p.add_argument(
        "--pool",
        default="",
        help="a loop run folder: BC on its pool's programs (pool.jsonl) instead of the cube ones",
    )
    p.add_argument("--out", required=True)
    args = p.parse_args()
    t0 = time.time()
    programs = dict(PROGRAMS)
    families = FAMILIES
    if args.pool:
        with open(os.path.join(args.pool, "pool.jsonl")) as f:
            srcs = list(dict.fromkeys(json.loads(line)["program"] for line in f if line.strip()))
        families = tuple(f"pool{i}" for i in range(len(srcs)))
        programs = dict(zip(families, srcs, strict=True))
    train = {f: build_bucket([programs[f]] * 64, list(range(64)), split="train") for f in families}
    held = {
        f: build_bucket([programs[f]] * 64, list(range(5000, 5064)), split="train")
        for f in families
    }
    backend = make_backend("native")
    key0 = jax.random.key(0)
    demos = {
        f: backend.rollout(b, planner_for(b), None, key0, NUM_CHUNKS) for f, b in train.items()
    }
    policy = get_policy(args.policy, **REDUCED)
    learner = Learner(
        policy,
        loop_learner_config(args.steps),
        jax.random.key(1),
        total_policy_steps=args.steps + 400,
    )
    collect.fit_norm(learner, list(demos.values()))
    parts = [learner.demo_batch(demos[f], train[f]) for f in families]
    dart = {}
    if args.dart:
        for i, sigma in enumerate((0.1, 0.3)):
            for f in families:
                noisy = backend.rollout(
                    train[f],
                    Perturbed(planner_for(train[f]), sigma),
                    None,
                    jax.random.key(10 + i),
                    NUM_CHUNKS,
                )
                dart[f"{f}@{sigma}"] = float(np.asarray(noisy.success)[train[f].valid].mean())
                parts.append(learner.demo_batch(noisy, train[f]))
    data = concat_batches(parts)
    curve, rng, done = [], jax.random.key(2), 0
    while done < args.steps:
        rng, k = jax.random.split(rng)
        m = learner.update_policy_bc(data, 1000, k)
        done += 1000
        row = {"updates": done, "loss": float(m["loss"])}
        for f in families:
            r = learner.rollout(backend, held[f], jax.random.key(6), NUM_CHUNKS, num_candidates=1)
            ok = np.asarray(r.success)[held[f].valid]
            row[f] = {"n": int(ok.size), "successes": int(ok.sum())}
        curve.append(row)
        print(json.dumps(row), flush=True)
    out = {
        "command": "python " + " ".join(sys.argv),
        "policy": args.policy,
        "programs": programs if args.pool else {f: PROGRAMS[f] for f in families},
        "rows": int(data.actions.shape[0]),
        "dart_planner_success": dart,
        "curve": curve,
        "wall_s": time.time() - t0,
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, jax {jax.__version__}",
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
