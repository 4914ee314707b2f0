"""Where LIBERO's sites are after `env.seed(s); env.reset(); env.set_init_state(states[i])`: the
reference for the region sites of `benchmarks/libero_fixture_placement.py --sites` (issue 31:
fixtures and region sites within 2 mm of the reference's).

Runs in the reference venv (`make reference-venv`), never imports coda:

  .venv-libero-ref/bin/python benchmarks/libero_reference/region_sites.py \
      --suites=libero_spatial,libero_object,libero_goal,libero_10,libero_90 --seed=7 --init=0 \
      --out=runs/libero_region_sites.json

Per task (LIBERO's task order 0; one fresh env, its first reset): every site's world position
(`sim.data.site_xpos` after a forward pass of the restored state), by site name.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", default="libero_spatial,libero_object,libero_goal,libero_10")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--init", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco
    from placement_trace import task_envs  # this folder: run as a script, it is on sys.path

    out = {
        "command": "region_sites.py " + " ".join(f"--{k}={v}" for k, v in vars(args).items()),
        "tasks": [],
    }
    t0 = time.time()
    for suite_name, suite, tid, task, env in task_envs(args.suites):
        env.seed(args.seed)
        env.reset()
        env.set_init_state(suite.get_task_init_states(tid)[args.init])
        sim = env.env.sim
        mujoco.mj_forward(sim.model._model, sim.data._data)
        m = sim.model._model
        sites = {
            m.site(i).name: [float(v) for v in sim.data._data.site_xpos[i]] for i in range(m.nsite)
        }
        out["tasks"].append(
            {"suite": suite_name, "task_id": tid, "task": task.name, "sites": sites}
        )
        print(f"{suite_name} {tid} {time.time() - t0:.0f}s", flush=True)
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
