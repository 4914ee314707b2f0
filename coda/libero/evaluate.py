"""Evaluate a policy on a LIBERO suite: per-task and per-suite success over the fixed initial
states, with everything that makes the number reproducible written to the run folder.

One bucket per task (its initial states are the batch), rolled out on the native backend
(LIBERO scenes use body-matched contact sensors, which MJX does not support yet). Success is
LIBERO's: ν holds at some chunk endpoint within the suite's step cap (LIBERO stops an episode at
its first success). LIBERO's step caps are 20 Hz control steps; we run the same simulated time
at our control rate.

GIFs: the first `config.gifs` episodes of each task are replayed from their chunk-endpoint qpos
through the agent view (`coda.libero.render`, under the run's observation perturbation if any)
into gifs/ of the run folder; without a GL backend the run goes on and says why none were made.
Observation perturbations (camera / light / noise levels) change rendered frames only: the
states, so a state-based policy's success, are the unperturbed suite's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda.libero import data, openpi_policy, perturb, suites
from coda.libero import render as LR
from coda.libero import scene as S
from coda.libero.planner import planner_for
from coda.sim import robot
from coda.sim.planner import RandomPolicy
from coda.sim.render import gl_available
from coda.sim.rollout import Bucket, NativeBackend

LIBERO_CONTROL_DT = 0.05  # s: LIBERO's 20 Hz control
LIBERO_STATES = 50  # fixed initial states per LIBERO task
POLICIES = ("planner", "random", "hold")
ROBOTS = ("floating", "panda")  # our floating gripper | LIBERO's Panda (coda.libero.evaluate_panda)
PANDA_POLICIES = ("planner", "random", "hold")  # and openpi:<dir>; planner: panda_chain
PERTURBATIONS = (  # every one on both robots
    ("none",)
    + suites.PERTURBATIONS
    + tuple(f"layout{k}" for k in perturb.LEVELS)
    + perturb.obs_perturbation_names()
)


class HoldPolicy:
    """Zero actions: the gripper holds its home pose (the passive baseline)."""

    def __init__(self, horizon: int):
        self.horizon = horizon

    def init(self, batch: int, rng: jax.Array):
        return jnp.zeros(batch, jnp.int32)

    def act(self, params, state, carry, rng):
        b = state.ee_pos.shape[0]
        a = jnp.zeros((b, self.horizon, robot.ACTION_DIM))
        return a, carry, {"phase": jnp.zeros((b, self.horizon), jnp.int32)}


class IncompatibleRun(ValueError):
    """A trained run's policy cannot read this suite's observations (one line, says why)."""


def is_run_path(value: Any) -> bool:
    """Whether `config.policy` names a trained run (a path: it has a separator or is a folder;
    the caller loads it, `coda.loop.acting`) rather than a built-in policy or `openpi:<dir>`."""
    if not isinstance(value, str) or openpi_policy.checkpoint_dir(value) is not None:
        return False
    return os.sep in value or os.path.isdir(value)


def make_policy(name: str, horizon: int) -> Any:
    """`agent_for(bucket) -> (agent, params)` of a built-in policy; None for "planner" (built
    per task from its goal)."""
    if name == "random":
        pol = RandomPolicy(horizon=horizon)
        return lambda bucket: (pol, None)
    if name == "hold":
        pol = HoldPolicy(horizon)
        return lambda bucket: (pol, None)
    if name == "planner":
        return None  # per task: `planner.planner_for(compiled)`
    raise ValueError(f"unknown policy {name!r}; policies: {POLICIES} or a run folder")


def config_problems(config: Any) -> list[str]:
    """Every user-fixable problem of an evaluation config, one line each (launch.libero
    answers with them before any episode runs)."""
    out = []
    names = suites.all_suites()
    if config.suite not in names:
        return [f"suite={config.suite!r} is unknown (valid: {', '.join(names)})"]
    if config.perturbation not in PERTURBATIONS:
        out.append(
            f"perturbation={config.perturbation!r} is unknown (valid: {', '.join(PERTURBATIONS)})"
        )
    elif config.perturbation in suites.PERTURBATIONS and config.suite not in suites.PERTURBABLE:
        out.append(
            f"perturbation={config.perturbation!r}: LIBERO-PRO perturbs "
            f"{', '.join(suites.PERTURBABLE)}, not {config.suite}"
        )
    robot = config.get("robot", "floating")
    if robot not in ROBOTS:
        out.append(f"robot={robot!r} is unknown (valid: {', '.join(ROBOTS)})")
    elif robot == "panda":
        out += panda_problems(config)
    elif openpi_policy.checkpoint_dir(config.policy) is not None:
        out.append(
            f"policy={config.policy!r} acts on LIBERO's Panda: add --config.robot=panda "
            f"(robot={robot!r} is our floating gripper)"
        )
    elif not is_run_path(config.policy) and config.policy not in POLICIES:
        out.append(
            f"policy={config.policy!r} is unknown (valid: {', '.join(POLICIES)}, a run folder, "
            "or openpi:<dir> with robot=panda)"
        )
    n_tasks = len(suites.tasks(config.suite))
    try:
        task_names(config.suite, config.tasks)
    except ValueError:
        out.append(
            f"tasks={config.tasks!r} must be comma-separated task ids in [0, {n_tasks}) of "
            f"{config.suite} ('' = all)"
        )
    ints = (("init_states", 0), ("init_offset", 0), ("horizon", 1), ("num_chunks", 0))
    for field, lo in ints + (("gifs", 0), ("seed", 0)):  # seed: numpy's generators take >= 0
        v = config.get(field, lo)
        if not isinstance(v, int) or v < lo:
            out.append(f"{field}={v!r} must be an integer >= {lo}")
    size = config.get("gif_size", LR.GIF_SIZE)
    if not isinstance(size, int) or size < 1 or LR.IMAGE_SIZE % size:
        divisors = [k for k in range(16, LR.IMAGE_SIZE + 1) if LR.IMAGE_SIZE % k == 0]
        out.append(
            f"gif_size={size!r} must divide the {LR.IMAGE_SIZE} px render (valid: {divisors})"
        )
    off = config.get("init_offset", 0)
    if isinstance(off, int) and off >= LIBERO_STATES:
        out.append(f"init_offset={off} outside [0, {LIBERO_STATES}) initial states")
    return out


def panda_problems(config: Any) -> list[str]:
    """robot=panda's problems: its policies (planner, hold, random, openpi:<dir> with a
    complete checkpoint) and its section's fields."""
    out, policy = [], config.policy
    if openpi_policy.checkpoint_dir(policy) is not None:
        out += openpi_policy.checkpoint_problems(policy, config.get("tokenizer", ""))
        op = config.openpi
        for field, lo in (("action_horizon", 1), ("max_token_len", 1), ("sample_steps", 1)):
            if not isinstance(op.get(field), int) or op.get(field) < lo:
                out.append(f"openpi.{field}={op.get(field)!r} must be an integer >= {lo}")
        h = op.get("action_horizon")
        r = op.get("replan_steps")
        if isinstance(h, int) and not (isinstance(r, int) and 1 <= r <= h):
            out.append(f"openpi.replan_steps={r!r} must be in [1, openpi.action_horizon={h}]")
        if op.get("dtype") not in ("bfloat16", "float32"):
            out.append(f"openpi.dtype={op.get('dtype')!r} is unknown (valid: bfloat16, float32)")
    elif is_run_path(policy):
        out.append(
            f"policy={policy!r} is a CoDA run, trained on our floating gripper: add "
            "--config.robot=floating (robot=panda acts with planner, random, hold, openpi:<dir>)"
        )
    elif policy not in PANDA_POLICIES:
        out.append(
            f"policy={policy!r} cannot act on robot=panda (valid: "
            f"{', '.join(PANDA_POLICIES)}, openpi:<dir>); trained runs drive robot=floating"
        )
    workers = config.panda.get("workers", 1)
    if openpi_policy.checkpoint_dir(policy) is not None and workers != 1:
        out.append(
            f"panda.workers={workers!r}: an openpi checkpoint evaluates in one process (its "
            "model takes the batch); workers run planner, random, hold"
        )
    fields = (
        ("batch", 1),
        ("workers", 0),
        ("image_size", 1),
        ("wait_steps", 0),
        ("max_steps", 0),
        ("fixture_seed", -1),
    )
    for field, lo in fields:
        v = config.panda.get(field)
        if not isinstance(v, int) or v < lo:
            out.append(f"panda.{field}={v!r} must be an integer >= {lo}")
    chain = config.panda.get("fixture_chain", False)
    if not isinstance(chain, bool):
        out.append(f"panda.fixture_chain={chain!r} must be True or False")
    elif chain and config.panda.get("fixture_seed") == -1:
        out.append("panda.fixture_chain=True needs panda.fixture_seed >= 0 (the env's seed)")
    return out


