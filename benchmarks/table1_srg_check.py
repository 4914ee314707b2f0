"""The Table 1 addendum's registered checks (benchmarks/registrations/issue29_srg_addendum.md):
the reproduction check of the prereg's coda cells and success_rate_guided's allocation.

  python benchmarks/table1_srg_check.py --workdir=/work/runs/table1_srg \
      --prereg=benchmarks/results/table1_prereg.json --out=benchmarks/results/table1_srg_check

1. Reproduction: every suite's per-episode outcome string of each coda cell at its last evaluated
   round against the prereg's (`table1_prereg.json` cells, e81469c); per seed, the suites that
   differ and by how many episodes. `reproduced` is true only if all 5 seeds are identical.
2. If reproduced: coda - success_rate_guided (this run) joins the prereg's family of 6 baselines
   in place of its defective success_rate_guided row; Holm over the 6 p-values (the 5 stored
   ones as run).
3. The allocation: per success_rate_guided cell and round, the failure-rate weights it read
   (1 - success + 0.05 over `program_success` of the previous round's checkpoint) and their
   max / min ratio (1 = uniform, what the prereg's row had).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib

from coda.study import paired as paired_lib
from coda.study import read_cells
from coda.study.table import cell_record

SUITES = ("id", "ood_layouts", "ood_instances", "ood_categories", "ood_tasks")


def reproduction(ours: dict, prereg: dict) -> dict:
    old = {c["seed"]: c for c in prereg["cells"] if c["strategy"] == "coda"}
    per_seed = {}
    for seed, summary in sorted(ours.items()):
        new = cell_record(summary)["suites"]
        diff = {}
        for s in SUITES:
            a, b = new.get(s, {}).get("outcomes", ""), old[seed]["suites"][s]["outcomes"]
            if a != b:
                n = sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))
                diff[s] = n
        per_seed[seed] = diff
    same = len(per_seed) == len(old) and all(not d for d in per_seed.values())
    return {"per_seed_differing_episodes": per_seed, "reproduced": same}


def allocation(workdir: str) -> dict:
    out = {}
    root = os.path.join(workdir, "success_rate_guided")
    for sd in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        rounds = {}
        for r in (1, 2):
            path = os.path.join(root, sd, "checkpoints", f"round_{r - 1:04d}", "state.json")
            if not os.path.exists(path):
                rounds[r] = None  # the checkpoint was not kept
                continue
            with open(path) as f:
                ps = json.load(f).get("program_success", {})
            w = {p: 1.0 - s + 0.05 for p, s in ps.items()}
            ratio = max(w.values()) / min(w.values()) if w else 1.0
            rounds[r] = {"programs_with_success": len(ps), "max_over_min_weight": ratio}
        out[sd] = rounds
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--prereg", default="benchmarks/results/table1_prereg.json")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    prereg = json.loads(pathlib.Path(args.prereg).read_text())
    cells = read_cells(args.workdir)
    res = {
        "command": "python benchmarks/table1_srg_check.py "
        f"--workdir={args.workdir} --prereg={args.prereg} --out={args.out}",
        "reproduction": reproduction(cells.get("coda", {}), prereg),
        "allocation": allocation(args.workdir),
    }
    if res["reproduction"]["reproduced"]:
        values = {
            arm: {s: cell_record(c)["ood_average"] for s, c in cells[arm].items()}
            for arm in ("coda", "success_rate_guided")
        }
        new = paired_lib.paired_differences(values, "coda", ["success_rate_guided"])
        row = new["success_rate_guided"]
        baselines = list(prereg["paired"])
        ps = [
            row["p"] if b == "success_rate_guided" else prereg["paired"][b]["p"] for b in baselines
        ]
        res["family"] = {
            "baselines": baselines,
            "p": ps,
            "p_holm": paired_lib.holm(ps),
            "new_row": row,
        }
    pathlib.Path(args.out + ".json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, indent=1, default=str)[:3000])


if __name__ == "__main__":
    main()
