"""What the critic's control-step phases cost (coda.critic.replay): episodes_from_rollout on a
collection-sized bucket with the phases segmented on the chunk endpoints only vs on each failed
episode's control-step replay, side by side in one run, beside the collection rollout itself.

The bucket is the default loop's collection shape (configs/coda.py: loop.bucket_size variants
of one pick-place program, sim.num_chunks chunks), rolled out by a flawed scripted expert that
fails on every variant (the worst case: every episode is replayed; the loop replays only the
first rollout's failures). Each timed call follows a warm-up call of the same shape (compiles);
rounds interleave the two ways and report the median.

    python benchmarks/replay_cost.py --out benchmarks/results/replay_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.critic_engine import loop_config  # noqa: E402
from coda.critic import episodes_from_rollout  # noqa: E402
from coda.sim.compile import compile_scene  # noqa: E402
from coda.sim.flaws import Flaw, GripAt, Layout  # noqa: E402
from coda.sim.rollout import make_backend, make_buckets  # noqa: E402
from coda.sim.sdk import exec_program  # noqa: E402
from coda.sim.tasks.waypoints import OPEN  # noqa: E402

PROGRAM = """
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
add_object("ball", role="distractor_0")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
# fails everywhere (the condition always holds): the jaws never close at the grasp
ALWAYS = Flaw(
    "bench_open", "pick_place", "grasp", ("grasp", "lift"), Layout("object", "x", ">", -9.0),
    GripAt(OPEN), "jaws stay open",
)  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    cfg = loop_config()
    n, chunks = int(cfg.loop.bucket_size), int(cfg.sim.num_chunks)
    scenes = [compile_scene(exec_program(PROGRAM, seed=s, isolation="inprocess")) for s in range(n)]
    (bucket,) = make_buckets(scenes)
    backend = make_backend("native")
    policy = ALWAYS.policy(bucket)
    key = jax.random.PRNGKey(0)
    roll = lambda: backend.rollout(bucket, policy, None, key, chunks)  # noqa: E731
    r = roll()
    n_failed = int((~np.asarray(r.success)[: len(scenes)]).sum())
    ways = {
        "rollout": roll,
        "endpoints": lambda: episodes_from_rollout(bucket, r, control_steps=False),
        "control_steps": lambda: episodes_from_rollout(bucket, r, control_steps=True),
    }
    for f in ways.values():  # warm-up: compiles
        f()
    times = {k: [] for k in ways}
    for _ in range(a.rounds):
        for k, f in ways.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    extra = med["control_steps"] - med["endpoints"]
    out = {
        "command": "python " + " ".join(["benchmarks/replay_cost.py", *(argv or sys.argv[1:])]),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        "bucket": {"variants": len(scenes), "failed": n_failed, "chunks": chunks},
        "seconds_median": med,
        "seconds_all": times,
        "replay_seconds_per_failed_episode": extra / max(n_failed, 1),
        "replay_over_rollout": extra / med["rollout"],
        "note": "replay_over_rollout: the replay's extra time / one collection rollout of the "
        "same bucket (the loop rolls each collected bucket out rollouts_per_variant times and "
        "replays the first rollout's failures only)",
    }
    print(json.dumps({k: out[k] for k in ("bucket", "seconds_median", "replay_over_rollout")}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
