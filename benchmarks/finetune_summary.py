"""Summarise fine-tuning runs (`finetune.py run` / `dagger` JSONs) against issue 12's bars.

Per run: the start's held-out-layout success, every evaluation along the way, the largest drop
below the start, the gain at the last evaluation and the first update count at which success
reached start + 0.15 (censored at the budget when never). Per (family, condition): those over
seeds (mean ± s.e.; updates-to-threshold as median and inter-quartile range with the censored
runs counted at the budget and marked).

    .venv/bin/python benchmarks/finetune_summary.py \
        --runs 'benchmarks/results/finetune_runs/*.json' --out benchmarks/results/finetune_summary
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

GAIN = 0.15  # the bar: +15 points of held-out-layout success
MAX_DROP = 0.05  # ... and never more than 5 points below the start
SMOOTH = 3  # evaluations in the trailing mean of the smoothed updates-to-threshold


def run_summary(path: str, label: str | None = None) -> dict:
    with open(path) as f:
        r = json.load(f)
    curve = [c for c in r["curve"] if "rate" in c]
    start = curve[0]["rate"]
    later = curve[1:]
    budget = max(c["updates"] for c in r["curve"])
    hit = [c["updates"] for c in later if c["rate"] >= start + GAIN - 1e-9]
    # the same on the trailing mean of SMOOTH evaluations: one noisy evaluation (s.e. ~3 points
    # at n = 256) crossing the bar is not the policy crossing it
    rates = [c["rate"] for c in later]
    hit_s = [
        later[i]["updates"]
        for i in range(SMOOTH - 1, len(later))
        if np.mean(rates[i - SMOOTH + 1 : i + 1]) >= start + GAIN - 1e-9
    ]
    drop = max([0.0] + [start - c["rate"] for c in later])  # 0 when it never fell below
    return {
        "file": os.path.basename(path),
        "label": label or r.get("args", {}).get("label") or os.path.basename(path)[:-5],
        "family": r.get("family") or ("pick_place" if "pick_place" in path else "stack"),
        "seed": r.get("args", {}).get("seed"),
        "start": start,
        "start_se": curve[0]["se"],
        "final": later[-1]["rate"] if later else start,
        "final_se": later[-1]["se"] if later else curve[0]["se"],
        "best": max(c["rate"] for c in curve),
        "max_drop": drop,
        "budget": budget,
        "updates_to_threshold": hit[0] if hit else None,
        "updates_to_threshold_smoothed": hit_s[0] if hit_s else None,
        "meets_gain": bool(later) and later[-1]["rate"] >= start + GAIN - 1e-9,
        "meets_no_drop": drop <= MAX_DROP + 1e-9,
        "curve": [(c["updates"], c["rate"], c["se"]) for c in curve],
        "command": r.get("command"),
    }


def _ms(xs) -> str:
    xs = np.asarray(xs, float)
    se = xs.std(ddof=1) / np.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return f"{100 * xs.mean():.1f} ± {100 * se:.1f}"


def group_summary(rows: list[dict]) -> dict:
    budget = max(r["budget"] for r in rows)
    hits = [r["updates_to_threshold"] for r in rows]
    filled = np.asarray([budget if h is None else h for h in hits], float)
    return {
        "seeds": len(rows),
        "start": _ms([r["start"] for r in rows]),
        "final": _ms([r["final"] for r in rows]),
        "gain": _ms([r["final"] - r["start"] for r in rows]),
        "max_drop": f"{100 * max(r['max_drop'] for r in rows):.1f}",
        "meets_gain": sum(r["meets_gain"] for r in rows),
        "meets_no_drop": sum(r["meets_no_drop"] for r in rows),
        "updates_to_threshold_median": float(np.median(filled)),
        "updates_to_threshold_iqr": [
            float(np.percentile(filled, 25)),
            float(np.percentile(filled, 75)),
        ],
        "censored": sum(h is None for h in hits),
    }


def paired_summary(rows: list[dict], a: str, b: str) -> dict | None:
    """Condition `a` against `b` seed by seed (same start, seed, evaluation episodes and key):
    updates to start + 0.15 (censored runs at the budget, so a ratio over censored pairs is a
    bound), the mean success over every evaluation after the start (area under the curve, a
    measure that does not hinge on one noisy crossing), and the final success."""
    by = {}
    for r in rows:
        cond, _, seed = r["label"].rpartition("_s")
        by.setdefault(cond, {})[seed] = r
    if a not in by or b not in by:
        return None
    seeds = sorted(set(by[a]) & set(by[b]), key=int)
    if not seeds:
        return None

    def auc(r):
        return float(np.mean([x for _, x, _ in r["curve"][1:]]))

    def hit(r, key="updates_to_threshold"):
        return r["budget"] if r[key] is None else r[key]

    per = []
    for s in seeds:
        ra, rb = by[a][s], by[b][s]
        per.append(
            {
                "seed": int(s),
                "updates_a": ra["updates_to_threshold"],
                "updates_b": rb["updates_to_threshold"],
                "auc_a": auc(ra),
                "auc_b": auc(rb),
                "final_a": ra["final"],
                "final_b": rb["final"],
            }
        )

    def diff(key_a, key_b):
        d = np.asarray([p[key_a] - p[key_b] for p in per], float)
        se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
        return float(d.mean()), float(se)

    ua = np.asarray([hit(by[a][s]) for s in seeds], float)
    ub = np.asarray([hit(by[b][s]) for s in seeds], float)
    sm = "updates_to_threshold_smoothed"
    sa = np.asarray([hit(by[a][s], sm) for s in seeds], float)
    sb = np.asarray([hit(by[b][s], sm) for s in seeds], float)
    return {
        "a": a,
        "b": b,
        "seeds": len(seeds),
        "per_seed": per,
        "updates_median_a": float(np.median(ua)),
        "updates_median_b": float(np.median(ub)),
        "censored_a": sum(p["updates_a"] is None for p in per),
        "censored_b": sum(p["updates_b"] is None for p in per),
        # < 1: `a` needs fewer updates (the method's claim for shaping: about 0.68)
        "updates_ratio_of_medians": float(np.median(ua) / np.median(ub)),
        "smoothed_median_a": float(np.median(sa)),
        "smoothed_median_b": float(np.median(sb)),
        "smoothed_censored_a": sum(by[a][s][sm] is None for s in seeds),
        "smoothed_censored_b": sum(by[b][s][sm] is None for s in seeds),
        "auc_diff": diff("auc_a", "auc_b"),
        "final_diff": diff("final_a", "final_b"),
    }


def paired_markdown(pairs: list[dict]) -> list[str]:
    out = [
        "",
        "| a vs b | seeds | updates to start + 0.15, median a / b (censored) | ratio a / b "
        f"| the same on a {SMOOTH}-evaluation trailing mean (censored) "
        "| mean success over the curve, a − b (pts) | final, a − b (pts) |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        ad, ase = p["auc_diff"]
        fd, fse = p["final_diff"]
        out.append(
            f"| {p['a']} vs {p['b']} | {p['seeds']} | {p['updates_median_a']:.0f} / "
            f"{p['updates_median_b']:.0f} ({p['censored_a']} / {p['censored_b']}) | "
            f"{p['updates_ratio_of_medians']:.2f} | {p['smoothed_median_a']:.0f} / "
            f"{p['smoothed_median_b']:.0f} ({p['smoothed_censored_a']} / "
            f"{p['smoothed_censored_b']}) | {100 * ad:+.1f} ± {100 * ase:.1f} | "
            f"{100 * fd:+.1f} ± {100 * fse:.1f} |"
        )
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="globs of run JSONs")
    p.add_argument("--out", required=True, help="path stem: writes .json and .md")
    p.add_argument(
        "--pair",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="conditions (run label without _s<seed>) compared seed by seed; repeatable",
    )
    args = p.parse_args(argv)
    files = sorted({f for g in args.runs for f in glob.glob(g)})
    rows = [run_summary(f) for f in files]
    groups: dict = {}
    for r in rows:
        cond = r["label"].rsplit("_s", 1)[0]  # <family>_<condition>_s<seed>
        groups.setdefault((r["family"], cond), []).append(r)
    summary = {f"{fam}/{cond}": group_summary(rs) for (fam, cond), rs in sorted(groups.items())}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    pairs = [q for a, b in args.pair if (q := paired_summary(rows, a, b)) is not None]
    with open(args.out + ".json", "w") as f:
        json.dump({"runs": rows, "groups": summary, "pairs": pairs}, f, indent=1)
    lines = [
        "| family / condition | seeds | start % | final % | gain (pts) | max drop (pts) "
        "| runs ≥ +15 | runs never < start − 5 "
        "| updates to start + 0.15: median [IQR] (censored) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in summary.items():
        lo, hi = g["updates_to_threshold_iqr"]
        lines.append(
            f"| {name} | {g['seeds']} | {g['start']} | {g['final']} | {g['gain']} | "
            f"{g['max_drop']} | {g['meets_gain']}/{g['seeds']} | {g['meets_no_drop']}/{g['seeds']} "
            f"| {g['updates_to_threshold_median']:.0f} [{lo:.0f}, {hi:.0f}] ({g['censored']}) |"
        )
    if pairs:
        lines += paired_markdown(pairs)
    lines += ["", "| run | start % | evaluations (updates: % ± s.e.) |", "|---|---|---|"]
    for r in rows:
        ev = ", ".join(f"{u}: {100 * x:.0f}±{100 * s:.0f}" for u, x, s in r["curve"][1:])
        lines.append(f"| {r['label']} | {100 * r['start']:.1f} | {ev} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
