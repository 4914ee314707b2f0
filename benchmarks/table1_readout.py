"""Why a Table 1 study came out as it did: the mechanism readout its registration names
(benchmarks/preregistration/table1.md, "Secondary"), from the cells' own summary.json files.

Per arm, over the seeds finished: the change of the OOD average and of ID from the shared
round 0 to the final round (paired by seed: mean ± seed-level s.e.), and per round (mean over
seeds): where the budget went (scene kinds), the share of the policy gradient from each data
source, the critic's held-out ranking AUC (by success and by return), the success of the
round's own rollouts (all, and on targeted scenes), modes validated so far.

    python benchmarks/table1_readout.py --workdir=/work/runs/table1_prereg \
        --out=benchmarks/results/table1_prereg_readout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.study import paired, read_cells  # noqa: E402
from coda.study.table import mean_se  # noqa: E402


def _rates(row: dict) -> dict[str, float]:
    return {n: s["successes"] / s["n"] for n, s in row["suites"].items() if s.get("n")}


def _round(h: dict) -> dict:
    u = h.get("update") or {}
    rank = u.get("critic_ranking") or {}
    targeted = h.get("targeted") or 0
    return {
        "kinds": h.get("kinds") or {},
        "shares": u.get("shares") or {},
        "auc_success": rank.get("auc_success", math.nan),
        "auc_return": rank.get("auc_return", math.nan),
        "collect_success": h.get("collect_success", math.nan),
        "targeted": targeted,
        "targeting_precision": h.get("targeting_precision", math.nan),
        "validated": (h.get("modes") or {}).get("validated", 0),
    }


def _mean(xs) -> float:
    xs = [x for x in xs if isinstance(x, (int, float)) and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else math.nan


def readout(workdir: str) -> dict:
    out = {}
    for arm, seeds in read_cells(workdir).items():
        deltas = {"ood_average": [], "id": []}
        per_round: dict[int, list[dict]] = {}
        for s in seeds.values():
            hist = [h for h in s.get("history") or [] if "suites" in h]
            r0, rf = _rates(hist[0]), _rates(hist[-1])
            deltas["ood_average"].append(
                paired.ood_average(hist[-1]["suites"]) - paired.ood_average(hist[0]["suites"])
            )
            deltas["id"].append(rf.get("id", math.nan) - r0.get("id", math.nan))
            for h in s["history"][1:]:
                per_round.setdefault(int(h["round"]), []).append(_round(h))
        rounds = {}
        for r, rows in sorted(per_round.items()):
            keys = sorted({k for x in rows for k in x["shares"]})
            kinds = sorted({k for x in rows for k in x["kinds"]})
            rounds[r] = {
                "kinds": {k: _mean([x["kinds"].get(k, 0) for x in rows]) for k in kinds},
                "shares": {k: _mean([x["shares"].get(k, 0.0) for x in rows]) for k in keys},
                **{
                    k: _mean([x[k] for x in rows])
                    for k in (
                        "auc_success",
                        "auc_return",
                        "collect_success",
                        "targeted",
                        "targeting_precision",
                        "validated",
                    )
                },
            }
        out[arm] = {
            "seeds": sorted(seeds),
            "delta": {k: mean_se(v) for k, v in deltas.items()},
            "rounds": rounds,
        }
    return out


SECONDARY = ("coda", ("coda_selfimit", "no_memory"))  # the registration's ablation pairs


def secondary(workdir: str) -> dict:
    """The registered secondary comparisons: coda − each ablation at the final round, on the
    OOD average and on ID, paired by seed, unadjusted (each its own family of one)."""
    method, ablations = SECONDARY
    cells = read_cells(workdir)
    out: dict = {}
    for metric in ("ood_average", "id"):
        values: dict[str, dict[int, float]] = {}
        for arm, seeds in cells.items():
            for seed, s in seeds.items():
                hist = [h for h in s.get("history") or [] if "suites" in h]
                last = hist[-1]["suites"]
                v = paired.ood_average(last) if metric == "ood_average" else _rates(hist[-1])
                values.setdefault(arm, {})[seed] = v if metric == "ood_average" else v.get("id")
        out[metric] = {
            b: paired.paired_differences(values, method, [b])[b]
            for b in ablations
            if b in values and method in values
        }
    return out


def _p(x: float, scale: float = 100.0, nd: int = 1) -> str:
    return "–" if not math.isfinite(x) else f"{x * scale:.{nd}f}"


def secondary_markdown(sec: dict) -> list[str]:
    lines = [
        "",
        "Registered secondary comparisons (coda − each ablation at the final round, paired by "
        "seed, unadjusted; points, mean ± seed-level s.e., 95 % CI, p of the paired t):",
        "",
        "| metric | ablation | seeds | coda − ablation | 95 % CI | p |",
        "|---|---|---|---|---|---|",
    ]
    for metric, rows in sec.items():
        for b, r in rows.items():
            lo, hi = r["ci"]
            lines.append(
                f"| {metric} | {b} | {r['n']} | {_p(r['mean'])} ± {_p(r['se'])} | "
                f"[{_p(lo)}, {_p(hi)}] | {r['p']:.3f} |"
            )
    return lines


def markdown(res: dict, command: str, sec: dict | None = None, title: str = "") -> str:
    lines = [
        f"# {title or 'Table 1 (pre-registered)'}: mechanism readout",
        "",
        f"Command: `{command}`",
        "",
        "Change from the shared round 0 to the final round, per arm (points; mean ± seed-level "
        "s.e. over the seeds finished):",
        "",
        "| arm | seeds | Δ OOD average | Δ ID |",
        "|---|---|---|---|",
    ]
    for arm, r in res.items():
        (mo, so), (mi, si) = r["delta"]["ood_average"], r["delta"]["id"]
        lines.append(f"| {arm} | {len(r['seeds'])} | {_p(mo)} ± {_p(so)} | {_p(mi)} ± {_p(si)} |")
    lines += [
        "",
        "Per round (means over seeds): scene kinds bought; gradient shares by data source; "
        "critic AUC on fresh chunks (by success / by return); success of the round's own "
        "rollouts; targeted scenes and the share on which the policy failed in the mode's phase "
        "(targeting precision); modes validated so far.",
        "",
        "| arm | round | kinds | gradient shares % | AUC succ / ret | collect % | targeted "
        "(precision) | validated |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, r in res.items():
        for rd, x in r["rounds"].items():
            kinds = ", ".join(f"{k} {v:.0f}" for k, v in x["kinds"].items() if v)
            shares = ", ".join(f"{k} {100 * v:.0f}" for k, v in x["shares"].items() if v > 5e-4)
            lines.append(
                f"| {arm} | {rd} | {kinds or '–'} | {shares or '–'} | "
                f"{_p(x['auc_success'], 1, 2)} / {_p(x['auc_return'], 1, 2)} | "
                f"{_p(x['collect_success'])} | {x['targeted']:.0f} "
                f"({_p(x['targeting_precision'])}) | {_p(x['validated'], 1, 1)} |"
            )
    if sec and any(sec.values()):
        lines += secondary_markdown(sec)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", default="", help="path stem: writes <out>.json and <out>.md")
    ap.add_argument("--title", default="", help="the study's name in the heading")
    a = ap.parse_args()
    command = "python benchmarks/table1_readout.py " + " ".join(sys.argv[1:])
    res, sec = readout(a.workdir), secondary(a.workdir)
    md = markdown(res, command, sec, a.title)
    print(md)
    if a.out:
        with open(a.out + ".json", "w") as f:
            json.dump({"command": command, "arms": res, "secondary": sec}, f, indent=1, default=str)
        with open(a.out + ".md", "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
