"""LIBERO's Φ templates on the scripted planner's demos: does each goal's training program pass
the checks the loop applies before it trains with it (`coda.potentials.checks`)?

For every task of the chosen suites, the planner (`coda.libero.planner`) runs from
`--inits` of LIBERO's initial states on the native backend (LIBERO's step caps). The offline
compiler's program for the task (`coda.potentials.library.subgoal_program`, no diagnosis) is
compiled for the task's symbol table at each repair level (0 full stages, 1 coarse, 2 the
task-description potential) and checked on the chunk-endpoint states: runtime, range,
batch-independence, usefulness (Φ's Spearman ρ with time over successful demos ≥ 0.8) and
completion (every state where ν holds completes the last stage). The loop accepts the first
level that passes (`compile_with_repair`), so the table reports that level per task.

    .venv/bin/python benchmarks/libero_potentials.py --suites=libero_spatial,libero_object,\
libero_goal,libero_10 --inits=4 --out=benchmarks/results/libero_potentials
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import platform
import subprocess
import sys
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from coda.libero import evaluate as E  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero.planner import planner_for  # noqa: E402
from coda.potentials import ProgramError, compile_program, library  # noqa: E402
from coda.potentials.checks import Demos, check_program  # noqa: E402
from coda.sim.rollout import Bucket, NativeBackend  # noqa: E402

HORIZON = 10  # the loop's chunk length (config sim.chunk)


def check_task(suite: str, name: str, inits: int, backend, key) -> dict:
    """One task: planner demos, then every repair level's program checked on them."""
    task = S.load_task(suite, name)
    variants = [S.compile_task(suite, name, i) for i in range(min(inits, task.n_init))]
    bucket = Bucket(variants)
    row: dict = {"suite": suite, "task": name, "goal": [list(a) for a in task.problem.goal]}
    try:
        pol = planner_for(variants[0], HORIZON)
    except ValueError as e:
        return {**row, "planner": f"unsupported: {e}"}
    t = time.time()
    res = backend.rollout(bucket, pol, None, key, E.num_chunks(suite, HORIZON))
    demos = Demos.from_rollout(res, bucket, until_success=True)  # as the loop reads them
    row.update(planner_success=int(demos.success.sum()), demos=demos.num)
    row["rollout_s"] = round(time.time() - t, 1)
    levels = []
    for level in range(library.REPAIR_LEVELS):
        src = library.subgoal_program(variants[0].scene.task, level=level)
        try:
            pot = compile_program(src, bucket.sym)
        except ProgramError as e:
            levels.append({"level": level, "ok": False, "failed": [e.stage], "why": [str(e)]})
            continue
        mask = demos.success if demos.success.any() else None
        rep = check_program(pot, demos.states, mask, demos.nu, until_success=True)
        m = rep.metrics
        levels.append(
            {
                "level": level,
                "stages": [s.name for s in pot.subgoals],
                "ok": rep.ok,
                "failed": [f.stage for f in rep.failures],
                "why": [f.message for f in rep.failures][:1],
                "rank_corr": m.get("rank_corr_mean"),
                "completion": m.get("completion_rate"),
            }
        )
    row["levels"] = levels
    row["accepted_level"] = next((lv["level"] for lv in levels if lv["ok"]), None)
    return row


def summarise(rows: list[dict]) -> dict:
    by = collections.defaultdict(lambda: collections.Counter())
    for r in rows:
        c = by[r["suite"]]
        c["tasks"] += 1
        if "levels" not in r:
            c["planner_unsupported"] += 1
            continue
        if r["planner_success"] == 0:
            c["no_successful_demo"] += 1
        lv = r["accepted_level"]
        c["accepted" if lv is not None else "rejected"] += 1
        if lv is not None:
            c[f"level{lv}"] += 1
    return {s: dict(c) for s, c in by.items()}


def _commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_md(path: pathlib.Path, out: dict) -> None:
    lines = [
        "# LIBERO Φ templates on the planner's demos",
        "",
        f"Command: `{out['command']}`; code: {out['commit']}",
        "",
        "Accepted level = the first repair level whose program passes every check (0 full "
        "stages, 1 coarse, 2 task description); usefulness is checked on successful demos "
        "only (tasks with none are checked for runtime, range and completion).",
        "",
        "| suite | tasks | accepted | level 0 | level 1 | level 2 | rejected | no ok demo |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, c in out["summary"].items():
        lines.append(
            f"| {s} | {c.get('tasks', 0)} | {c.get('accepted', 0)} | {c.get('level0', 0)} | "
            f"{c.get('level1', 0)} | {c.get('level2', 0)} | {c.get('rejected', 0)} | "
            f"{c.get('no_successful_demo', 0)} |"
        )
    lines += ["", "| suite | task | demos ok | level 0: ρ / completion / failed | accepted |"]
    lines.append("|---|---|---|---|---|")
    for r in out["tasks"]:
        if "levels" not in r:
            lines.append(f"| {r['suite']} | {r['task']} | {r['planner']} | | |")
            continue
        lv0 = {"rank_corr": None, "completion": None, **r["levels"][0]}
        rho = "–" if lv0["rank_corr"] is None else f"{lv0['rank_corr']:.2f}"
        comp = "–" if lv0["completion"] is None else f"{lv0['completion']:.2f}"
        lines.append(
            f"| {r['suite']} | {r['task']} | {r['planner_success']}/{r['demos']} | "
            f"{rho} / {comp} / {','.join(lv0['failed']) or 'none'} | {r['accepted_level']} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--suites", default="libero_spatial,libero_object,libero_goal,libero_10")
    p.add_argument("--inits", type=int, default=4)
    p.add_argument("--tasks", type=int, default=0, help="first N tasks per suite (0: all)")
    p.add_argument("--out", default="benchmarks/results/libero_potentials")
    a = p.parse_args(argv)
    backend, key = NativeBackend(), jax.random.PRNGKey(0)
    rows = []
    for suite in a.suites.split(","):
        names = E.task_names(suite, None)
        for k, name in enumerate(names[: a.tasks or None]):
            rows.append(check_task(suite, name, a.inits, backend, jax.random.fold_in(key, k)))
            r = rows[-1]
            print(suite, name, r.get("planner_success"), r.get("accepted_level"), flush=True)
    args = sys.argv[1:] if argv is None else argv
    cmd = "python benchmarks/libero_potentials.py " + " ".join(args)
    out = {
        "command": cmd,
        "commit": _commit(),
        "machine": platform.processor() or platform.machine(),
        "inits": a.inits,
        "summary": summarise(rows),
        "tasks": rows,
    }
    base = pathlib.Path(a.out)
    base.with_suffix(".json").write_text(json.dumps(out, indent=1, default=float) + "\n")
    write_md(base.with_suffix(".md"), out)
    print(json.dumps(out["summary"], indent=1))


if __name__ == "__main__":
    main()
