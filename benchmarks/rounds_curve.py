"""The rounds curve (benchmarks/preregistration/rounds_curve.md; the paper's Figure 2): the OOD
average per round of each arm of a study workdir at one seed, with ±1 s.e. bands, and the paired
per-round difference of the first arm minus the second.

The OOD average is the mean of the four `ood_*` suites' success rates; its s.e. at one seed is
the binomial one over that round's episodes (sqrt(Σ p(1-p)/n) / 4). The paired difference uses
the per-episode outcomes: both arms play the same fixed episodes, so each suite's difference is
the mean of per-episode differences and its s.e. theirs. An episode played in every round is
one episode per round, not 15 independent ones: the mean over the last rounds gets the s.e. of
one round as its honest lower bound on the uncertainty, not that over √5.

    python benchmarks/rounds_curve.py --workdir=/work/runs/rounds_curve \
        --out=benchmarks/results/rounds_curve
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

LAST = 5  # the reading's window: the last rounds


def _history(workdir: str, arm: str, seed: int) -> list[dict]:
    with open(os.path.join(workdir, arm, f"seed{seed}", "summary.json")) as f:
        return [h for h in json.load(f).get("history") or [] if "suites" in h]


def _cell(workdir: str, arm: str, seed: int) -> dict:
    """Provenance and cost of one arm's cell: the commit it ran at, its rounds' recorded wall
    seconds summed (round 0, the BC start, records none) and the last invocation's wall."""
    folder = os.path.join(workdir, arm, f"seed{seed}")
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    commit = ""
    if os.path.exists(os.path.join(folder, "commit.txt")):
        with open(os.path.join(folder, "commit.txt")) as f:
            commit = f.read().strip()
    rounds = sum(float(h.get("seconds") or 0.0) for h in summary.get("history") or [])
    return {
        "commit": commit,
        "rounds_wall_seconds": rounds,
        "last_invocation_wall_seconds": summary.get("wall_seconds"),
    }


def _outcomes(h: dict) -> dict:
    """Per-episode outcomes of the round's OOD suites (the same episodes every round)."""
    return {n: s["outcomes"] for n, s in h["suites"].items() if n.startswith("ood")}


def _ood(h: dict) -> tuple[float, float]:
    rates, var = [], 0.0
    for name, s in h["suites"].items():
        if name.startswith("ood") and s.get("n"):
            p = s["successes"] / s["n"]
            rates.append(p)
            var += p * (1 - p) / s["n"]
    k = len(rates)
    return (sum(rates) / k, math.sqrt(var) / k) if k else (math.nan, math.nan)


def _paired(ha: dict, hb: dict) -> tuple[float, float]:
    """Mean over OOD suites of the per-episode difference a - b, and its s.e."""
    means, var, k = 0.0, 0.0, 0
    for name, sa in ha["suites"].items():
        sb = hb["suites"].get(name)
        if not name.startswith("ood") or not sb or not sa.get("outcomes"):
            continue
        d = [int(x) - int(y) for x, y in zip(sa["outcomes"], sb["outcomes"], strict=True)]
        m = sum(d) / len(d)
        v = sum((x - m) ** 2 for x in d) / max(len(d) - 1, 1) / len(d)
        means, var, k = means + m, var + v, k + 1
    return (means / k, math.sqrt(var) / k) if k else (math.nan, math.nan)


def curve(workdir: str, arms: list[str], seed: int) -> dict:
    hist = {a: _history(workdir, a, seed) for a in arms}
    rounds = sorted(set.intersection(*[{int(h["round"]) for h in hs} for hs in hist.values()]))
    by = {a: {int(h["round"]): h for h in hs} for a, hs in hist.items()}
    out = {"arms": arms, "seed": seed, "cells": {a: _cell(workdir, a, seed) for a in arms}}
    out["rounds"] = []
    for r in rounds:
        row = {"round": r}
        for a in arms:
            row[a] = dict(zip(("ood", "se"), _ood(by[a][r]), strict=True))
            row[a]["outcomes"] = _outcomes(by[a][r])
        row["diff"] = dict(
            zip(("mean", "se"), _paired(by[arms[0]][r], by[arms[1]][r]), strict=True)
        )
        out["rounds"].append(row)
    tail = [row["diff"]["mean"] for row in out["rounds"] if row["round"] > max(rounds) - LAST]
    out["last_rounds_mean_diff"] = sum(tail) / len(tail) if tail else math.nan
    out["last_rounds"] = min(LAST, len(tail))
    return out


def plot(res: dict, path: str) -> None:
    import matplotlib  # lazy: only when a figure is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as above

    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [row["round"] for row in res["rounds"]]
    for a in res["arms"]:
        m = [100 * row[a]["ood"] for row in res["rounds"]]
        s = [100 * row[a]["se"] for row in res["rounds"]]
        ax.plot(xs, m, marker="o", ms=3, label=a)
        lo = [x - e for x, e in zip(m, s, strict=True)]
        hi = [x + e for x, e in zip(m, s, strict=True)]
        ax.fill_between(xs, lo, hi, alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel("OOD average success (%)")
    ax.set_title(f"seed {res['seed']}; bands: ±1 binomial s.e.")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def markdown(res: dict, command: str) -> str:
    a, b = res["arms"]
    lines = [
        "# Rounds curve (pre-registered: benchmarks/preregistration/rounds_curve.md)",
        "",
        f"Command: `{command}`",
        "",
        f"OOD average per round at seed {res['seed']} (%, ± binomial s.e.); paired difference "
        f"{a} − {b} on the same episodes (points ± s.e.).",
        "",
        f"| round | {a} | {b} | {a} − {b} |",
        "|---|---|---|---|",
    ]
    for row in res["rounds"]:
        lines.append(
            f"| {row['round']} | {100 * row[a]['ood']:.1f} ± {100 * row[a]['se']:.1f} | "
            f"{100 * row[b]['ood']:.1f} ± {100 * row[b]['se']:.1f} | "
            f"{100 * row['diff']['mean']:+.1f} ± {100 * row['diff']['se']:.1f} |"
        )
    lines += [
        "",
        f"Mean difference over the last {res['last_rounds']} rounds: "
        f"{100 * res['last_rounds_mean_diff']:+.1f} points (same episodes every round: its "
        "uncertainty is at least one round's s.e., not that divided by the rounds).",
        "",
        "Cells (per-episode outcomes of every round and suite are in the JSON):",
        "",
    ]
    for arm, c in res["cells"].items():
        lines.append(
            f"- {arm}: commit {c['commit'][:7] or '?'}; rounds 1–{res['rounds'][-1]['round']} "
            f"took {c['rounds_wall_seconds']:,.0f} s of wall (summed per round; the BC start "
            "is not in it)"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--arms", default="coda,fresh_task_bc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="path stem: <out>.json, <out>.md, <out>.png")
    a = ap.parse_args()
    command = "python benchmarks/rounds_curve.py " + " ".join(sys.argv[1:])
    arms = [x for x in a.arms.split(",") if x]
    if len(arms) != 2:
        sys.exit(f"--arms={a.arms!r} must name two arms, e.g. coda,fresh_task_bc")
    res = curve(a.workdir, arms, a.seed)
    md = markdown(res, command)
    print(md)
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump({"command": command, **res}, f, indent=1)
        with open(a.out + ".md", "w") as f:
            f.write(md)
        plot(res, a.out + ".png")


if __name__ == "__main__":
    main()
