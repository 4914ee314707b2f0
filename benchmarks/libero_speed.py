"""LIBERO evaluation speed with the Panda: ours (`PandaEnv`) against LIBERO itself, side by side.

One invocation runs, on the same episodes (smooth random OSC_POSE actions from
`benchmarks/libero_reference/make_episodes.py`, no images), alternately `--repeats` times:
  reference  LIBERO's own environment, in the reference venv (`replay.py`: one environment,
             robosuite's OSC_POSE at 20 Hz over 500 Hz physics; its per-`env.step` wall),
  ours       `coda.libero.panda_env.PandaEnv` one environment at a time (`n_envs=1`) and every
             episode of a task batched in one `PandaEnv` (host-side batched OSC),
  physics    the floor under any CPU implementation: 25 `mj_step`s per control step of our
             compiled Panda scene with the torques of a still arm held (no controller, no
             observations).
Both sides are single-threaded processes on the same machine, so ms per environment step is
per core. Reported: ms per environment step for each, and the ratios reference / ours and
reference / physics (the most any CPU implementation of the same physics could gain).

    .venv/bin/python benchmarks/libero_speed.py --suites=libero_spatial,libero_object \
        --tasks_per_suite=2 --inits_per_task=2 --steps=60 --repeats=2 \
        --out=benchmarks/results/libero_speed

Needs the reference venv (`make reference-venv`) for the reference side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from unittest import mock

import mujoco
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coda.libero import osc, suites  # noqa: E402
from coda.libero.panda_env import PandaEnv  # noqa: E402

REF_PYTHON = ROOT / ".venv-libero-ref" / "bin" / "python"
SUBSTEPS = 25  # physics steps per 20 Hz control step (500 Hz)
SIDES = ("reference", "ours_single", "ours_batched", "ours_batched_sensors", "physics_floor")


def make_episodes(args, path: pathlib.Path) -> list[dict]:
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks/libero_reference/make_episodes.py"),
        f"--out={path}",
        f"--suites={args.suites}",
        f"--tasks_per_suite={args.tasks_per_suite}",
        f"--inits_per_task={args.inits_per_task}",
        f"--steps={args.steps}",
        "--zero_prefix=10",
        f"--seed={args.seed}",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    data = json.loads(path.read_text())
    for ep in data["episodes"]:
        ep["record_frames_at"] = []  # no images on either side
    path.write_text(json.dumps(data))
    return data["episodes"]


def reference(episodes_path: pathlib.Path, out: pathlib.Path) -> float:
    """LIBERO's mean wall per env.step (ms) over every step of every episode."""
    subprocess.run(
        [str(REF_PYTHON), str(ROOT / "benchmarks/libero_reference/replay.py"),
         f"--episodes={episodes_path}", f"--out={out}"],
        check=True, capture_output=True,
    )  # fmt: skip
    index = json.loads((out / "index.json").read_text())
    walls = []
    for ep in index["episodes"]:
        with np.load(out / ep["npz"]) as z:
            walls.append(z["step_wall_s"][1:])  # the first step warms up (as ours)
    return 1e3 * float(np.concatenate(walls).mean())