def init_indices(n_init: int, count: int, offset: int = 0) -> list[int]:
    """The fixed initial states a task is evaluated on: `count` of them (0 = all that remain)
    from index `offset`, so a long evaluation can be split over processes or resumed by state
    range (e.g. libero_90 states 0-9, then 10-49)."""
    if not 0 <= offset < n_init:
        raise ValueError(f"init_offset={offset} outside [0, {n_init}) initial states")
    if count < 0:
        raise ValueError(f"init_states={count} must be >= 0 (0 = all)")
    left = n_init - offset
    return list(range(offset, offset + (left if count == 0 else min(count, left))))


def num_chunks(suite: str, horizon: int) -> int:
    """Chunks covering LIBERO's step cap of the suite in simulated time."""
    seconds = suites.step_cap(suite) * LIBERO_CONTROL_DT
    return math.ceil(seconds / robot.CONTROL_DT / horizon)


def compile_variants(suite: str, task: str, indices: list[int], perturbation: str, seed: int):
    """(suite the data came from, compiled variants) for one task under a perturbation."""
    if perturbation not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {perturbation!r}; known: {PERTURBATIONS}")
    level = perturb.parse_layout(perturbation)
    if level is not None:
        return suite, [perturb.layout_shift(suite, task, i, level, seed) for i in indices]
    if perturbation == "none" or perturb.parse_obs(perturbation) is not None:
        src = suite  # observation perturbations leave the states alone
    else:
        src = suites.perturbed(suite, perturbation)
    return src, [S.compile_task(src, task, i) for i in indices]


