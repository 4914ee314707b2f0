"""Cross-check of ν (LIBERO goal predicates, pure JAX over decoded sensors) against LIBERO's
semantics transcribed onto MjData (`coda/libero/reference.py`), over every task of the five
suites: its settled initial state, one state per goal atom built to satisfy it (objects
dropped onto / into their targets, containers opened, joints set past their thresholds), the
opposite joint settings, and the whole goal built at once. Every goal and :init atom is
compared on every state. Writes benchmarks/results/libero_predicates.json.

    python benchmarks/libero_predicates.py
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from coda.libero import crosscheck, data, suites  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suites", default=",".join(suites.SUITES))
    ap.add_argument("--out", default="benchmarks/results/libero_predicates.json")
    args = ap.parse_args()
    t0 = time.time()
    tot = collections.Counter()
    by_pred = collections.defaultdict(collections.Counter)
    dis, goal_true = [], 0
    for suite in args.suites.split(","):
        for name in suites.tasks(suite):
            a = crosscheck.compare(suite, name)
            tot["tasks"] += 1
            tot["evaluations"] += a.atoms
            tot["agree"] += a.agree
            tot["libero_true"] += a.positives
            goal_true += a.goal_holds
            for pred, n, pos in a.by_predicate:
                by_pred[pred]["evaluations"] += n
                by_pred[pred]["libero_true"] += pos
            dis += [(suite, name, *d[:1], list(d[1]), d[2], d[3]) for d in a.disagreements]
            print(suite, name[:60], a.agree, "/", a.atoms, "true:", a.positives)
    out = {
        "command": " ".join(["python"] + sys.argv),
        **tot,
        "agreement": tot["agree"] / max(tot["evaluations"], 1),
        "tasks_whose_built_goal_state_satisfies_libero": goal_true,
        "by_predicate": {k: dict(v) for k, v in by_pred.items()},
        "disagreements": dis,
        "versions": data.versions(),
        "seconds": round(time.time() - t0, 1),
    }
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "disagreements"}, indent=1))


if __name__ == "__main__":
    main()
