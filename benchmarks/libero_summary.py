"""The per-suite table of LIBERO planner evaluations: reads `launch.libero` result files and
prints a markdown table (suite, perturbation, episodes, success, blow-ups, tasks below 90 %),
with the ≥ 90 % verdict per row and the totals.

    python benchmarks/libero_summary.py benchmarks/results/libero_eval_*_planner_v6.json

Every number comes from the result files; nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
import pathlib

ORDER = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
KINDS = ("none", "swap", "object", "lan", "task")


def row(d: dict) -> str:
    n, k = d["episodes"], d["successes"]
    blow = sum(int(t.get("failed") or 0) for t in d["per_task"])
    weak = [
        f"{t['instruction']} {t['successes']}/{t['episodes']}"
        for t in d["per_task"]
        if t["episodes"] and t["successes"] / t["episodes"] < 0.9
    ]
    states = sorted({i for t in d["per_task"] for i in t["init_indices"]})
    span = f"{states[0]}-{states[-1]}" if states else "-"
    return (
        f"| {d['suite']} | {d['perturbation']} | {span} | {n} | {k} ({100 * k / n:.1f} %) | "
        f"{'yes' if k >= 0.9 * n else '**no**'} | {blow} | {'; '.join(weak) or '-'} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    runs = [json.loads(pathlib.Path(f).read_text()) for f in args.files]
    runs.sort(key=lambda d: (KINDS.index(d["perturbation"]), ORDER.index(d["suite"])))
    print(
        "| suite | perturbation | initial states | episodes | success | ≥ 90 %? | blow-ups "
        "| tasks below 90 % |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for d in runs:
        print(row(d))
    n = sum(d["episodes"] for d in runs)
    k = sum(d["successes"] for d in runs)
    wall = sum(d["wall_seconds"] for d in runs)
    print(f"\n{len(runs)} runs, {k}/{n} episodes ({100 * k / n:.1f} %), {wall:.0f} s of wall time")


if __name__ == "__main__":
    main()