def write_gifs(
    out: pathlib.Path,
    suite: str,
    task: str,
    task_id: int,
    qpos: np.ndarray,  # [n, C+1, nq] chunk endpoints of the first n episodes
    success: np.ndarray,  # [n] bool
    obs_perturbation: perturb.ObsPerturbation | None,
    size: int,
) -> list[str]:
    """Agent-view GIFs of episodes (frames at chunk endpoints); paths relative to `out`."""
    model = LR.render_model(suite, task)
    (out / "gifs").mkdir(exist_ok=True)
    paths = []
    for i, (q, ok) in enumerate(zip(qpos, success, strict=True)):
        frames = LR.render_episode(  # [C+1, 256, 256, 3]; fresh noise per episode and frame
            model, q, perturbation=obs_perturbation, first_index=i * len(q)
        )
        rel = f"gifs/task{task_id:02d}_ep{i:02d}_{'success' if ok else 'failure'}.gif"
        LR.write_gif(out / rel, frames, size=size)
        paths.append(rel)
    return paths


def task_ids(suite: str, tasks) -> list[int]:
    """The suite's task ids, or the comma-separated ids `tasks` ("" = all)."""
    n = len(suites.tasks(suite))
    if tasks == "" or tasks is None:
        return list(range(n))
    try:
        idx = [int(x) for x in str(tasks).split(",")]
    except ValueError:
        raise ValueError(f"tasks={tasks!r} must be comma-separated task ids") from None
    bad = [i for i in idx if not 0 <= i < n]
    if bad:
        raise ValueError(f"task ids {bad} outside [0, {n}) of {suite}")
    return idx


def task_names(suite: str, tasks) -> list[str]:
    """The suite's tasks, or those of the comma-separated ids `tasks` ("" = all)."""
    names = suites.tasks(suite)
    return [names[i] for i in task_ids(suite, tasks)]


def gif_count(config: Any) -> tuple[int, str | None]:
    """(GIFs per task, why none are made or None): none without a GL backend."""
    n_gifs, gif_note = int(config.get("gifs", 0)), None
    if n_gifs > 0:
        gl_ok, why = gl_available()
        if not gl_ok:
            n_gifs, gif_note = 0, f"no GIFs: {why}"
    return n_gifs, gif_note


