"""Per-goal-type success of a LIBERO evaluation (`launch/libero.py` results.json), so the gaps of
the scripted planner are visible by kind of goal.

    python -m benchmarks.libero_goal_types RESULTS.json [--out OUT.json]

Goal types (from each task's BDDL goal): on_in (one On / In atom), open_close (one Open / Close
atom), turn (one TurnOn / TurnOff atom), compound (several atoms, or an In of a drawer region,
which LIBERO states without the Open it needs). With --out, the results are copied to OUT.json
with `per_goal_type` and the commands added.
"""

from __future__ import annotations

import argparse
import json
import sys

ARTICULATION = ("open", "close")
TURN = ("turnon", "turnoff")


def goal_type(goal: tuple, regions_in_drawers: bool) -> str:
    if len(goal) > 1 or regions_in_drawers:
        return "compound"
    pred = goal[0][0]
    if pred in ARTICULATION:
        return "open_close"
    if pred in TURN:
        return "turn"
    return "on_in"


def classify(suite: str, task: str) -> str:
    from coda.libero import scene as S

    t = S.load_task(suite, task)
    drawer = any(
        a[0] == "in" and any(k in a[2] for k in ("_top_region", "_middle_region", "_bottom_region"))
        for a in t.problem.goal
    )
    return goal_type(t.problem.goal, drawer)


def per_goal_type(result: dict) -> dict:
    out: dict[str, dict] = {}
    for row in result["per_task"]:
        kind = classify(row["data_suite"], row["task"])
        agg = out.setdefault(kind, {"episodes": 0, "successes": 0, "tasks": 0})
        agg["episodes"] += row["episodes"]
        agg["successes"] += row["successes"]
        agg["tasks"] += 1
    for agg in out.values():
        agg["success_rate"] = agg["successes"] / max(agg["episodes"], 1)
    return dict(sorted(out.items()))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    with open(args.results) as f:
        result = json.load(f)
    kinds = per_goal_type(result)
    for k, v in kinds.items():
        print(
            f"{result['suite']:16s} {k:11s} {v['successes']:4d}/{v['episodes']:<4d}"
            f" tasks {v['tasks']}"
        )
    if args.out:
        result["per_goal_type"] = kinds
        result["per_goal_type_command"] = " ".join(
            ["python -m benchmarks.libero_goal_types"] + argv
        )
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
