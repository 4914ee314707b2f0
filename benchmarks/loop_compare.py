"""Arms of a loop comparison side by side: each run folder's success per suite over a range of
rounds, and each arm's difference from a reference arm. Arms that adopted one round 0
(`loop.start_from`) or share a seed's round 0 share their fixed suites: then every episode is
counted once — its success averaged over the rounds — and the difference is paired by episode
(s.e. of the per-episode differences); runs without per-episode outcomes fall back to the
binomial s.e. over the pooled episodes (which counts an episode once per round: optimistic).

    python benchmarks/loop_compare.py --rounds 5 8 --ref sft \
        coda=/work/runs/s8/coda sft=/work/runs/s8/sft --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np


def pooled(workdir: str, lo: int, hi: int) -> dict[str, dict]:
    """{suite: {rate, se, n, successes}} over rounds lo..hi of a run's summary.json."""
    with open(os.path.join(workdir, "summary.json")) as f:
        hist = json.load(f)["history"]
    rows = [h for h in hist if "suites" in h and lo <= h["round"] <= hi]
    if not rows:
        raise SystemExit(f"{workdir}: no evaluated round in {lo}..{hi}")
    out = {}
    for name in [*rows[0]["suites"], "ood"]:
        parts = [h["ood"] if name == "ood" else h["suites"][name] for h in rows]
        k, n = sum(int(p["successes"]) for p in parts), sum(int(p["n"]) for p in parts)
        p = k / n if n else math.nan
        out[name] = {"rate": p, "se": math.sqrt(p * (1 - p) / n) if n else math.nan, "n": n,
                     "successes": k}  # fmt: skip
        m = int(parts[0]["n"])
        if m and all(len(x.get("outcomes", "")) == m for x in parts):  # each episode once
            per = np.mean([[c == "1" for c in x["outcomes"]] for x in parts], axis=0)
            out[name].update(
                per_episode=[round(float(v), 4) for v in per],
                episodes=m,
                se=float(per.std(ddof=1) / math.sqrt(m)) if m > 1 else math.nan,
            )
    out["_rounds"] = [h["round"] for h in rows]
    return out


def _difference(a: dict, ref: dict) -> dict:
    """a - ref: paired by episode when both have per-episode rates over the same episodes."""
    pa, pr = a.get("per_episode"), ref.get("per_episode")
    if pa is not None and pr is not None and len(pa) == len(pr) > 1:
        d = np.asarray(pa) - np.asarray(pr)
        se = float(d.std(ddof=1) / math.sqrt(d.size))
        return {"delta": float(d.mean()), "se": se, "paired": True, "episodes": int(d.size)}
    return {
        "delta": a["rate"] - ref["rate"],
        "se": math.hypot(a["se"], ref["se"]),
        "paired": False,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, nargs=2, required=True, metavar=("LO", "HI"))
    p.add_argument("--ref", default="", help="the arm the others are compared with")
    p.add_argument("--out", required=True)
    p.add_argument("arms", nargs="+", help="name=run_folder")
    a = p.parse_args(argv)
    arms = dict(x.split("=", 1) for x in a.arms)
    res = {name: pooled(path, *a.rounds) for name, path in arms.items()}
    if a.ref:
        ref = res[a.ref]
        for name, r in res.items():
            if name == a.ref:
                continue
            diff = {s: _difference(r[s], ref[s]) for s in r if not s.startswith("_") and s in ref}
            ood = [d for s, d in diff.items() if s.startswith("ood_")]
            if ood:  # the OOD average (mean of the held-out suites), suites independent
                delta = sum(d["delta"] for d in ood) / len(ood)
                se = math.sqrt(sum(d["se"] ** 2 for d in ood)) / len(ood)
                z = delta / se if se > 0 else math.nan
                p = math.erfc(abs(z) / math.sqrt(2)) if se > 0 else math.nan
                diff["ood_average"] = {"delta": delta, "se": se, "z": z, "p": p}
            r["_minus_" + a.ref] = diff
    out = {"command": "python benchmarks/loop_compare.py " + " ".join(argv or []),
           "rounds": a.rounds, "arms": arms, "results": res}  # fmt: skip
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for name, r in res.items():
        cells = ", ".join(
            f"{s} {100 * r[s]['rate']:.1f} ± {100 * r[s]['se']:.1f}"
            for s in r
            if not s.startswith("_")
        )
        print(f"{name}: {cells}")
        if "_minus_" + a.ref in r:
            d = r["_minus_" + a.ref]
            diffs = [f"{s} {100 * x['delta']:+.1f} ± {100 * x['se']:.1f}" for s, x in d.items()]
            print(f"   - {a.ref}: " + ", ".join(diffs))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