def _evaluate_task(config, out, k, name, policy, info, backend, rng, chunks, n_gifs, obs_pert):
    """(row of results.json's per_task, control steps run) for task `k` of the suite: its
    initial states rolled out as one bucket, its first episodes' GIFs written."""
    suite = config.suite
    task = S.load_task(suite, name)
    indices = init_indices(task.n_init, int(config.init_states), int(config.get("init_offset", 0)))
    n = len(indices)
    src, variants = compile_variants(suite, name, indices, config.perturbation, config.seed)
    bucket = Bucket(variants)
    unsupported, steps, params = None, 0, None
    horizon = info["horizon"] if info else int(config.horizon)
    if policy is None:
        try:
            pol = planner_for(variants[0], horizon)
        except ValueError as e:  # counted as failed episodes, with the reason
            unsupported = str(e)
    else:
        pol, params = policy(bucket)
    t = time.time()
    if unsupported is None:
        try:
            res = backend.rollout(bucket, pol, params, jax.random.fold_in(rng, k), chunks)
        except (ValueError, TypeError) as e:  # a trained run's observation does not fit
            if info is None:
                raise
            why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise IncompatibleRun(
                f"policy={info['run']!r} (trained on {info['trained_on']}) cannot act on "
                f"{suite} task {name!r}: {why}; evaluate a run trained with "
                "sim.source=libero:<suite>"
            ) from None
        ok = np.asarray(res.success_any) & np.asarray(res.valid)
        failed = int(np.asarray(res.failed).sum())
        steps = n * chunks * horizon
    else:
        ok, failed = np.zeros(n, bool), 0
    wall = time.time() - t
    gifs: list[str] = []
    if unsupported is None and n_gifs > 0:
        g = min(n_gifs, n)
        gifs = write_gifs(
            out, src, name, k, np.asarray(res.qpos)[:g], ok[:g], obs_pert, config.gif_size
        )
    row = {
        "unsupported": unsupported,
        "task": name,
        "data_suite": src,
        "instruction": variants[0].scene.task["instruction"],
        "episodes": n,
        "successes": int(ok.sum()),
        "success_rate": float(ok.mean()) if n else 0.0,
        "failed": failed,
        "init_indices": indices,
        "rollout_seconds": round(wall, 2),
        "gifs": gifs,
    }
    return row, steps


def write_results(out: pathlib.Path, config: Any, result: dict) -> None:
    """results.json and results.md (a per-task table) into the run folder."""
    rows = result["per_task"]
    (out / "results.json").write_text(json.dumps(result, indent=1))
    lines = [
        f"# {config.suite} / perturbation {config.perturbation} / policy {config.policy}"
        + (f" / robot {result['robot']}" if result.get("robot") else ""),
        "",
        "| task | episodes | success |",
        "|---|---|---|",
    ]
    lines += [f"| {r['task']} | {r['episodes']} | {r['success_rate']:.2f} |" for r in rows]
    lines += ["", f"suite success {result['suite_success']:.3f} over {result['episodes']} episodes"]
    (out / "results.md").write_text("\n".join(lines) + "\n")


def evaluate(
    config: Any, workdir: str | pathlib.Path, trained: tuple[Any, dict] | None = None
) -> dict:
    """Runs config.suite under config.perturbation with config.policy; writes results.json and
    results.md into workdir and returns the results dict. `trained`: (agent_for, info) of a
    trained run's policy when config.policy names one (`coda.loop.acting.load`)."""
    out = pathlib.Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    suite = config.suite
    names = task_names(suite, config.tasks)
    bad = config_problems(config)
    if bad:
        raise ValueError("; ".join(bad))
    if config.get("robot", "floating") != "floating":
        raise ValueError("robot=panda is evaluated by coda.libero.evaluate_panda.evaluate")
    if is_run_path(config.policy) and trained is None:
        raise ValueError(f"policy={config.policy!r} is a run folder: load it (coda.loop.acting)")
    policy, trained_info = trained or (make_policy(config.policy, config.horizon), None)
    # a trained policy acts in chunks of its run's horizon
    horizon = trained_info["horizon"] if trained_info else int(config.horizon)
    obs_pert = perturb.parse_obs(config.perturbation, config.seed)
    n_gifs, gif_note = gif_count(config)
    chunks = config.num_chunks or num_chunks(suite, horizon)
    backend = NativeBackend(nthread=config.nthread or None)
    rng = jax.random.PRNGKey(config.seed)
    rows, t0, steps = [], time.time(), 0
    for k, name in enumerate(names):
        row, n_steps = _evaluate_task(
            config, out, k, name, policy, trained_info, backend, rng, chunks, n_gifs, obs_pert
        )
        rows.append(row)
        steps += n_steps
    episodes = sum(r["episodes"] for r in rows)
    result = {
        "suite": suite,
        "perturbation": config.perturbation,
        "observation_perturbation": dataclasses.asdict(obs_pert) if obs_pert else None,
        "gif_note": gif_note,
        "policy": config.policy,
        "trained": trained_info,  # the run, round and strategy of a trained policy
        "seed": config.seed,
        "horizon": horizon,
        "num_chunks": chunks,
        "control_dt": robot.CONTROL_DT,
        "episodes": episodes,
        "successes": sum(r["successes"] for r in rows),
        "suite_success": sum(r["successes"] for r in rows) / max(episodes, 1),
        "control_steps": steps,
        "wall_seconds": round(time.time() - t0, 1),
        "versions": data.versions(),
        "per_task": rows,
    }
    write_results(out, config, result)
    return result
