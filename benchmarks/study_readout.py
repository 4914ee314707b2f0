"""A registered study's primary comparisons, from its cells' own summaries.

For a study workdir (`launch.study`: `<arm>/seed<k>/summary.json`), the registered family of
paired comparisons at each cell's last evaluated round: per metric (a suite's success rate, or
the mean of several suites' rates, written `ood_swap+ood_tasks`) and per pair `arm-other`, the
per-seed differences, their mean and seed-level s.e., the CI widened for the family
(Bonferroni over metrics × pairs), the paired t p and its Holm adjustment over the family
(`coda.study.paired.paired_family`). Also each arm's per-suite success (mean over seeds) and the
per-episode outcomes of every cell, so every number can be recomputed.

    python benchmarks/study_readout.py --workdir=/work/runs/libero_variants \
        --metrics=ood_swap+ood_tasks \
        --pairs=domain_randomization_demos-fresh_task_bc,uniform_variants_demos-fresh_task_bc \
        --registration=benchmarks/registrations/issue30_libero_variants.md \
        --out=benchmarks/results/libero_variants_readout
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.study import paired, read_cells  # noqa: E402


def cells(workdir: str) -> dict[str, dict[int, dict]]:
    """arm -> seed -> the last evaluated round's {"round", "suites"} of every finished cell."""
    out: dict[str, dict[int, dict]] = {}
    for arm, seeds in read_cells(workdir).items():
        for seed, summary in seeds.items():
            hist = [h for h in summary.get("history") or [] if "suites" in h]
            if hist:
                last = {"round": hist[-1]["round"], "suites": hist[-1]["suites"]}
                out.setdefault(arm, {})[seed] = last
    return out


def metric_value(suites: dict, metric: str) -> float:
    """A suite's rate, or the mean of the rates of `a+b+...`; NaN when one is missing."""
    rates = []
    for name in metric.split("+"):
        s = suites.get(name)
        if not s or not s.get("n"):
            return math.nan
        rates.append(s["successes"] / s["n"])
    return sum(rates) / len(rates)


def readout(workdir: str, metrics: list[str], pairs: list[tuple[str, str]]) -> dict:
    cs = cells(workdir)
    values = {
        m: {arm: {s: metric_value(c["suites"], m) for s, c in by.items()} for arm, by in cs.items()}
        for m in metrics
    }
    suites = sorted({n for by in cs.values() for c in by.values() for n in c["suites"]})
    arms = {
        arm: {
            "seeds": sorted(by),
            "rounds": sorted({c["round"] for c in by.values()}),
            "success": {
                n: sum(metric_value(c["suites"], n) for c in by.values()) / len(by) for n in suites
            },
        }
        for arm, by in cs.items()
    }
    outcomes = {
        arm: {
            s: {n: x.get("outcomes") for n, x in c["suites"].items()} for s, c in sorted(by.items())
        }
        for arm, by in cs.items()
    }
    return {
        "family": paired.paired_family(values, pairs),
        "arms": arms,
        "suites": suites,
        "outcomes": outcomes,
    }


def _pts(x: float) -> str:
    return "–" if not math.isfinite(x) else f"{100 * x:+.1f}"


def markdown(res: dict, command: str, registration: str) -> str:
    fam = res["family"]
    lines = [
        f"# Registered comparisons ({registration})"
        if registration
        else "# Comparisons not registered (exploratory: read as a description, not a test)",
        "",
        f"Command: `{command}`",
        "",
        f"At each cell's last evaluated round; per-seed differences; CI with t at 1 − α/(2·"
        f"{len(fam)}) (Bonferroni over the family of {len(fam)}); p two-sided paired t, Holm over "
        "the family; α = 0.05.",
        "",
        "| comparison | seeds | difference (pts) | s.e. | adjusted CI (pts) | p | p (Holm) | "
        "rejects? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in fam.items():
        lo, hi = r["ci"]
        rej = "yes" if r.get("p_holm", math.nan) < 0.05 else "no"
        p, ph = f"{r['p']:.3g}", f"{r.get('p_holm', math.nan):.3g}"
        if r.get("degenerate"):  # `coda.study.paired`: the same difference in every seed
            p, ph, rej = "undefined (same difference in every seed)", "–", "no (no test)"
        lines.append(
            f"| {key} | {r['n']} | {_pts(r['mean'])} | {100 * r['se']:.1f} | "
            f"[{_pts(lo)}, {_pts(hi)}] | {p} | {ph} | {rej} |"
        )
    suites = res["suites"]
    lines += [
        "",
        "Success per suite (%, mean over seeds at the last evaluated round):",
        "",
        "| arm | seeds | " + " | ".join(suites) + " |",
        "|---|---|" + "---|" * len(suites),
    ]
    for arm, a in res["arms"].items():
        row = " | ".join(f"{100 * a['success'][n]:.1f}" for n in suites)
        lines.append(f"| {arm} | {len(a['seeds'])} | {row} |")
    lines += ["", "Per-episode outcomes of every cell and suite are in the JSON."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--metrics", required=True, help="comma-separated; a+b = mean of suites")
    ap.add_argument("--pairs", required=True, help="comma-separated arm-other")
    ap.add_argument("--registration", default="")
    ap.add_argument("--out", default="", help="path stem: <out>.json and <out>.md")
    args = ap.parse_args(argv)
    pairs = []
    for p in args.pairs.split(","):
        a, sep, b = p.partition("-")
        if not sep or not a or not b:
            sys.exit(f"--pairs: {p!r} is not arm-other")
        pairs.append((a, b))
    res = readout(args.workdir, args.metrics.split(","), pairs)
    known = set(res["arms"])
    missing = sorted({x for pr in pairs for x in pr} - known)
    if missing:
        sys.exit(f"--pairs names arms with no finished cell: {missing}; valid: {sorted(known)}")
    given = sys.argv[1:] if argv is None else argv
    command = "python benchmarks/study_readout.py " + " ".join(given)
    md = markdown(res, command, args.registration)
    print(md)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump({"command": command, **res}, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
