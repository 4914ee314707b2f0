"""What a loop run's critic concluded and what it cost, arms side by side: diagnoses by factor
(the share blamed on "execution" and what the rest were), modes validated / refuted, probe and
validation rollouts, critic and round seconds, and the cost per accepted (validated) mode; with
the execution shares compared by Fisher's exact test and the arms' round seconds as a ratio.

Reads each finished run folder's memory.sqlite (diagnoses, modes, status events) and
summary.json (per-round critique, seconds). The registration this answers:
benchmarks/registrations/issue28_loop_before_after.md.

    python benchmarks/loop_diagnoses.py --ref before before=/tmp/i28_before/run \
        after=/tmp/i28_after/run --out benchmarks/results/loop_diagnoses_issue28

Several seeds per arm: `name=run_seed0,run_seed1` (the same seeds, in the same order, for every
arm): counts are pooled over the seeds, each seed's numbers are kept under "per_seed", and the
round-time ratio is taken per seed (the arms of one seed ran side by side) and averaged.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sqlite3
import statistics
import sys

from scipy import stats

PROBE_KEYS = ("n_probes_layout", "n_probes_attributes", "n_probes_task", "n_repeats")


def _diagnoses(path: str) -> list[dict]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("select round, factor, phase, cause, evidence from diagnoses").fetchall()
    statuses = con.execute("select status, count(*) from modes group by status").fetchall()
    con.close()
    out = []
    for rnd, factor, phase, cause, ev in rows:
        nums = json.loads(ev).get("numbers", {})
        out.append(
            {
                "round": rnd,
                "factor": factor,
                "phase": phase,
                "cause": cause.split(":", 1)[0],
                "probe_rollouts": int(sum(nums.get(k, 0.0) for k in PROBE_KEYS)),
            }
        )
    return out, dict(statuses)


def arm(workdir: str) -> dict:
    """One run's critic outcome and cost."""
    diags, statuses = _diagnoses(os.path.join(workdir, "memory.sqlite"))
    with open(os.path.join(workdir, "summary.json")) as f:
        hist = json.load(f)["history"]
    rounds = [h for h in hist if h["round"] >= 1]
    validated = sum(len(h.get("critique", {}).get("validated", [])) for h in rounds)
    refuted = sum(len(h.get("critique", {}).get("refuted", [])) for h in rounds)
    tests = [
        t
        for h in rounds
        for k in ("validated", "refuted")
        for t in h.get("critique", {}).get(k, [])
    ]
    validation_rollouts = sum(2 * int(t["n"]) for t in tests)
    probe_rollouts = sum(d["probe_rollouts"] for d in diags)
    critic_s = sum(h.get("critique", {}).get("critic_seconds", 0.0) for h in rounds)
    round_s = [h["seconds"] for h in rounds if h.get("seconds") is not None]
    factors = collections.Counter(d["factor"] for d in diags)
    n = len(diags)
    return {
        "workdir": workdir,
        "diagnoses": n,
        "critiqued": sum(h.get("critique", {}).get("critiqued", 0) for h in rounds),
        "by_factor": dict(factors.most_common()),
        "execution_share": factors.get("execution", 0) / n if n else float("nan"),
        "by_phase": dict(collections.Counter(d["phase"] for d in diags).most_common()),
        "by_cause": dict(collections.Counter(d["cause"] for d in diags).most_common()),
        "per_round_factors": {
            r: dict(collections.Counter(d["factor"] for d in diags if d["round"] == r))
            for r in sorted({d["round"] for d in diags})
        },
        "tests": len(tests),
        "validated": validated,
        "refuted": refuted,
        "modes_by_status": statuses,
        "probe_rollouts": probe_rollouts,
        "probe_rollouts_per_diagnosis": probe_rollouts / n if n else float("nan"),
        "validation_rollouts": validation_rollouts,
        "critic_seconds": critic_s,
        "critic_seconds_per_diagnosis": critic_s / n if n else float("nan"),
        "per_accepted": {  # cost of each validated mode: every probe and validation rollout
            "rollouts": (probe_rollouts + validation_rollouts) / validated if validated else None,
            "critic_seconds": critic_s / validated if validated else None,
        },
        "round_seconds": round_s,
        "round_seconds_mean": statistics.fmean(round_s) if round_s else float("nan"),
    }


_SUMS = ("diagnoses", "critiqued", "tests", "validated", "refuted", "probe_rollouts")
_SUMS += ("validation_rollouts", "critic_seconds")


def pooled(runs: list[dict]) -> dict:
    """Several seeds' `arm` records as one: counts summed, rates from the sums, per seed kept."""
    if len(runs) == 1:
        return runs[0]
    out: dict = {k: sum(r[k] for r in runs) for k in _SUMS}
    for k in ("by_factor", "by_phase", "by_cause"):
        c = collections.Counter()
        for r in runs:
            c.update(r[k])
        out[k] = dict(c.most_common())
    n, v = out["diagnoses"], out["validated"]
    out["execution_share"] = out["by_factor"].get("execution", 0) / n if n else float("nan")
    out["probe_rollouts_per_diagnosis"] = out["probe_rollouts"] / n if n else float("nan")
    out["critic_seconds_per_diagnosis"] = out["critic_seconds"] / n if n else float("nan")
    out["per_accepted"] = {
        "rollouts": (out["probe_rollouts"] + out["validation_rollouts"]) / v if v else None,
        "critic_seconds": out["critic_seconds"] / v if v else None,
    }
    out["round_seconds"] = [s for r in runs for s in r["round_seconds"]]
    out["round_seconds_mean"] = statistics.fmean(out["round_seconds"])
    out["per_seed"] = runs
    return out


