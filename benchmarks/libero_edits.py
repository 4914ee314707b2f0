"""LIBERO tasks edited as factored programs (`coda.libero.program`): what verifies, what the
scripted planner solves, and why it cannot solve the rest.

For each suite and factor (layout: swap / move; attributes: object instance; task: a new goal
from LIBERO's vocabulary), a seeded sample of source tasks, one edit each drawn uniformly from
every edit the task allows (`program.edits_for`), at the first `--states` initial states: each
edited state is verified (LIBERO's checks, `coda.libero.verify`), the verified ones rolled out
with the planner as one bucket (success as LIBERO counts it: the goal at any chunk endpoint);
beside it the source task at the same states (its planner success: the reference).

    python benchmarks/libero_edits.py --per_cell 3 --states 8 --seed 0 \
        --out benchmarks/results/libero_edits.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from coda.libero import data, suites  # noqa: E402
from coda.libero import episodes as E  # noqa: E402
from coda.libero import evaluate as EV  # noqa: E402
from coda.libero import program as P  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero.planner import planner_for  # noqa: E402
from coda.libero.verify import verify_task_state  # noqa: E402
from coda.sim.bucket import Bucket  # noqa: E402
from coda.sim.rollout import NativeBackend  # noqa: E402

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
HORIZON = 10


def _episodes(suite: str, task: str, edits: str, states: int) -> dict:
    """Verification per state, then the planner on the verified ones (one bucket)."""
    backend = NativeBackend()
    ok, reasons, compiled = [], collections.Counter(), []
    for i in range(states):
        c = E.compile_episode(E.Episode(suite, task, i, 0, edits).program)
        v = verify_task_state(c).verdict
        ok.append(bool(v.ok))
        reasons.update(r.kind for r in v.reasons)
        if v.ok:
            compiled.append(c)
    row = {"verified": ok, "reasons": dict(reasons), "unsupported": None, "outcomes": ""}
    if not compiled:
        return row
    row["instruction"] = compiled[0].scene.task["instruction"]
    try:
        pol = planner_for(compiled[0], HORIZON)
    except ValueError as e:  # the planner cannot script this goal: its reason
        row["unsupported"] = str(e)
        return row
    chunks = EV.num_chunks(suite, HORIZON)
    res = backend.rollout(Bucket(compiled), pol, None, jax.random.PRNGKey(0), chunks)
    won = np.asarray(res.success_any) & np.asarray(res.valid)
    row["outcomes"] = "".join("1" if x else "0" for x in won)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per_cell", type=int, default=3, help="tasks per (suite, factor)")
    ap.add_argument("--states", type=int, default=8, help="initial states per edited task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    rng, t0, rows = random.Random(a.seed), time.time(), []
    for suite in SUITES:
        names = suites.tasks(suite)
        for factor in P.FACTORS:
            for name in rng.sample(names, min(a.per_cell, len(names))):
                edits = P.edits_for(S.load_task(suite, name), factor)
                row = {"suite": suite, "factor": factor, "task": name, "choices": len(edits)}
                if edits:
                    e = edits[rng.randrange(len(edits))]
                    row["edit"] = e.text
                    row["edited"] = _episodes(suite, name, e.text, a.states)
                    row["source"] = _episodes(suite, name, "", a.states)
                rows.append(row)
                print(json.dumps(row), flush=True)
    res = {
        "command": "python benchmarks/libero_edits.py " + " ".join(sys.argv[1:]),
        "versions": data.versions(),
        "summary": summarize(rows),
        "rows": rows,
        "wall_seconds": round(time.time() - t0, 1),
    }
    print(json.dumps(res["summary"], indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


def summarize(rows: list[dict]) -> dict:
    """Per factor: edits drawn, states verified, edits the planner scripts, its success on the
    edited states and, on the same tasks and states, on the source tasks."""
    out = {}
    for factor in P.FACTORS:
        mine = [r for r in rows if r["factor"] == factor and "edit" in r]
        ver = [x for r in mine for x in r["edited"]["verified"]]
        scripted = [r for r in mine if r["edited"]["outcomes"]]
        won = sum(r["edited"]["outcomes"].count("1") for r in scripted)
        eps = sum(len(r["edited"]["outcomes"]) for r in scripted)
        reasons: collections.Counter = collections.Counter()
        for r in mine:
            reasons.update(r["edited"]["reasons"])
        src = "".join(r["source"]["outcomes"] for r in mine)
        out[factor] = {
            "edits": len(mine),
            "states_verified": f"{sum(ver)}/{len(ver)}",
            "verification_failures": dict(reasons),
            "edits_with_a_verified_state": sum(any(r["edited"]["verified"]) for r in mine),
            "edits_scripted": len(scripted),
            "unsupported": [r["edited"]["unsupported"] for r in mine if r["edited"]["unsupported"]],
            "planner_success_edited": f"{won}/{eps}",
            "planner_success_source": f"{src.count('1')}/{len(src)}",
        }
    return out


if __name__ == "__main__":
    main()
