"""What LIBERO draws from NumPy's global RNG on `env.seed(s); env.reset()`, and where the fixtures
land: the ground truth for `coda.libero.placement` (issue 31: fixtures at LIBERO's placement).

Runs in the reference venv (`make reference-venv`), never imports coda:

  .venv-libero-ref/bin/python benchmarks/libero_reference/placement_trace.py \
      --suites=libero_spatial,libero_object,libero_goal,libero_10,libero_90 --seeds=0,7 \
      --out=runs/libero_placement_trace.json

Per task (LIBERO's task order 0) and seed (one env per task, reset once per seed, in order):
every `np.random` call made by the reset (function, arguments, result, the calling file:line),
then each fixture's model `body_pos` / `body_quat` (w, x, y, z) in LIBERO's world frame after
the reset (`set_init_state` does not restore them).

`--chain=N` traces openpi's and OpenVLA-OFT's evaluation protocol instead: per task one env,
`env.seed(s)` once per seed, then N episodes of `env.reset(); env.set_init_state(init_k)` and
`--chain_steps` no-op steps ([0]*6 + [-1]); the rows are keyed "<seed>/<k>" (k = 1..N).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

FUNCS = ("uniform", "randn", "randint", "rand", "random", "normal", "choice", "random_sample")


def _hook(np, log: list) -> None:
    """Wraps the module-level np.random functions so each call is logged (LIBERO and robosuite
    call them through the module attribute)."""
    for name in FUNCS:
        f = getattr(np.random, name)

        def wrap(*a, _f=f, _n=name, **k):
            site = traceback.extract_stack(limit=3)[0]
            out = _f(*a, **k)
            log.append(
                {
                    "fn": _n,
                    "args": [float(x) if hasattr(x, "__float__") else repr(x) for x in a],
                    "kwargs": {key: float(v) for key, v in k.items() if hasattr(v, "__float__")},
                    "site": f"{os.path.basename(site.filename)}:{site.lineno}",
                    "out": out.tolist() if hasattr(out, "tolist") else out,
                }
            )
            return out

        setattr(np.random, name, wrap)


def task_envs(suites: str, tasks: str = ""):
    """(suite name, suite, task id, task, env) for every task of the comma-separated `suites`
    (LIBERO's task order 0): one fresh OffScreenRenderEnv per task, closed after its turn."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    for suite_name in suites.split(","):
        suite = benchmark.get_benchmark_dict()[suite_name](task_order_index=0)
        for tid in range(suite.n_tasks):
            if tasks and str(tid) not in tasks.split(","):
                continue
            task = suite.get_task(tid)
            bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
            env = OffScreenRenderEnv(bddl_file_name=str(bddl), camera_heights=32, camera_widths=32)
            try:
                yield suite_name, suite, tid, task, env
            finally:
                env.close()


def _fixtures(env) -> dict:
    inner = env.env
    fixtures = {}
    for n in sorted(inner.fixtures_dict):
        b = inner.sim.model.body_name2id(inner.fixtures_dict[n].root_body)
        fixtures[n] = {
            "pos": [float(v) for v in inner.sim.model.body_pos[b]],
            "quat": [float(v) for v in inner.sim.model.body_quat[b]],
        }
    return fixtures


def _chain(env, suite, tid, seeds, args, log, row) -> None:
    """openpi's protocol: seed once, then reset + set_init_state + no-op steps per episode; the
    draws of each episode (its reset and its steps) and the fixtures after its reset."""
    inits = suite.get_task_init_states(tid)
    for s in seeds:
        env.seed(s)
        for k in range(args.chain):
            log.clear()
            env.reset()
            fixtures = _fixtures(env)
            env.set_init_state(inits[k % len(inits)])
            for _ in range(args.chain_steps):
                env.step([0.0] * 6 + [-1.0])
            row["seeds"][f"{s}/{k + 1}"] = {
                "reset": k + 1,
                "draws": list(log),
                "fixtures": fixtures,
            }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suites", default="libero_spatial,libero_object,libero_goal,libero_10")
    p.add_argument("--seeds", default="0,7")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: all)")
    p.add_argument("--chain", type=int, default=0, help="episodes per env.seed (0: reseed)")
    p.add_argument("--chain_steps", type=int, default=5, help="no-op steps per chained episode")
    args = p.parse_args()
    os.environ.setdefault("MUJOCO_GL", "egl")
    import numpy as np

    log: list = []
    _hook(np, log)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = {
        "command": "placement_trace.py " + " ".join(f"--{k}={v}" for k, v in vars(args).items()),
        "numpy": np.__version__,
        "tasks": [],
    }
    t0 = time.time()
    for suite_name, suite, tid, task, env in task_envs(args.suites, args.tasks):
        row = {"suite": suite_name, "task_id": tid, "task": task.name, "seeds": {}}
        if args.chain:
            _chain(env, suite, tid, seeds, args, log, row)
            out["tasks"].append(row)
            print(f"{suite_name} {tid} {time.time() - t0:.0f}s", flush=True)
            continue
        for k, s in enumerate(seeds):
            env.seed(s)
            log.clear()
            env.reset()
            # reset: this env's k-th reset (LIBERO's joint samplers pile up per model load)
            row["seeds"][str(s)] = {"reset": k + 1, "draws": list(log), "fixtures": _fixtures(env)}
        out["tasks"].append(row)
        print(f"{suite_name} {tid} {time.time() - t0:.0f}s", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