def _by_task(episodes: list[dict]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for ep in episodes:
        out.setdefault((ep["suite"], ep["task_id"]), []).append(ep)
    return out


def ours(episodes: list[dict], batched: bool, sensors: bool = False) -> float:
    """Our mean wall per environment step (ms): every episode alone, or a task's batched.
    `sensors`: the substeps computing the scene's sensors as before `osc.sensors_off` (the
    same states; the side by side measure of what skipping them gains)."""
    if sensors:
        with mock.patch.object(osc, "sensors_off", contextlib.nullcontext):
            return ours(episodes, batched)
    total, n = 0.0, 0
    for (suite, task_id), eps in _by_task(episodes).items():
        name = suites.tasks(suite)[task_id]
        groups = [eps] if batched else [[e] for e in eps]
        for group in groups:
            env = PandaEnv(suite, name, n_envs=len(group))
            env.reset([e["init_index"] for e in group])
            actions = np.stack([np.asarray(e["actions"], np.float64) for e in group])
            env.step(actions[:, 0])  # warm-up: ν's first call compiles (not timed, as LIBERO's)
            t0 = time.perf_counter()
            for t in range(1, actions.shape[1]):
                env.step(actions[:, t])
            total += time.perf_counter() - t0
            n += (actions.shape[1] - 1) * len(group)
    return 1e3 * total / n


def physics(episodes: list[dict]) -> float:
    """Wall per control step (ms) of `SUBSTEPS` bare `mj_step`s of our Panda scenes (their ν
    sensors off: physics alone)."""
    total, n = 0.0, 0
    for (suite, task_id), eps in _by_task(episodes).items():
        env = PandaEnv(suite, suites.tasks(suite)[task_id], n_envs=1)
        env.reset([eps[0]["init_index"]])
        hold = np.zeros((1, 7))
        hold[0, 6] = -1.0
        for _ in range(10):  # the controller's torques once the arm holds still
            env.step(hold)
        m, d = env.model, env.datas[0]
        steps = len(eps[0]["actions"]) * len(eps)
        with osc.sensors_off(m):
            t0 = time.perf_counter()
            for _ in range(steps * SUBSTEPS):
                mujoco.mj_step(m, d)
            total += time.perf_counter() - t0
        n += steps
    return 1e3 * total / n


def markdown(res: dict) -> str:
    r = res["ms_per_env_step"]
    lines = [
        "# LIBERO evaluation speed with the Panda: ours vs LIBERO itself (side by side)",
        "",
        f"Command: `{res['command']}`; code: {res['commit'][:7]}",
        "",
        f"{res['episodes']} episodes x {res['steps']} steps (smooth random actions, no images), "
        f"{res['repeats']} alternating repeats in one run; single-threaded processes, so ms per "
        "environment step is per core. Mean over repeats (each repeat's value in the JSON).",
        "",
        "| side | ms per env step | reference / side |",
        "|---|---|---|",
    ]
    for k in SIDES:
        lines.append(f"| {k} | {r[k]:.2f} | {r['reference'] / r[k]:.2f}x |")
    lines += [
        "",
        "physics_floor: 25 bare `mj_step`s per control step of the same scenes (a still arm's "
        "torques held, no controller, no observations, no sensors), the most a CPU "
        "implementation of the same physics could gain over LIBERO per core. "
        "ours_batched_sensors: ours_batched with the scene's sensors computed at every substep "
        "(as before `osc.sensors_off`; the same states). Every side's first step is not timed.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suites", default="libero_spatial,libero_object")
    ap.add_argument("--tasks_per_suite", type=int, default=2)
    ap.add_argument("--inits_per_task", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="", help="path stem: <out>.json and <out>.md")
    args = ap.parse_args(argv)
    if not REF_PYTHON.exists():
        sys.exit(f"no reference venv at {REF_PYTHON}: run `make reference-venv` first")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    runs: dict[str, list[float]] = {k: [] for k in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        episodes = make_episodes(args, tmp / "episodes.json")
        for k in range(args.repeats):
            runs["reference"].append(reference(tmp / "episodes.json", tmp / f"ref{k}"))
            runs["ours_single"].append(ours(episodes, batched=False))
            runs["ours_batched"].append(ours(episodes, batched=True))
            runs["ours_batched_sensors"].append(ours(episodes, batched=True, sensors=True))
            runs["physics_floor"].append(physics(episodes))
            print({key: round(v[-1], 2) for key, v in runs.items()}, flush=True)
    res = {
        "command": "python benchmarks/libero_speed.py " + " ".join(sys.argv[1:]),
        "commit": commit,
        "episodes": len(episodes),
        "steps": args.steps,
        "repeats": args.repeats,
        "runs_ms_per_env_step": runs,
        "ms_per_env_step": {k: float(np.mean(v)) for k, v in runs.items()},
        "cpu": os.cpu_count(),
    }
    md = markdown(res)
    print(md)
    if args.out:
        pathlib.Path(args.out + ".json").write_text(json.dumps(res, indent=1))
        pathlib.Path(args.out + ".md").write_text(md)


if __name__ == "__main__":
    main()
