"""The policy's raw weights vs. their EMA on a finished run's fixed suites, paired by episode.

Issue 29: with `loop.policy_ema = 0.999` the EMA that acts and is evaluated carries only a part
of the rounds' fine-tuning updates (1 - 0.999^n of the last n). A checkpoint holds both the raw
weights and the EMA, so one finished run answers what acting with the raw weights would change:
the same suites, the same episodes and the same sampling keys, once with each. Nothing of the
run is modified: the checkpoint and the run's start files are copied to a scratch folder.

    PYTHONPATH=<worktree of the run's commit> python benchmarks/ema_eval.py \
        --run /tmp/i28/after_s0/run --round 8 --config <worktree>/configs/coda.py --seed 0 \
        --out benchmarks/results/ema_eval_after_s0.json

(the worktree: the checkpoint's pytree layout is its commit's). Output: per suite and for the
OOD average, success with the EMA and with the raw weights, the paired difference with its
s.e. (per-episode differences), the discordant counts, and every episode's two outcomes.

    python benchmarks/ema_eval.py summarize --out benchmarks/results/ema_eval a.json b.json ...

pools several runs' files into the registered primary metric (the OOD average's raw - EMA
difference averaged over the runs, z test) and writes <out>.json / <out>.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time

import jax
import numpy as np

from coda.loop import driver
from coda.loop.services import make_services
from coda.loop.steps.evaluate import evaluate
from coda.loop.strategies import get_strategy

START_FILES = ("pool.jsonl", "suites.json", "heldout_tasks.json", "scenes.jsonl")


def _config(path: str, seed: int):
    spec = importlib.util.spec_from_file_location("cfg_ema_eval", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    cfg.seed = seed
    return cfg


def _scratch(run: str, rnd: int) -> str:
    """A copy of the run's start files and one checkpoint (the run folder stays untouched)."""
    tmp = tempfile.mkdtemp(prefix="ema_eval_")
    for f in START_FILES:
        if os.path.exists(os.path.join(run, f)):
            shutil.copy(os.path.join(run, f), tmp)
    name = f"round_{rnd:04d}"
    shutil.copytree(os.path.join(run, "checkpoints", name), os.path.join(tmp, "checkpoints", name))
    return tmp


