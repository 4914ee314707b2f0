"""Records a finished `launch.main` run (wall time, machine load, success per round with s.e.,
and the report's "did the policy learn?" comparison) as a committed result: the default
config's measurement for the loop issue.

    python -m launch.main --config=configs/coda.py --workdir=/tmp/coda_default/run  # the run
    python benchmarks/loop_run.py --workdir /tmp/coda_default/run --start 1764545000 \
        --end 1764547000 --out benchmarks/results/loop_default.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from coda.loop.evaluation import learning  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--start", type=float, required=True, help="unix time the run started")
    p.add_argument("--end", type=float, required=True, help="unix time the run ended")
    p.add_argument("--command", default="python -m launch.main --config=configs/coda.py")
    p.add_argument("--load", default="", help="machine load while it ran (uptime)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    with open(os.path.join(a.workdir, "summary.json")) as f:
        s = json.load(f)
    rows = []
    for h in s["history"]:
        rows.append(
            {
                "round": h["round"],
                **{n: (r["rate"], r["se"], r["n"]) for n, r in h.get("suites", {}).items()},
                "ood_pooled": (h["ood"]["rate"], h["ood"]["se"], h["ood"]["n"])
                if "ood" in h
                else None,
                "untrained_id": h.get("untrained_id", {}).get("rate"),
                "seconds": h.get("seconds"),
                # where the policy's gradient came from and the critic's held-out ranking
                "shares": h.get("update", {}).get("shares"),
                "critic_ranking": h.get("update", {}).get("critic_ranking"),
            }
        )
    out = {
        "command": a.command,
        "wall_seconds": a.end - a.start,
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs (shared with other jobs)",
        "load": a.load,
        "stopped": s["stopped"],
        "headline": s["headline"],
        "rounds": rows,
        # round 0 vs the later rounds, paired by episode (coda.loop.evaluation.learning)
        "learning": s.get("learning") or learning(s["history"]),
        "costs": s["costs"],
        "note": "success = (rate, s.e., n) per suite, measured by ν on the run's fixed suites",
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out["learning"], indent=1))


if __name__ == "__main__":
    main()
