"""Recorded scripted-planner episodes for the fidelity benchmark: `coda.libero.panda_planner`
drives LIBERO's Panda in CoDA (`PandaEnv`) closed loop; its actions are written in
`replay.py`'s episode format, so LIBERO itself can replay them open loop from the same initial
states and the fidelity benchmark can compare success where the episodes succeed.

    .venv/bin/python benchmarks/libero_reference/scripted_episodes.py \
        --suite=libero_object --tasks=0-9 --inits=0,1 --steps=200 --seed=7 \
        --out=runs/libero_fidelity/scripted.json

Tasks without a single In / On goal over a movable object are skipped (listed in the output).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from coda import blas  # noqa: E402

blas.pin()  # before numpy loads: the planner's episodes as `launch` runs it

import numpy as np  # noqa: E402

from coda.libero import panda_env as E  # noqa: E402
from coda.libero import panda_planner as PP  # noqa: E402
from coda.libero import suites  # noqa: E402


def _ids(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def record(suite: str, task_id: int, inits: list[int], steps: int, seed: int) -> list[dict]:
    name = suites.tasks(suite)[task_id]
    # the fixtures where LIBERO's replay (env.seed(seed); env.reset()) will have them
    env = E.PandaEnv(suite, name, n_envs=len(inits), fixture_seed=seed)
    planner = PP.PandaPickPlace(env)
    env.reset(inits)
    actions, success = [], np.zeros(len(inits), bool)
    for _ in range(steps):
        a = planner.act(env)
        actions.append(a)
        success |= env.step(a)[1]
    acts = np.stack(actions, 1)  # [B, T, 7]
    return [
        {
            "id": f"scripted_{suite}_t{task_id}_i{i}",
            "suite": suite,
            "task_id": task_id,
            "init_index": i,
            "seed": seed,
            "actions": acts[b].round(6).tolist(),
            "record_frames_at": [0, steps // 2, steps],
            "coda_success": bool(success[b]),
        }
        for b, i in enumerate(inits)
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="libero_object")
    ap.add_argument("--tasks", default="0-9", help="task ids: 0-9 or 0,3,5")
    ap.add_argument("--inits", default="0,1", help="initial states per task")
    ap.add_argument("--steps", type=int, default=200, help="actions per episode")
    ap.add_argument("--seed", type=int, default=7, help="env.seed of the replay (openpi: 7)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    episodes, skipped = [], {}
    for t in _ids(args.tasks):
        try:
            episodes += record(args.suite, t, _ids(args.inits), args.steps, args.seed)
        except ValueError as e:
            skipped[t] = str(e)
        print(f"{args.suite} task {t}: {[e['coda_success'] for e in episodes[-2:]]}", flush=True)
    out = {"generator": {**vars(args), "script": __file__}, "skipped": skipped,
           "episodes": episodes}  # fmt: skip
    pathlib.Path(args.out).write_text(json.dumps(out))
    print(f"wrote {len(episodes)} episodes ({sum(e['coda_success'] for e in episodes)} succeed)")


if __name__ == "__main__":
    main()
