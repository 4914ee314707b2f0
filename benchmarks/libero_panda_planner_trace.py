"""Why the Panda's scripted pick-and-place fails a LIBERO task: its phases traced step by step.

Runs `coda.libero.panda_planner.PandaPickPlace` on LIBERO's Panda (`PandaEnv`) from initial
states 0 and 1 of each named task and prints, for environment 0, one row each time the plan
enters a new phase: (step, phase, grasp-site z, the object's bottom z, its top z, a finger
joints' gap (m), success). Phases: 0 settle, 1 above the object, 2 down to its middle, 3 close,
4 lift, 5 above the target, 6 lower, 7 open, 8 lift away. A move that hits `MAX_MOVE` steps
stalled (the hand met something); an object whose bottom returns to the table after phase 4
slipped out of the grasp.

    .venv/bin/python benchmarks/libero_panda_planner_trace.py --suite=libero_object \
        --match=milk,ketchup,salad,orange,cream_cheese \
        > benchmarks/results/libero_panda_planner_trace.txt
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP  # noqa: E402
from coda.libero import suites  # noqa: E402
from coda.libero.panda_env import PandaEnv  # noqa: E402

STEPS = 280  # libero_object's step cap


def trace(suite: str, name: str) -> list[str]:
    env = PandaEnv(suite, name, n_envs=2)
    env.reset([0, 1])
    plan = PP.PandaPickPlace(env)
    rows, last, ok, row = [], None, None, ""
    for t in range(STEPS):
        _, ok = env.step(plan.act(env))
        d, p = env.datas[0], plan.plans[0]
        _, bottom, top = PO.extent(d, env.model, plan.geoms[p.obj])
        gap = float(d.qpos[env.fingers[0]] - d.qpos[env.fingers[1]])
        site_z = float(d.site_xpos[env.idx.site][2])
        row = f"  step {t:3d} phase {p.phase} site z {site_z:.3f} object bottom {bottom:.3f} "
        row += f"top {top:.3f} finger gap {gap:.3f} ok {bool(ok[0])}"
        if p.phase != last:
            rows.append(row)
            last = p.phase
        if ok.all():
            break
    rows.append(row)
    return [f"{name}: success {[bool(x) for x in ok]}"] + rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suite", default="libero_object")
    p.add_argument("--match", default="milk", help="comma-separated substrings of task names")
    a = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    print(f"# {' '.join(['benchmarks/libero_panda_planner_trace.py'] + sys.argv[1:])}")
    print(f"# code: {commit.strip()}")
    for name in suites.tasks(a.suite):
        if any(k in name for k in a.match.split(",")):
            print("\n".join(trace(a.suite, name)), flush=True)


if __name__ == "__main__":
    main()
