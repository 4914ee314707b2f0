"""Tables of loop runs seeded from LIBERO (`configs/libero_loop.py`) from their run folders.

    python benchmarks/libero_loop_summary.py RUN [RUN ...] [--json OUT]

Per run and round: success on every suite (successes / n, rate ± binomial s.e.), the pooled
OOD rate, planner success on the pool (round 0), the round's collection success and wall time.
Reads the last checkpoint's state.json (every round's row) and config.json of each folder.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os


def _last_state(run: str) -> dict:
    dirs = sorted(glob.glob(os.path.join(run, "checkpoints", "round_*")))
    done = [d for d in dirs if os.path.exists(os.path.join(d, "COMPLETE"))]
    if not done:
        raise SystemExit(f"{run}: no complete round")
    with open(os.path.join(done[-1], "state.json")) as f:
        return json.load(f)


def summarize(run: str) -> dict:
    with open(os.path.join(run, "config.json")) as f:
        cfg = json.load(f)
    rows = []
    for r in _last_state(run)["history"]:
        row = {"round": r["round"], "suites": r.get("suites", {}), "ood": r.get("ood")}
        for k in ("planner_success_pool", "pool", "demo_layouts", "collect_success", "seconds"):
            if k in r:
                row[k] = r[k]
        rows.append(row)
    return {
        "run": os.path.basename(os.path.normpath(run)),
        "strategy": cfg["strategy"],
        "source": cfg["sim"]["source"],
        "libero": cfg.get("libero"),
        "eval_episodes": cfg["eval"]["episodes"],
        "rounds": rows,
    }


def _cell(s: dict | None) -> str:
    if not s:
        return "–"
    return f"{100 * s['rate']:.1f} ± {100 * s['se']:.1f} ({s['successes']}/{s['n']})"


def markdown(summaries: list[dict]) -> str:
    out = []
    for s in summaries:
        names = list(s["rounds"][0]["suites"])
        out += [
            f"### {s['run']}: strategy `{s['strategy']}`, `{s['source']}`, "
            f"{s['eval_episodes']} episodes per suite",
            "",
            "| round | " + " | ".join(names) + " | OOD pooled | collect success |",
            "|---" * (len(names) + 3) + "|",
        ]
        for r in s["rounds"]:
            cs = r.get("collect_success")
            cs = "–" if cs is None or (isinstance(cs, float) and math.isnan(cs)) else f"{cs:.2f}"
            cells = [_cell(r["suites"].get(n)) for n in names]
            out.append(f"| {r['round']} | " + " | ".join(cells) + f" | {_cell(r['ood'])} | {cs} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    summaries = [summarize(r) for r in a.runs]
    print(markdown(summaries))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summaries, f, indent=1)


if __name__ == "__main__":
    main()
