"""The focused experiment's registered comparison (benchmarks/registrations/issue29_focused.md)
from a finished or partial `launch.study --config=configs/focused.py` folder.

    python benchmarks/focused.py --workdir=runs/focused \
        --out=benchmarks/results/focused.json    # also writes focused.md beside it
    python benchmarks/focused.py --masses        # each declared region's share of the ranges

Per cell, read from `<workdir>/<arm>/seed<k>/summary.json`: every suite's success at round 0
(the shared BC start) and at the final round, and per round the gradient shares, the critic's
AUC, the modes and where the round's generated scenes landed (the metrics row's `in_regions`).
Then, paired by seed (`coda.study.paired`): coda minus each other arm on `ood_hard` (primary,
Holm over the three) and on `ood_layouts`; the mechanism's reference, oracle_regions minus
nominal_only; and the registered validity check (round 0: ood_hard at least 10 points below id).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.sim.regions import parse_regions, which  # noqa: E402
from coda.study import paired as paired_lib  # noqa: E402
from coda.study.table import mean_se  # noqa: E402

METHOD = "coda"
PRIMARY, SECONDARY = "ood_hard", "ood_layouts"
VALIDITY_GAP = 0.10  # registered: round-0 id - ood_hard must be at least this


def _config():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
    spec = importlib.util.spec_from_file_location("_focused", os.path.join(path, "focused.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rate(suite: dict | None) -> float:
    return suite["successes"] / suite["n"] if suite and suite.get("n") else math.nan


def cell(workdir: str, arm: str, seed: int) -> dict | None:
    """One cell's numbers; None when it has not finished."""
    folder = os.path.join(workdir, arm, f"seed{seed}")
    path = os.path.join(folder, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        summary = json.load(f)
    hist = [h for h in summary.get("history") or [] if "suites" in h]
    first, last = hist[0], hist[-1]
    rounds = [
        {
            "round": h["round"],
            **{n: _rate(s) for n, s in h["suites"].items()},
            "shares": (h.get("update") or {}).get("shares"),
            "critic_auc": ((h.get("update") or {}).get("critic_ranking") or {}).get("auc_success"),
            "modes": h.get("modes"),
            "modes_in_band": h.get("modes_in_band"),
            "kinds": h.get("kinds"),
            "in_regions": h.get("in_regions"),  # where the round's generated scenes landed
        }
        for h in hist
    ]
    return {
        "arm": arm,
        "seed": seed,
        "round0": {n: _rate(s) for n, s in first["suites"].items()},
        "final_round": int(last["round"]),
        "final": {n: _rate(s) for n, s in last["suites"].items()},
        "outcomes": {n: s.get("outcomes", "") for n, s in last["suites"].items()},
        "rounds": rounds,
        "commit": summary.get("commit"),
        "wall_seconds": summary.get("wall_seconds"),
    }


def analyse(workdirs: list[str], variant: str = "") -> dict:
    """The registered comparison over the cells finished in any of `workdirs` (seeds may run
    in separate invocations; a cell found twice is an error). The variant's arms play the roles
    of configs/focused.py's ARMS in order: the method, DR, the nominal floor, the oracle."""
    cfg = _config().get_config(variant)
    arms, seeds = list(cfg.study.strategies), [int(s) for s in cfg.study.seeds]
    method, _, nominal, oracle = arms
    regions = parse_regions(cfg.study.base.sim.hard_regions)
    cells = []
    for a in arms:
        for s in seeds:
            found = [c for w in workdirs if (c := cell(w, a, s))]
            if len(found) > 1:
                raise SystemExit(f"cell {a}/seed{s} finished in more than one of {workdirs}")
            cells += found
    out: dict = {"workdirs": workdirs, "regions": [r.text for r in regions], "cells": cells}
    per_arm = {}
    for a in arms:
        mine = [c for c in cells if c["arm"] == a]
        per_arm[a] = {
            n: dict(zip(("mean", "se"), mean_se([c["final"][n] for c in mine]), strict=True))
            for n in ("id", SECONDARY, PRIMARY)
        }
        per_arm[a]["seeds"] = [c["seed"] for c in mine]
    out["arms"] = per_arm
    for metric in (PRIMARY, SECONDARY):
        values = {a: {c["seed"]: c["final"][metric] for c in cells if c["arm"] == a} for a in arms}
        others = [a for a in arms if a != method]
        out[f"paired_{metric}"] = paired_lib.paired_differences(values, method, others)
        out[f"oracle_minus_nominal_{metric}"] = paired_lib.paired_differences(
            values, oracle, [nominal], alpha=0.05
        )[nominal]
    out["roles"] = {"method": method, "nominal": nominal, "oracle": oracle}
    starts = {c["seed"]: c["round0"] for c in cells}
    gaps = [s["id"] - s[PRIMARY] for s in starts.values()]
    out["validity"] = {
        "round0": starts,
        "gap_mean": mean_se(gaps)[0],
        "gap_se": mean_se(gaps)[1],
        "valid": bool(gaps) and mean_se(gaps)[0] >= VALIDITY_GAP,
    }
    return out


def _pct(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def markdown(res: dict, command: str) -> str:
    v = res["validity"]
    lines = [
        "# Focused experiment (issue 29 item 8)",
        "",
        f"Command: `{command}`; registration: {res['registration']}; "
        f"regions {res['regions']}; cells finished: {len(res['cells'])}.",
        "",
        f"Validity (registered): round-0 id − ood_hard = {_pct(v['gap_mean'])} ± "
        f"{_pct(v['gap_se'])} pts over seeds (needs ≥ {100 * VALIDITY_GAP:.0f}): "
        f"{'valid' if v['valid'] else 'NOT valid'}.",
        "",
        "| arm | seeds | id % | ood_layouts % | ood_hard % |",
        "|---|---|---|---|---|",
    ]
    for a, r in res["arms"].items():
        cells = " | ".join(
            f"{_pct(r[n]['mean'])} ± {_pct(r[n]['se'])}" for n in ("id", SECONDARY, PRIMARY)
        )
        lines.append(f"| {a} | {r['seeds']} | {cells} |")
    walls = {a: [c["wall_seconds"] for c in res["cells"] if c["arm"] == a] for a in res["arms"]}
    total = sum(w for ws in walls.values() for w in ws if w)
    per = ", ".join(f"{a} {sum(ws) / len(ws):.0f} s" for a, ws in walls.items() if ws)
    lines += ["", f"Wall time per cell (mean, incl. round 0 where trained): {per}; "
              f"all cells {total / 3600:.2f} h."]  # fmt: skip
    lines += ["", "Per cell, final round (id / ood_layouts / ood_hard %) and where each round's "
              "generated scenes landed (nominal / hard0 / hard1 / hard2):", ""]  # fmt: skip
    for c in res["cells"]:
        f = c["final"]
        land = "; ".join(
            f"r{r['round']} " + "/".join(str(v) for v in r["in_regions"].values())
            for r in c["rounds"]
            if r.get("in_regions")
        )
        auc = ", ".join(f"{r['critic_auc']:.2f}" for r in c["rounds"] if r.get("critic_auc"))
        lines.append(
            f"- {c['arm']} seed {c['seed']}: {_pct(f['id'])} / {_pct(f[SECONDARY])} / "
            f"{_pct(f[PRIMARY])}; scenes {land}; critic AUC by round {auc}; "
            f"kinds {[r['kinds'] for r in c['rounds'] if r.get('kinds')]}"
        )
    for metric in (PRIMARY, SECONDARY):
        label = (
            f"{metric} success (the registered {'primary' if metric == PRIMARY else 'secondary'})"
        )
        roles = res.get("roles") or {"method": METHOD, "nominal": "nominal_only",
                                     "oracle": "oracle_regions"}  # fmt: skip
        lines += [
            "",
            *paired_lib.markdown(res[f"paired_{metric}"], roles["method"], metric=label),
        ]
        o, on = res[f"oracle_minus_nominal_{metric}"], f"{roles['oracle']} − {roles['nominal']}"
        lines.append(
            f"{on} on {metric}: {_pct(o['mean'])} ± {_pct(o['se'])} pts "
            f"(seeds {o['seeds']}, p {o['p']:.3g})."
            if o["n"] >= 2
            else f"{on} on {metric}: fewer than 2 paired seeds."
        )
    return "\n".join(lines) + "\n"


def masses(n: int = 2000) -> dict:
    """Each region's share of fresh scenes of the programs (full ranges)."""
    import numpy as np

    from coda.sim.sdk import exec_program

    mod = _config()
    regions = parse_regions(mod.HARD_REGIONS)
    rng = np.random.default_rng(0)
    counts = [0] * (len(regions) + 1)
    for k in range(n):
        prog = mod.PROGRAMS[k % len(mod.PROGRAMS)]
        s = exec_program(prog, int(rng.integers(2**31)), "train", isolation="inprocess")
        counts[which(regions, s)] += 1  # -1: nominal (the last slot)
    shares = {r.text: counts[i] / n for i, r in enumerate(regions)}
    return {"scenes": n, "shares": shares, "nominal": counts[-1] / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="runs/focused", help="study folder(s), comma-separated")
    ap.add_argument("--out", default="")
    ap.add_argument("--masses", action="store_true")
    ap.add_argument("--variant", default="", help="configs/focused.py variant the workdir ran")
    ap.add_argument(
        "--registration",
        default="benchmarks/registrations/issue29_focused.md",
        help="the registration the workdir ran under (e.g. issue29_focused_v3.md)",
    )
    a = ap.parse_args()
    if a.masses:
        print(json.dumps(masses(), indent=1))
        return
    workdirs = [w for w in a.workdir.split(",") if w]
    missing = [w for w in workdirs if not os.path.isdir(w)]
    if missing or not workdirs:
        raise SystemExit(f"--workdir: {missing or a.workdir!r} is not a launch.study folder")
    command = "python benchmarks/focused.py " + " ".join(sys.argv[1:])
    res = analyse(workdirs, a.variant)
    res["command"] = command
    res["registration"] = a.registration
    res["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    text = markdown(res, command)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1, default=lambda x: None)
        with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
