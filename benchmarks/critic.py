"""Offline critic benchmark: seconds per diagnosis, counterfactual probes included.

A scripted planner with a planted flaw (its gripper never opens wider than 4 cm) fails on wide
cubes. Per case (pick-and-place, stacking), a bucket of narrow and wide cubes is rolled out on
the native backend, the failed episodes are diagnosed in one `OfflineCritic.diagnose` call (all
probes batched), twice: the first call pays the policy / segmentation compiles, the second (a
new key: new probe seeds) is the steady state. Reported: episodes, probe counts, seconds per
diagnosis (cold, warm), and how many diagnoses name the planted factor and cause
(attributes, object_too_wide).

Run:  python benchmarks/critic.py --out benchmarks/results/critic.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = {
    "pick_place": """
add_object("cube", role="target", instance="cube_red")
set_attributes("target", dims={{"half": {half}}})
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
""",
    "stack_or_insert": """
add_object("cube", role="top", instance="cube_red")
set_attributes("top", dims={{"half": {half}}})
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
""",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--wide", type=int, default=4, help="wide-cube scenes per case")
    ap.add_argument("--narrow", type=int, default=2)
    ap.add_argument("--n_probes", type=int, default=4)
    ap.add_argument("--n_repeats", type=int, default=1)
    ap.add_argument("--num_chunks", type=int, default=14)
    args = ap.parse_args()

    import jax
    import numpy as np

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cache = os.environ.get("CODA_JAX_CACHE", os.path.join(root, ".jax_cache"))
    jax.config.update("jax_compilation_cache_dir", cache)
    from coda.critic import OfflineCritic, episodes_from_rollout
    from coda.sim.compile import compile_scene
    from coda.sim.planner import narrow_grip as policy
    from coda.sim.rollout import NativeBackend, make_buckets
    from coda.sim.sdk import exec_program

    backend = NativeBackend()
    rows = []
    for name, src in CASES.items():
        scenes = [
            exec_program(src.format(half=0.0235), seed=s, isolation="inprocess")
            for s in range(args.wide)
        ] + [
            exec_program(src.format(half=0.018), seed=100 + s, isolation="inprocess")
            for s in range(args.narrow)
        ]
        (bucket,) = make_buckets([compile_scene(s) for s in scenes], multiple_of=8)
        t0 = time.perf_counter()
        r = backend.rollout(bucket, policy(bucket), None, jax.random.PRNGKey(0), args.num_chunks)
        eps = episodes_from_rollout(bucket, r)
        t_roll = time.perf_counter() - t0
        critic = OfflineCritic(
            policy=policy,
            params=None,
            backend=backend,
            num_chunks=args.num_chunks,
            n_probes=args.n_probes,
            n_repeats=args.n_repeats,
        )
        timings, named = [], []
        for k in (1, 2):
            t0 = time.perf_counter()
            out = critic.diagnose(eps, jax.random.PRNGKey(k))
            timings.append((time.perf_counter() - t0) / max(len(eps), 1))
            named.append(
                sum(
                    (c.diagnosis.factor, c.diagnosis.cause) == ("attributes", "object_too_wide")
                    for c in out
                )
            )
        diags = [
            {
                "variant": c.episode.variant,
                "factor": c.diagnosis.factor,
                "phase": c.diagnosis.phase,
                "cause": c.diagnosis.cause,
                "flip_rates": {
                    k: round(v, 3)
                    for k, v in c.diagnosis.evidence.numbers.items()
                    if k.startswith(("flip_rate", "n_probes", "repeat_success"))
                },
            }
            for c in out
        ]
        rows.append(
            {
                "case": name,
                "variants": len(scenes),
                "failed_episodes": len(eps),
                "success": np.asarray(r.success)[: len(scenes)].tolist(),
                "rollout_and_episodes_s": round(t_roll, 2),
                "s_per_diagnosis_cold": round(timings[0], 3),
                "s_per_diagnosis_warm": round(timings[1], 3),
                "named_planted_cold_warm": named,
                "diagnoses_warm": diags,
            }
        )
        print(json.dumps(rows[-1]))
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.node()} {platform.processor()} cpus={os.cpu_count()}",
        "load_average": os.getloadavg(),
        "args": vars(args),
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
