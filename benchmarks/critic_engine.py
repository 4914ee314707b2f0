"""Planted-flaw benchmark of the offline critic (issue 28 item 1).

Each flaw of `coda.sim.flaws.FLAWS` is the scripted planner departing in one task phase when a
condition on one scene factor holds; its ground truth is ψ* = (factor, phase). Per flaw:

1. validity: seeded, verified scenes of the flaw's family (the family's own proposals, split by
   the condition; `flaw_scenes`), the plain and the flawed planner rolled out on `--n_valid`
   condition-true and `--n_valid` condition-false scenes (`check_flaw`): valid when plain
   >= 90 %, flawed <= 20 % under the condition and >= 80 % outside it;
2. diagnosis: the flawed expert rolled out on `--n_diag` condition-true scenes, its failures
   (at most `--max_failures`) diagnosed in one `OfflineCritic.diagnose` call at the loop's own
   settings (configs/coda.py: sim.num_chunks, critic.n_probes, critic.n_repeats; the critic's
   default max_tries and pad_to, as the loop builds it); reported: failures diagnosed, factor
   right, phase right, both right, probe rollouts (verified probes + repeats) per diagnosis and
   seconds per diagnosis (the critic's wall clock over the failures, compiles included: each
   flaw's probes meet new bucket structures, as the loop's critic does);
3. recreation (`benchmarks/recreation.py`): the true mode and two wrong-factor modes written
   into programs from those failures, targeted vs control pairs (`pairing="recreate"`), the
   flawed expert's success on each and the validation decision (`--n_recreate` pairs, default
   the loop's validate_n; `--rest`; `--n_recreate -1` skips it).

Run:  python benchmarks/critic_engine.py --out benchmarks/results/critic_engine.json
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import recreation  # noqa: E402  (benchmarks/recreation.py, beside this script)


def loop_config():
    """configs/coda.py's default config (the loop's settings)."""
    spec = importlib.util.spec_from_file_location(
        "coda_config", os.path.join(ROOT, "configs/coda.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            [
                "git",
                "status",
                "--porcelain",
                "--",
                "coda",
                "benchmarks/critic_engine.py",
                "benchmarks/recreation.py",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        return out.stdout.strip() + (" (+ uncommitted changes under coda/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_flaw(flaw, backend, cfg, args, seed: int) -> dict:
    import jax
    import numpy as np

    from coda.critic import OfflineCritic, episodes_from_rollout
    from coda.sim.flaw_check import check_flaw, flaw_scenes
    from coda.sim.rollout import make_buckets

    num_chunks = int(cfg.sim.num_chunks)
    t0 = time.perf_counter()
    true, false = flaw_scenes(flaw, max(args.n_valid, args.n_diag), args.n_valid, seed=seed)
    validity = check_flaw(
        flaw,
        backend,
        seed=seed,
        num_chunks=num_chunks,
        scenes=(true[: args.n_valid], false[: args.n_valid]),
    )
    t_valid = time.perf_counter() - t0

    key = jax.random.PRNGKey(seed)
    failures, n_rolled = [], 0
    for i, bucket in enumerate(make_buckets(true[: args.n_diag], multiple_of=8)):
        r = backend.rollout(
            bucket, flaw.policy(bucket), None, jax.random.fold_in(key, i), num_chunks
        )
        failures += episodes_from_rollout(bucket, r)
        n_rolled += len(bucket.variants)
    failures = failures[: args.max_failures]
    critic = OfflineCritic(
        policy=flaw.policy,
        params=None,
        backend=backend,
        num_chunks=num_chunks,
        n_probes=int(cfg.critic.n_probes),
        n_repeats=int(cfg.critic.n_repeats),
    )
    t0 = time.perf_counter()
    out = critic.diagnose(failures, jax.random.fold_in(key, 10_000)) if failures else []
    t_diag = time.perf_counter() - t0
    factor, phase = flaw.ground_truth
    probes = [
        sum(
            c.diagnosis.evidence.numbers.get(f"n_probes_{f}", 0.0)
            for f in ("task", "layout", "attributes")
        )
        + c.diagnosis.evidence.numbers.get("n_repeats", 0.0)
        for c in out
    ]
    n = len(out)
    rec = {"modes": []}
    if args.n_recreate >= 0:
        rec = recreation.run_recreation(flaw, out, failures, backend, cfg, args, seed)
    return {
        "flaw": flaw.name,
        "family": flaw.family,
        "ground_truth": [factor, phase],
        "validity": validity.to_json(),
        "validity_seconds": round(t_valid, 1),
        "rolled_condition_true": n_rolled,
        "failures_diagnosed": n,
        "factor_right": sum(c.diagnosis.factor == factor for c in out),
        "phase_right": sum(c.diagnosis.phase == phase for c in out),
        "both_right": sum((c.diagnosis.factor, c.diagnosis.phase) == (factor, phase) for c in out),
        "probe_rollouts_per_diagnosis": round(float(np.mean(probes)), 2) if probes else None,
        "seconds_per_diagnosis": round(t_diag / n, 2) if n else None,
        "diagnoses": dict(
            collections.Counter(
                f"{c.diagnosis.factor}/{c.diagnosis.phase}/{c.diagnosis.cause}" for c in out
            )
        ),
        "recreation": rec,
    }


def markdown(result: dict) -> str:
    lines = [
        "# Offline critic on planted flaws (benchmarks/critic_engine.py)",
        "",
        f"- command: `{result['command']}`",
        f"- machine: {result['machine']}",
        f"- commit: {result['commit']}",
        f"- critic settings (configs/coda.py): {json.dumps(result['critic_settings'])}",
        f"- wall clock: {result['seconds']:.0f} s",
        "",
        "Validity: plain planner / flawed under the condition / flawed outside it (success rates; "
        "valid = plain >= 0.9, flawed <= 0.2 under, >= 0.8 outside).",
        "",
        "| flaw | family | ground truth | condition | n true / false | plain | flawed (cond) "
        "| flawed (not cond) | valid | diagnosed | factor right | phase right | both right "
        "| probe rollouts / diag | s / diag | diagnoses (factor/phase/cause: count) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, f in zip(result["rows"], result["flaws"], strict=True):
        v = r["validity"]
        lines.append(
            f"| {r['flaw']} | {r['family']} | {'/'.join(r['ground_truth'])} | {f['condition']} "
            f"| {v['n_true']} / {v['n_false']} | {v['plain']:.2f} | {v['flawed_true']:.2f} "
            f"| {v['flawed_false']:.2f} | {'yes' if v['valid'] else 'NO'} "
            f"| {r['failures_diagnosed']} | {r['factor_right']} | {r['phase_right']} "
            f"| {r['both_right']} | {r['probe_rollouts_per_diagnosis']} "
            f"| {r['seconds_per_diagnosis']} "
            f"| {'; '.join(f'{k}: {c}' for k, c in sorted(r['diagnoses'].items()))} |"
        )
    t = result["totals"]
    lines += [
        "",
        f"Totals: {t['diagnosed']} failures diagnosed; factor right {t['factor_right']}, phase "
        f"right {t['phase_right']}, both right {t['both_right']}; {t['valid_flaws']} of "
        f"{len(result['rows'])} flaws valid.",
        "",
        "Flaw mechanisms:",
        "",
    ]
    for f in result["flaws"]:
        lines.append(
            f"- `{f['name']}` ({f['family']}; planner phases {', '.join(f['planner_phases'])}): "
            f"{f['mechanism']} — {f['why']}"
        )
    lines += recreation.markdown(result)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--n_valid", type=int, default=16, help="scenes per side of the validity check")
    ap.add_argument("--n_diag", type=int, default=8, help="condition-true scenes rolled out")
    ap.add_argument("--max_failures", type=int, default=8, help="failures diagnosed per flaw")
    ap.add_argument("--flaws", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--n_recreate", type=int, default=0, help="pairs per mode (0: loop.validate_n; -1: skip)"
    )
    ap.add_argument("--rest", default="keep", help="recreate pairs' bases: keep | resample")
    ap.add_argument("--control", default="outside", help="recreate control: outside | resample")
    args = ap.parse_args()

    import jax

    cache = os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    jax.config.update("jax_compilation_cache_dir", cache)
    from coda.sim.flaws import FLAWS
    from coda.sim.rollout import make_backend

    cfg = loop_config()
    backend = make_backend("native")
    chosen = [f for f in FLAWS if not args.flaws or f.name in args.flaws.split(",")]
    t0 = time.perf_counter()
    rows = []
    for i, flaw in enumerate(chosen):
        rows.append(run_flaw(flaw, backend, cfg, args, args.seed + i))
        print(json.dumps(rows[-1]), flush=True)
    totals = {
        k: sum(r[k] for r in rows)
        for k in ("failures_diagnosed", "factor_right", "phase_right", "both_right")
    }
    totals["diagnosed"] = totals.pop("failures_diagnosed")
    totals["valid_flaws"] = sum(r["validity"]["valid"] for r in rows)
    rec_totals = recreation.summary(rows) if args.n_recreate >= 0 else {}
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()} "
        f"cpus={os.cpu_count()}",
        "load_average": os.getloadavg(),
        "commit": _commit(),
        "critic_settings": {
            "num_chunks": int(cfg.sim.num_chunks),
            "n_probes": int(cfg.critic.n_probes),
            "n_repeats": int(cfg.critic.n_repeats),
        },
        "args": vars(args),
        "seconds": time.perf_counter() - t0,
        "flaws": [f.describe() for f in chosen],
        "rows": rows,
        "totals": totals,
        "recreation_totals": rec_totals,
        "recreation_n": int(args.n_recreate or cfg.loop.validate_n),
        "recreation_correction": str(cfg.loop.get("validation_correction", "holm")),
    }
    print(json.dumps(totals), json.dumps(rec_totals))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
            f.write(markdown(result))


if __name__ == "__main__":
    main()