def paired(a: str, b: str) -> dict:
    """b - a over episodes (outcome strings of "0"/"1"): difference, s.e., discordant pairs."""
    x = np.array([c == "1" for c in a], float)
    y = np.array([c == "1" for c in b], float)
    d = y - x
    n = d.size
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return {
        "n": n,
        "a": float(x.mean()),
        "b": float(y.mean()),
        "diff": float(d.mean()),
        "se": se,
        "b_only": int(((y == 1) & (x == 0)).sum()),
        "a_only": int(((y == 0) & (x == 1)).sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", required=True, help="a finished run folder")
    ap.add_argument("--round", type=int, required=True, help="its checkpointed round to load")
    ap.add_argument("--config", required=True, help="the run's configs/coda.py (its commit's)")
    ap.add_argument("--seed", type=int, required=True, help="the run's config.seed")
    ap.add_argument("--key", type=int, default=12345, help="the evaluation's sampling key")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    cfg = _config(args.config, args.seed)
    tmp = _scratch(args.run, args.round)
    t0 = time.perf_counter()
    svc = make_services(cfg, tmp, get_strategy(cfg.strategy))
    svc, state = driver._restore(tmp, svc, args.round)
    key = jax.random.key(args.key)
    lrn = svc.learner
    if lrn.pstate.ema_params is None:
        raise SystemExit("the run's policy has no EMA (loop.policy_ema = 0): nothing to compare")
    ema = evaluate(svc, key).results
    lrn.pstate = lrn.pstate.replace(ema_params=lrn.pstate.params)  # act with the raw weights
    raw = evaluate(svc, key).results
    suites = {}
    for name in ema:
        a, b = ema[name].outcomes, raw[name].outcomes
        suites[name] = {**paired(a, b), "ema_outcomes": a, "raw_outcomes": b}
    ood = [n for n in suites if n.startswith("ood")]
    ood_avg = {
        "ema": float(np.mean([suites[n]["a"] for n in ood])),
        "raw": float(np.mean([suites[n]["b"] for n in ood])),
    }
    ood_avg["diff"] = ood_avg["raw"] - ood_avg["ema"]
    # the OOD average's s.e. from the suites' paired s.e. (independent suites, equal weights)
    ood_avg["se"] = float(math.sqrt(sum(suites[n]["se"] ** 2 for n in ood)) / len(ood))
    out = {
        "command": "python benchmarks/ema_eval.py "
        + " ".join(f"--{k}={v}" for k, v in vars(args).items()),
        "run": os.path.abspath(args.run),
        "round": args.round,
        "policy_updates": lrn.policy_updates,
        "policy_ema": float(cfg.loop.policy_ema),
        "rows": "a = EMA (what the run evaluates), b = raw weights; diff = b - a",
        "suites": suites,
        "ood_average": ood_avg,
        "seconds": time.perf_counter() - t0,
    }
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    for n, s in suites.items():
        print(f"{n}: EMA {s['a']:.3f} raw {s['b']:.3f} diff {s['diff']:+.3f} ± {s['se']:.3f}")
    print(
        f"OOD average: EMA {ood_avg['ema']:.3f} raw {ood_avg['raw']:.3f} "
        f"diff {ood_avg['diff']:+.3f} ± {ood_avg['se']:.3f}"
    )


def summarize(argv: list[str]) -> None:
    from scipy import stats

    ap = argparse.ArgumentParser(description="pool ema_eval.py files (the registered metric)")
    ap.add_argument("--out", required=True, help="path without extension")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    runs = []
    for path in args.files:
        with open(path) as f:
            d = json.load(f)
        runs.append({"file": path, "run": d["run"], **d["ood_average"], "id": d["suites"]["id"]})
    diff = float(np.mean([r["diff"] for r in runs]))
    se = float(math.sqrt(sum(r["se"] ** 2 for r in runs)) / len(runs))
    p = float(2 * stats.norm.sf(abs(diff / se))) if se > 0 else math.nan
    id_diff = float(np.mean([r["id"]["diff"] for r in runs]))
    id_se = float(math.sqrt(sum(r["id"]["se"] ** 2 for r in runs)) / len(runs))
    worse = diff < -0.01 and p < 0.05
    out = {
        "command": "python benchmarks/ema_eval.py summarize " + " ".join(argv),
        "registration": "benchmarks/registrations/issue29_ema.md",
        "runs": runs,
        "ood_average_raw_minus_ema": {"diff": diff, "se": se, "p": p},
        "id_raw_minus_ema": {"diff": id_diff, "se": id_se},
        "decision": "loop.finetune_ema = -1 (keep the EMA)" if worse else "loop.finetune_ema = 0",
    }
    with open(args.out + ".json", "w") as f:
        json.dump(out, f, indent=1)
    lines = [
        "# EMA vs raw weights after the rounds (registered: issue29_ema.md)",
        "",
        f"Command: `{out['command']}`",
        "",
        "| run | OOD avg EMA | OOD avg raw | raw - EMA (pts) | ID EMA | ID raw | ID raw - EMA |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['run']} | {100 * r['ema']:.1f} | {100 * r['raw']:.1f} "
            f"| {100 * r['diff']:+.1f} ± {100 * r['se']:.1f} | {100 * r['id']['a']:.1f} "
            f"| {100 * r['id']['b']:.1f} "
            f"| {100 * r['id']['diff']:+.1f} ± {100 * r['id']['se']:.1f} |"
        )
    lines += [
        "",
        f"Primary (OOD average, raw - EMA, mean of {len(runs)} runs): {100 * diff:+.2f} ± "
        f"{100 * se:.2f} points, z-test p = {p:.3g}. ID: {100 * id_diff:+.2f} ± {100 * id_se:.2f}.",
        "",
        f"Decision by the registered rule: {out['decision']}.",
        "",
    ]
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "summarize":
        summarize(sys.argv[2:])
    else:
        main()
