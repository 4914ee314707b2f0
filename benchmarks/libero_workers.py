"""LIBERO evaluation on the Panda with its batches over worker processes (`panda.workers`):
wall time and per-episode equality against one process, side by side in one invocation.

Each side runs `coda.libero.evaluate_panda.evaluate` on the same config (one suite, its tasks,
`--init_states` each), one after the other in this process (the worker pool spawns its own);
reported: wall seconds per side, the speed-up, and whether every episode's outcome and step
count are the same as the one-process side's, and as `--compare`'s (a committed results file
of the same evaluation, e.g. the pinned planner run `libero_panda_planner_goal_r39.json`).

    .venv/bin/python benchmarks/libero_workers.py --suite=libero_goal --init_states=0 \
        --workers=1,2 --compare=benchmarks/results/libero_panda_planner_goal_r39.json \
        --out=benchmarks/results/libero_workers
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coda import blas  # noqa: E402

blas.pin()  # before numpy loads: the kernels `launch` runs on

from coda.libero import evaluate_panda as EP  # noqa: E402


def _config(args, workers: int):
    spec = importlib.util.spec_from_file_location("libero_config", ROOT / "configs" / "libero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    cfg.robot, cfg.policy, cfg.suite, cfg.tasks = "panda", args.policy, args.suite, args.tasks
    cfg.init_states, cfg.gifs, cfg.panda.workers = args.init_states, 0, workers
    return cfg


def _key(rows: list[dict]) -> dict:
    return {(e["task_id"], e["init"]): (e["success"], e["steps"]) for e in rows}


def _same(a: list[dict], b: list[dict]) -> dict:
    ka, kb = _key(a), _key(b)
    shared = sorted(set(ka) & set(kb))
    return {
        "episodes": len(shared),
        "same_outcome": sum(ka[k][0] == kb[k][0] for k in shared),
        "same_step": sum(ka[k] == kb[k] for k in shared),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="libero_goal")
    ap.add_argument("--tasks", default="", help="task ids, '' = all")
    ap.add_argument("--init_states", type=int, default=0, help="per task; 0 = all 50")
    ap.add_argument("--policy", default="planner", help="planner | random | hold")
    ap.add_argument("--workers", default="1,2", help="the sides: workers per side, first = base")
    ap.add_argument("--compare", default="", help="a results.json of the same evaluation")
    ap.add_argument("--out", required=True, help="results path stem (.json and .md)")
    args = ap.parse_args(argv)
    sides = []
    for n in [int(x) for x in args.workers.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            res = EP.evaluate(_config(args, n), tmp)
        sides.append({"workers": res["workers"], "wall_seconds": res["wall_seconds"],
                      "successes": res["successes"], "episodes": res["episodes"],
                      "per_episode": res["per_episode"]})  # fmt: skip
        print(f"workers {res['workers']}: {res['successes']} / {res['episodes']} in "
              f"{res['wall_seconds']} s", flush=True)  # fmt: skip
    base = sides[0]
    for s in sides:
        s["speedup"] = round(base["wall_seconds"] / s["wall_seconds"], 2)
        s["vs_first_side"] = _same(base["per_episode"], s["per_episode"])
    if args.compare:
        ref = json.loads(pathlib.Path(args.compare).read_text())["per_episode"]
        for s in sides:
            s["vs_compare"] = _same(ref, s["per_episode"])
    res = {
        "command": " ".join(["python benchmarks/libero_workers.py"] + (argv or sys.argv[1:])),
        "cores": len(os.sched_getaffinity(0)),
        "openblas": blas.core(),
        "sides": sides,
    }
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    lines = [
        "# LIBERO on the Panda: batches over worker processes vs one process",
        "",
        f"Command: `{res['command']}`  ",
        f"{res['cores']} cores, OpenBLAS kernels {res['openblas']}",
        "",
        "| workers | successes | wall (s) | speed-up | same step as the first side |"
        " same step as compare |",
        "|---|---|---|---|---|---|",
    ]
    for s in sides:
        v, c = s["vs_first_side"], s.get("vs_compare")
        cmp = f"{c['same_step']} / {c['episodes']}" if c else "-"
        lines.append(f"| {s['workers']} | {s['successes']} / {s['episodes']} | "
                     f"{s['wall_seconds']} | {s['speedup']}x | "
                     f"{v['same_step']} / {v['episodes']} | {cmp} |")  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
