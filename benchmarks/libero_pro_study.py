"""The LIBERO-PRO study's table (issue 30, the paper's Table 2) from the registered readouts.

Each suite's registered readout (`benchmarks/study_readout.py`: per-arm success per evaluation
suite at the last round, the registered family of paired comparisons, per-episode outcomes)
goes in as `<suite>=<readout.json>`; this writes one table over the suites:

- success per arm on standard LIBERO (held-out initial states, `ood_layouts`), LIBERO-PRO
  position (`ood_swap`) and task (`ood_tasks`) perturbations, language and objects, and ID;
- the registered primary comparisons, as each readout computed them (paired by seed, Holm);
- the registered secondary: standard LIBERO, coda_demos − sft, against a 2-point margin (95 %
  CI over seeds, not tested);
- the paper's anchors beside ours in relative terms (its policy is a pretrained VLA, ours a
  small policy trained from scratch: absolute numbers are not comparable).

    python benchmarks/libero_pro_study.py \\
        --readouts=libero_spatial=benchmarks/results/libero_pro_v4_spatial_readout.json,... \\
        --out=benchmarks/results/libero_pro_study
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.study import paired  # noqa: E402

COLUMNS = ("ood_layouts", "ood_swap", "ood_tasks", "ood_language", "ood_objects", "id")
NAMES = {
    "ood_layouts": "standard (held-out states)",
    "ood_swap": "PRO position",
    "ood_tasks": "PRO task",
    "ood_language": "language",
    "ood_objects": "objects",
    "id": "ID",
}
METHOD, BC, DR = "coda_demos", "sft", "domain_randomization_demos"
MARGIN = 0.02  # the registered non-inferiority margin on standard LIBERO (2 points)
# the paper's Table 2 (its starting checkpoint -> trained on CoDA's variants), in %
PAPER = {"ood_swap": (25.0, 84.0), "ood_tasks": (1.0, 76.0), "ood_layouts": (97.1, 97.4)}


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def seed_means(outcomes: dict, arm: str, suite: str) -> dict[int, float]:
    """{seed: success rate} of an arm on one evaluation suite, from its per-episode outcomes."""
    by_seed = outcomes.get(arm, {})
    return {int(s): v[suite].count("1") / len(v[suite]) for s, v in by_seed.items() if v.get(suite)}


def study(readouts: dict[str, dict]) -> dict:
    """The combined table's numbers (module doc); `readouts`: {suite: readout JSON}."""
    out = {}
    for suite, r in readouts.items():
        arms = {a: {k: r["arms"][a]["success"].get(k) for k in COLUMNS} for a in r["arms"]}
        vals = {a: seed_means(r["outcomes"], a, "ood_layouts") for a in r["outcomes"]}
        std = paired.paired_differences(vals, METHOD, [BC]).get(BC) if METHOD in vals else None
        if std is not None:
            std["non_inferior"] = bool(std["n"] >= 2 and std["ci"][0] > -MARGIN)
        out[suite] = {
            "command": r["command"],
            "seeds": {a: r["arms"][a]["seeds"] for a in r["arms"]},
            "success": arms,
            "primary": r["family"],
            "standard_vs_bc": std,
        }
    return out


def _relative(rows: dict, metric: str) -> str:
    bc, ours = rows.get(BC, {}).get(metric), rows.get(METHOD, {}).get(metric)
    if bc is None or ours is None:
        return "–"
    ratio = f"× {ours / bc:.2f}" if bc > 0 else "× – (BC at 0)"
    return f"{100 * bc:.1f} → {100 * ours:.1f} ({_pts(ours - bc)} pts, {ratio})"


def markdown(res: dict, command: str) -> str:
    lines = ["# The LIBERO-PRO study (issue 30, the paper's Table 2)", "", f"Command: `{command}`"]
    lines += ["", "Readouts: " + "; ".join(f"{s}: `{r['command']}`" for s, r in res.items())]
    lines += ["", "## Success (%, mean over seeds at the last round; 100 episodes per suite)", ""]
    lines += ["| suite | arm | seeds | " + " | ".join(NAMES[c] for c in COLUMNS) + " |"]
    lines += ["|---" * (3 + len(COLUMNS)) + "|"]
    for suite, r in res.items():
        for arm, row in r["success"].items():
            cells = [f"{100 * row[c]:.1f}" if row[c] is not None else "–" for c in COLUMNS]
            lines += [f"| {suite} | {arm} | {len(r['seeds'][arm])} | " + " | ".join(cells) + " |"]
    lines += ["", "## Registered primary comparisons (paired by seed; Holm within a suite)", ""]
    head = "| suite | comparison | difference (pts) | s.e. | adjusted CI | p (Holm) | rejects? |"
    lines += [head, "|---|---|---|---|---|---|---|"]
    for suite, r in res.items():
        for name, c in r["primary"].items():
            ci = f"[{_pts(c['ci'][0])}, {_pts(c['ci'][1])}]"
            rej = "yes" if c["p_holm"] < 0.05 else "no"
            ph = f"{c['p_holm']:.3g}"
            if c.get("degenerate"):  # the same difference in every seed: no t statistic
                ph, rej = "undefined (same difference in every seed)", "no (no test)"
            lines += [
                f"| {suite} | {name} | {_pts(c['mean'])} | {100 * c['se']:.1f} | {ci} | "
                f"{ph} | {rej} |"
            ]
    lines += ["", f"## Standard LIBERO: {METHOD} − {BC} (registered secondary, 2-point margin)", ""]
    lines += ["| suite | difference (pts) | s.e. | 95 % CI | within the margin? |"]
    lines += ["|---|---|---|---|---|"]
    for suite, r in res.items():
        s = r["standard_vs_bc"]
        if s is None:
            lines += [f"| {suite} | – | – | – | no {METHOD} arm |"]
            continue
        ci = f"[{_pts(s['ci'][0])}, {_pts(s['ci'][1])}]"
        yes = "yes" if s["non_inferior"] else "no"
        lines += [f"| {suite} | {_pts(s['mean'])} | {100 * s['se']:.1f} | {ci} | {yes} |"]
    lines += ["", "## Against the paper's anchors, in relative terms", ""]
    lines += ["The paper trains a pretrained VLA; ours is a small policy trained from scratch on"]
    lines += ["planner demos, so only directions and ratios compare, not absolute numbers.", ""]
    lines += [f"| metric | paper: start → CoDA | per suite here: {BC} → {METHOD} |"]
    lines += ["|---|---|---|"]
    for metric, (a, b) in PAPER.items():
        ours = "; ".join(f"{s}: {_relative(r['success'], metric)}" for s, r in res.items())
        lines += [f"| {NAMES[metric]} | {a:.1f} → {b:.1f} (× {b / a:.2f}) | {ours} |"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readouts", required=True, help="suite=readout.json,... (comma-separated)")
    ap.add_argument("--out", required=True, help="output stem (.json and .md written)")
    args = ap.parse_args(argv)
    readouts = {}
    for item in args.readouts.split(","):
        suite, sep, path = item.partition("=")
        if not sep or not os.path.isfile(path):
            sys.exit(f"--readouts: {item!r} is not suite=<an existing readout JSON>")
        with open(path) as f:
            readouts[suite] = json.load(f)
    res = study(readouts)
    command = "python benchmarks/libero_pro_study.py " + " ".join(argv or sys.argv[1:])
    with open(args.out + ".json", "w") as f:
        json.dump({"command": command, "suites": res}, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(res, command))
    print(f"wrote {args.out}.md / .json")


if __name__ == "__main__":
    main()
