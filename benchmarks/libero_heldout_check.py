"""Does any training scene a LIBERO source generates recreate an evaluation scene? (issue 30
item 4: the LIBERO-PRO files are never trained on, and no training variant may rebuild one.)

For each suite: the evaluation scenes a LIBERO run scores (`coda.loop.sources.LiberoSource`'s
suites: LIBERO's held-out initial states and LIBERO-PRO's swap / object / task / language files
at those states), indexed by task identity (objects and goal, `coda.libero.heldout`); then the
training scenes a run would make from the source tasks at training states (< 40): LIBERO's own
states (the calibration: how close LIBERO's held-out states already are to its training ones),
and per factor the variants `coda.libero.program.variant` draws (as the source does: layout half
small shifts, half swaps / moves; attributes; task). Per kind: how many are the same task as an
evaluation scene, how many recreate one (every movable object within 1 cm in x and y) and the
median of the nearest same-task evaluation scene's largest object distance.

    python benchmarks/libero_heldout_check.py --eval_states 10 --per_task 4 --seed 0 \
        --out benchmarks/results/libero_heldout_check.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from coda.libero import episodes as E  # noqa: E402
from coda.libero import heldout as H  # noqa: E402
from coda.libero import program as P  # noqa: E402
from coda.libero import suites  # noqa: E402

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
KINDS = ("swap", "object", "task", "lan")
HELDOUT_FROM, TRAIN_STATES, LEVELS, SHARE = 40, 8, (1, 2), 0.5  # configs/coda.py's libero


def _eval_programs(suite: str, states: int) -> dict[str, list[str]]:
    out = {"layouts": [E.Episode(suite, t, i).program for t in suites.tasks(suite)
                       for i in range(HELDOUT_FROM, HELDOUT_FROM + states)]}  # fmt: skip
    for k in KINDS:
        s = suites.perturbed(suite, k)
        out[k] = [E.Episode(s, t, i).program for t in suites.tasks(s)
                  for i in range(HELDOUT_FROM, HELDOUT_FROM + states)]  # fmt: skip
    return out


def _row(index: H.EvalIndex, compiled: list) -> dict:
    same = [c for c in compiled if index.same_task(c)]
    dups = [c.scene.program for c in same if index.duplicate(c)]
    near = [index.nearest(c) for c in same]
    return {
        "scenes": len(compiled),
        "same_task": len(same),
        "duplicates_1cm": len(dups),
        "duplicate_examples": dups[:3],
        "median_nearest_m": float(np.median(near)) if near else math.nan,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval_states", type=int, default=10)
    ap.add_argument("--per_task", type=int, default=4, help="variants per task and factor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    t0, res = time.time(), {}
    for suite in SUITES:
        rng = np.random.default_rng([a.seed, SUITES.index(suite)])
        evals = _eval_programs(suite, a.eval_states)
        indexes = {k: H.index_of(v, E.compile_episode) for k, v in evals.items()}
        every = H.EvalIndex.of(E.compile_episode(p) for v in evals.values() for p in v)
        gen: dict[str, list] = {"libero_training_states": [], **{f: [] for f in P.FACTORS}}
        for t in suites.tasks(suite):
            for i in range(TRAIN_STATES):
                gen["libero_training_states"].append(
                    E.compile_episode(E.Episode(suite, t, i).program)
                )
            for f in P.FACTORS:
                for _ in range(a.per_task):
                    base = E.Episode(suite, t, int(rng.integers(HELDOUT_FROM))).program
                    got = P.variant(base, f, rng, LEVELS, SHARE)
                    if got is not None and got[1]:
                        gen[f].append(got[0])
        res[suite] = {
            kind: {"any": _row(every, cs), **{k: _row(ix, cs) for k, ix in indexes.items()}}
            for kind, cs in gen.items()
        }
        print(suite, json.dumps({k: v["any"] for k, v in res[suite].items()}), flush=True)
    out = {
        "command": "python benchmarks/libero_heldout_check.py " + " ".join(sys.argv[1:]),
        "tolerance_m": H.TOL,
        "suites": res,
        "wall_seconds": round(time.time() - t0, 1),
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