def compare(a: dict, ref: dict) -> dict:
    """a against the reference arm: execution share (Fisher, two-sided; pooled over seeds, with
    each seed's shares beside it) and round-time ratio (per seed, then averaged)."""
    seeds_a, seeds_r = a.get("per_seed", [a]), ref.get("per_seed", [ref])
    out = _compare_one(a, ref)
    if len(seeds_a) > 1:
        per = [_compare_one(x, y) for x, y in zip(seeds_a, seeds_r, strict=True)]
        out["per_seed"] = per
        out["round_seconds_ratio"] = statistics.fmean(c["round_seconds_ratio"] for c in per)
        out["execution_share_per_seed"] = [
            [y["execution_share"], x["execution_share"]]
            for x, y in zip(seeds_a, seeds_r, strict=True)
        ]
    return out


def _compare_one(a: dict, ref: dict) -> dict:

    def row(r):
        k = r["by_factor"].get("execution", 0)
        return [k, r["diagnoses"] - k]

    table = [row(a), row(ref)]
    p = float(stats.fisher_exact(table)[1]) if a["diagnoses"] and ref["diagnoses"] else None
    return {
        "execution_share_diff": a["execution_share"] - ref["execution_share"],
        "execution_fisher_p": p,
        "round_seconds_ratio": a["round_seconds_mean"] / ref["round_seconds_mean"],
        "critic_seconds_ratio": a["critic_seconds"] / ref["critic_seconds"]
        if ref["critic_seconds"]
        else None,
    }


def markdown(res: dict, ref: str) -> str:
    names = [n for n in res if not n.startswith("_")]
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label, f):  # noqa: E306
        lines.append(f"| {label} | " + " | ".join(f(res[n]) for n in names) + " |")

    row("diagnoses (critiqued failures)", lambda r: f"{r['diagnoses']} ({r['critiqued']})")
    row(
        "execution",
        lambda r: f"{r['by_factor'].get('execution', 0)} ({100 * r['execution_share']:.0f} %)",
    )
    row("by factor", lambda r: ", ".join(f"{k} {v}" for k, v in r["by_factor"].items()))
    row("by phase", lambda r: ", ".join(f"{k} {v}" for k, v in r["by_phase"].items()))
    row(
        "validation tests: validated / refuted",
        lambda r: f"{r['tests']}: {r['validated']} / {r['refuted']}",
    )
    row(
        "probe rollouts (per diagnosis)",
        lambda r: f"{r['probe_rollouts']} ({r['probe_rollouts_per_diagnosis']:.1f})",
    )
    row("validation rollouts", lambda r: str(r["validation_rollouts"]))
    row(
        "critic s (per diagnosis)",
        lambda r: f"{r['critic_seconds']:.0f} ({r['critic_seconds_per_diagnosis']:.2f})",
    )
    row(
        "per validated mode: rollouts, critic s",
        lambda r: (
            "none validated"
            if r["per_accepted"]["rollouts"] is None
            else f"{r['per_accepted']['rollouts']:.0f}, {r['per_accepted']['critic_seconds']:.1f}"
        ),
    )
    row("round s (mean of rounds 1-8)", lambda r: f"{r['round_seconds_mean']:.1f}")
    if "per_seed" in res[names[0]]:
        row(
            "execution per seed",
            lambda r: ", ".join(
                f"{s['by_factor'].get('execution', 0)}/{s['diagnoses']}" for s in r["per_seed"]
            ),
        )
    for n in names:
        if n != ref and f"_{n}_vs_{ref}" in res:
            c = res[f"_{n}_vs_{ref}"]
            lines.append(
                f"\n{n} vs {ref}: execution share {100 * c['execution_share_diff']:+.0f} "
                f"points (Fisher p = {c['execution_fisher_p']:.3g}); round seconds "
                f"x{c['round_seconds_ratio']:.3f}; critic seconds "
                f"x{c['critic_seconds_ratio']:.2f}"
            )
            for i, s in enumerate(c.get("per_seed", [])):
                lines.append(
                    f"- seed {i}: execution {100 * s['execution_share_diff']:+.0f} points "
                    f"(Fisher p = {s['execution_fisher_p']:.3g}), round seconds "
                    f"x{s['round_seconds_ratio']:.3f}"
                )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", required=True, help="the arm the others are compared with")
    p.add_argument("--out", required=True, help="path without extension: writes .json and .md")
    p.add_argument("arms", nargs="+", help="name=run_folder")
    a = p.parse_args(argv)
    try:
        arms = dict(x.split("=", 1) for x in a.arms)
    except ValueError:
        sys.exit(f"arms must be name=run_folder[,run_folder...], got {a.arms}")
    if a.ref not in arms:
        sys.exit(f"--ref {a.ref!r} is not one of the arms {sorted(arms)}")
    if len({len(p.split(",")) for p in arms.values()}) != 1:
        sys.exit(f"every arm needs the same number of seeds' run folders, got {arms}")
    res = {name: pooled([arm(p) for p in path.split(",")]) for name, path in arms.items()}
    for name in arms:
        if name != a.ref:
            res[f"_{name}_vs_{a.ref}"] = compare(res[name], res[a.ref])
    with open(a.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(markdown(res, a.ref))
    print(markdown(res, a.ref))


if __name__ == "__main__":
    main()
