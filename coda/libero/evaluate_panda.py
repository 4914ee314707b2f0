"""LIBERO's evaluation protocol on LIBERO's own robot (`--config.robot=panda`): the Franka Panda
under OSC_POSE at 20 Hz (`coda.libero.panda_env.PandaEnv`), as openpi's and OpenVLA-OFT's
LIBERO clients run it:

  for each task of the suite (or `config.tasks`) and each of its fixed initial states
  (`init_offset` / `init_states`; LIBERO: 50):
    reset to the stored state (fixtures at the centres of their regions, or with `fixture_seed`
    where LIBERO's `env.seed(fixture_seed); env.reset()` puts them: the same placement for
    every episode; with `fixture_chain` as well, where openpi's and OpenVLA-OFT's clients get
    them: the env seeded once per task and reset once per episode, so initial state s is run
    with the (s + 1)-th reset's placement, in a PandaEnv of its own);
    `wait_steps` (10) no-op steps [0]*6 + [-1] so the objects settle (not counted, success
    not read); then up to the suite's step cap (220 / 280 / 300 / 520 / 400 for spatial /
    object / goal / 10 / 90, `suites.step_cap`; `max_steps` overrides) policy steps; the
    episode succeeds at the first step after which ν holds (LIBERO's `done`).

Initial states run `batch` at a time as PandaEnv's environments (a short last batch is padded
with copies whose outcomes are dropped); an environment that has succeeded keeps stepping with
the batch but its outcome and step count are fixed at its first success; a batch stops when all
its environments have succeeded or at the cap. A batch (`Unit`) depends on nothing but itself,
so with `workers` > 1 a pool of processes runs them, with the same outcomes (state-based
policies; an openpi model batches the environments in one process), and each finished one is
kept in the run folder (`unit_store`): the same evaluation run again goes on after them.

Policies: `hold` (LIBERO's no-op, the passive baseline), `random` (uniform in [-1, 1]^6 and a
±1 gripper per step, seeded by (seed, task, batch)), and `openpi:<dir>`
(`coda.libero.openpi_policy`: a chunk of `action_horizon` actions per inference, its first
`replan_steps` executed, then the next inference; noise from an explicit key folded from
(seed, task, batch, inference)). LIBERO-PRO's perturbed suites (swap / object / lan / task)
are their own suite names (their own BDDL files and initial states). The observation
perturbations (camera / light / noise levels, `coda.libero.perturb`) change the cameras' frames,
what an image policy sees and the GIFs show, never the physics: a state-based policy (planner,
hold, random) acts as unperturbed. `layout1..5` shift the objects LIBERO puts on the table by
the floating gripper's layout offsets (`PandaEnv`'s `layout_shift`: an offset is shortened where
its object would overlap another body); each episode row then says what moved (`moved`).

results.json / results.md have the floating-gripper evaluation's shape (`evaluate`): per-task
rows, the suite's success, plus `per_episode` (task, initial state, success, steps). GIFs: the
first `gifs` episodes of each task through LIBERO's agent view, a frame every 0.4 s of simulated
time up to the episode's end (its first success or the cap), into gifs/ (none without a GL
backend: `gif_note` says why).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pathlib
import time
from typing import Any

import jax
import numpy as np

from coda import blas
from coda.libero import data, perturb, suites
from coda.libero import evaluate as E
from coda.libero import openpi_policy as OP
from coda.libero import panda_chain as PC
from coda.libero import render as LR
from coda.libero import scene as S
from coda.libero import unit_store as US
from coda.libero.panda_env import PandaEnv

NOOP = np.array([0.0] * 6 + [-1.0])  # LIBERO_DUMMY_ACTION of openpi's / OFT's clients


class HoldActor:
    """LIBERO's no-op every step."""

    def start(self, task_id: int, batch: int) -> None:
        pass

    def chunk(self, env: PandaEnv, obs: dict, prompt: str) -> np.ndarray:  # [B, 1, 7]
        return np.broadcast_to(NOOP, (env.n_envs, 1, 7)).copy()


class RandomActor:
    """Uniform deltas in [-1, 1]^6 and a random ±1 gripper per step, seeded."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)

    def start(self, task_id: int, batch: int) -> None:
        self.rng = np.random.default_rng([self.seed, task_id, batch])

    def chunk(self, env: PandaEnv, obs: dict, prompt: str) -> np.ndarray:
        b = env.n_envs
        move = self.rng.uniform(-1.0, 1.0, (b, 6))
        grip = self.rng.choice([-1.0, 1.0], (b, 1))
        return np.concatenate([move, grip], axis=1)[:, None]


class PlannerActor:
    """`panda_chain.PandaPlanner`: the goal's atoms as scripted stages (pick-and-place,
    drawers, knobs, pushed plates); a task it cannot plan holds still (LIBERO's no-op), so it
    scores 0 there."""

    def __init__(self):
        self.planner = None

    def start(self, task_id: int, batch: int) -> None:
        self.planner = None

    def chunk(self, env: PandaEnv, obs: dict, prompt: str) -> np.ndarray:
        if self.planner is None:
            try:
                self.planner = PC.PandaPlanner(env)
            except ValueError:
                self.planner = False
        if self.planner is False:
            return HoldActor().chunk(env, obs, prompt)
        return self.planner.act(env)[:, None]


class OpenpiActor:
    """A pi0.5 checkpoint: one inference per `replan_steps` steps, rendered cameras as input."""

    def __init__(self, policy: OP.OpenpiLiberoPolicy, replan_steps: int, image_size: int, seed):
        if not 1 <= replan_steps <= policy.horizon:
            raise ValueError(f"replan_steps={replan_steps} outside [1, {policy.horizon}]")
        self.policy, self.replan, self.image_size = policy, int(replan_steps), int(image_size)
        self.key = jax.random.PRNGKey(int(seed))
        self.batch_key, self.n = self.key, 0

    def start(self, task_id: int, batch: int) -> None:
        self.batch_key = jax.random.fold_in(jax.random.fold_in(self.key, task_id), batch)
        self.n = 0

    def chunk(self, env: PandaEnv, obs: dict, prompt: str) -> np.ndarray:
        obs = env.observe(self.image_size)  # the environments step without rendering
        rng = jax.random.fold_in(self.batch_key, self.n)
        self.n += 1
        return self.policy.infer(obs, prompt, rng)[:, : self.replan]


def make_actor(config: Any, policy: OP.OpenpiLiberoPolicy | None = None):
    """The acting policy of `config.policy` (an openpi policy built from its checkpoint unless
    `policy`, an already loaded one, is given)."""
    name = config.policy
    if name == "hold":
        return HoldActor()
    if name == "random":
        return RandomActor(config.seed)
    if name == "planner":
        return PlannerActor()
    if OP.checkpoint_dir(name) is not None:
        if policy is None:
            policy = OP.OpenpiLiberoPolicy(OP.find_parts(name, config.tokenizer), config.openpi)
        return OpenpiActor(policy, config.openpi.replan_steps, config.panda.image_size, config.seed)
    raise ValueError(
        f"policy={name!r} cannot act on robot=panda (valid: {', '.join(E.PANDA_POLICIES)}, "
        "openpi:<dir>)"
    )


GIF_STRIDE = 8  # policy steps per GIF frame: 0.4 s at 20 Hz, the floating GIFs' rate


def run_batch(
    env: PandaEnv,
    indices: list[int],
    actor,
    prompt: str,
    max_steps: int,
    wait_steps: int,
    record: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(success [B], policy steps until the first success, else max_steps [B], qpos trace) of
    one batch of episodes from LIBERO's initial states `indices`. The trace [record, T + 1, nq]
    holds the first `record` environments' qpos after the no-op steps and after each of the
    T policy steps run (None when `record` is 0): their GIFs."""
    obs = env.reset(indices)
    noop = np.broadcast_to(NOOP, (env.n_envs, 7))
    for _ in range(wait_steps):
        obs, _ = env.step(noop)
    trace = [np.stack([d.qpos.copy() for d in env.datas[:record]])] if record else None
    done = np.zeros(env.n_envs, bool)
    steps = np.full(env.n_envs, max_steps, np.int64)
    t = 0
    while t < max_steps and not done.all():
        for a in np.swapaxes(actor.chunk(env, obs, prompt), 0, 1):  # [B, 7] per step
            obs, ok = env.step(a)
            t += 1
            if record:
                trace.append(np.stack([d.qpos.copy() for d in env.datas[:record]]))
            first = ok & ~done
            steps[first], done = t, done | ok
            if t >= max_steps or done.all():
                break
    return done, steps, (np.stack(trace, 1) if record else None)


def write_gifs(
    out: pathlib.Path, env: PandaEnv, k: int, trace: np.ndarray, ok, steps, size: int, wait: int
) -> list[str]:
    """Agent-view GIFs of the traced episodes (the first of `env`'s last reset), a frame every
    GIF_STRIDE steps up to and including the episode's last (its first success, or the cap),
    as the policy saw them after the `wait` no-op steps; paths relative to `out`."""
    (out / "gifs").mkdir(exist_ok=True)
    paths = []
    for i, q in enumerate(trace):
        last = int(steps[i])
        at = sorted(set(range(0, last + 1, GIF_STRIDE)) | {last})
        rel = f"gifs/task{k:02d}_ep{i:02d}_{'success' if ok[i] else 'failure'}.gif"
        index = env.frame_index(env.inits[i], wait + np.asarray(at))
        LR.write_gif(out / rel, env.agentview(q[at], frames=index), size=size)
        paths.append(rel)
    return paths


def _batches(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


@dataclasses.dataclass(frozen=True)
class Unit:
    """One batch of one task's initial states: what one process runs at a time. Its outcomes
    depend on nothing else (a fresh reset, the actor restarted with (task, batch)), so the
    units of an evaluation may run in any order, in any process."""

    k: int  # the task's id in the suite
    name: str
    src: str  # the suite its data comes from (LIBERO-PRO's perturbed suites: their own)
    batch: int  # the batch's index within the task (its first records the GIFs)
    indices: tuple[int, ...]  # its initial states
    size: int  # the task's PandaEnv batch size (a short last batch is padded with copies)


def task_units(config: Any, k: int, name: str, src: str, indices: list[int]) -> list[Unit]:
    # a chained placement differs per initial state, so each runs in its own environment
    size = 1 if _chained(config) else min(int(config.panda.batch), len(indices))
    return [
        Unit(k, name, src, j, tuple(idx), size) for j, idx in enumerate(_batches(indices, size))
    ]


def _chained(config: Any) -> bool:
    # `config_problems` refuses fixture_chain without a fixture_seed
    return bool(config.panda.get("fixture_chain", False))


def _reset(config: Any, unit: Unit) -> int:
    """Which reset of a LIBERO env the unit's fixtures are placed by."""
    return unit.indices[0] + 1 if _chained(config) else 1


def _env(config: Any, unit: Unit) -> PandaEnv:
    seed = int(config.panda.fixture_seed)
    level = perturb.parse_layout(config.perturbation)
    return PandaEnv(
        unit.src, unit.name, n_envs=unit.size, fixture_seed=None if seed < 0 else seed,
        fixture_reset=_reset(config, unit), fixture_chained=_chained(config),
        obs_perturbation=perturb.parse_obs(config.perturbation, config.seed),
        layout_shift=None if level is None else (level, int(config.seed)),
    )  # fmt: skip


def run_unit(config: Any, unit: Unit, actor, max_steps: int, gifs, envs: dict) -> dict:
    """{"episodes": per-episode rows, "gifs": paths, "seconds": rollout wall} of one unit, or
    {"unsupported": why} where its task's scene or stored states do not load with the Panda.
    `gifs`: (run folder, GIFs per task) of each task's first episodes; `envs`: the caller's
    cache, holding the environment of the last task run."""
    key = (unit.src, unit.name, unit.size, _reset(config, unit))
    try:
        if key not in envs:
            envs.clear()  # one task's environment at a time
            envs[key] = _env(config, unit)
        env = envs[key]
        idx, (folder, n_gifs) = list(unit.indices), gifs
        actor.start(unit.k, unit.batch)
        padded = idx + [idx[0]] * (unit.size - len(idx))
        record = min(n_gifs, len(idx)) if unit.batch == 0 else 0
        prompt, wait = OP.prompt_for(unit.src, unit.name), int(config.panda.wait_steps)
        t0 = time.time()
        ok, steps, trace = run_batch(env, padded, actor, prompt, max_steps, wait, record)
        seconds = time.time() - t0
    except S.LiberoImportError as e:
        return {"unsupported": str(e).splitlines()[0]}
    paths = (
        write_gifs(folder, env, unit.k, trace, ok, steps, int(config.gif_size), wait)
        if record
        else []
    )
    rows = []
    for b, i in enumerate(idx):
        rows.append({"task_id": unit.k, "task": unit.name, "init": i,
                     "success": bool(ok[b]), "steps": int(steps[b])})  # fmt: skip
        if env.layout_shift is not None:
            rows[-1]["moved"] = env.moved[b]
    return {"episodes": rows, "gifs": paths, "seconds": seconds}


def task_row(k: int, name: str, src: str, task, indices, results) -> tuple[dict, list]:
    """(results.json's per-task row, its per-episode rows) from its units' `results`. A task
    whose scene or stored states do not load with the Panda counts its episodes as failed, with
    the reason in `unsupported`."""
    unsupported = next((r["unsupported"] for r in results if "unsupported" in r), None)
    if unsupported is not None:
        episodes = [{"task_id": k, "task": name, "init": i, "success": False, "steps": 0}
                    for i in indices]  # fmt: skip
        paths, seconds = [], 0.0
    else:
        episodes = [e for r in results for e in r["episodes"]]
        paths = [g for r in results for g in r["gifs"]]
        seconds = sum(r["seconds"] for r in results)
    n = len(episodes)
    wins = sum(e["success"] for e in episodes)
    row = {
        "unsupported": unsupported,
        "task": name,
        "data_suite": src,
        "instruction": task.problem.language,
        "prompt": OP.prompt_for(src, name),
        "episodes": n,
        "successes": wins,
        "success_rate": wins / n if n else 0.0,
        "failed": 0,
        "init_indices": indices,
        "rollout_seconds": round(seconds, 2),
        "gifs": paths,
    }
    return row, episodes


def _tasks(config: Any) -> list[tuple]:
    """(task id, name, data suite, loaded task, initial states) of each task evaluated."""
    src = config.suite
    if config.perturbation in suites.PERTURBATIONS:
        src = suites.perturbed(config.suite, config.perturbation)
    names, out = suites.tasks(config.suite), []
    for k in E.task_ids(config.suite, config.tasks):
        task = S.load_task(src, names[k])
        n_init, count, offset = len(task.states), int(config.init_states), int(config.init_offset)
        out.append((k, names[k], src, task, E.init_indices(n_init, count, offset)))
    return out


def worker_count(config: Any, n_units: int) -> int:
    """Processes for `n_units` units: `panda.workers`, 0 = one per CPU core this process may
    use; never more than the units."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    n = int(config.panda.get("workers", 1)) or cores or 1
    return max(1, min(n, n_units))


_WORKER: dict = {}  # a worker process's config, actor, step cap, GIF target, environment cache


def _start_worker(config: Any, max_steps: int, gifs) -> None:
    jax.config.update("jax_platforms", "cpu")  # ν on the host: workers never claim accelerators
    _WORKER.update(config=config, actor=make_actor(config), steps=max_steps, gifs=gifs, envs={})


def _work(job: tuple[int, Unit]) -> tuple[int, dict]:
    w, (i, unit) = _WORKER, job
    return i, run_unit(w["config"], unit, w["actor"], w["steps"], w["gifs"], w["envs"])


def run_units(
    config: Any, units: list[Unit], actor, max_steps: int, gifs, on_done=None
) -> tuple[list, int]:
    """(each unit's `run_unit` result, in order; the processes used). With one worker, here
    with `actor`; else a pool of spawned processes, each with its own actor of config.policy
    (state-based policies only: `config_problems`). Outcomes are the same either way: a
    unit's depend only on itself, and the workers inherit the pinned OpenBLAS kernels.
    `on_done(unit, result)` runs here as each unit finishes (in any order with workers)."""
    n = worker_count(config, len(units))
    out: list = [None] * len(units)
    if n == 1:
        envs: dict = {}
        jobs = ((i, run_unit(config, u, actor, max_steps, gifs, envs)) for i, u in enumerate(units))
        pool = None
    else:
        ctx = multiprocessing.get_context("spawn")  # JAX's threads do not survive a fork
        pool = ctx.Pool(n, initializer=_start_worker, initargs=(config, max_steps, gifs))
        jobs = pool.imap_unordered(_work, list(enumerate(units)), chunksize=1)
    try:
        for i, result in jobs:
            out[i] = result
            if on_done is not None:
                on_done(units[i], result)
    finally:
        if pool is not None:
            pool.terminate()
    return out, n


def _key(u: Unit) -> tuple:
    return US.key_of(u.k, u.batch, u.indices)


def evaluate(
    config: Any, workdir: str | pathlib.Path, policy: OP.OpenpiLiberoPolicy | None = None
) -> dict:
    """Runs config.suite under config.perturbation with config.policy on LIBERO's Panda; writes
    results.json and results.md into workdir and returns the results dict. `policy`: an openpi
    policy already loaded from config.policy's checkpoint (tests share one)."""
    bad = E.config_problems(config)
    if bad:
        raise ValueError("; ".join(bad))
    if config.get("robot", "floating") != "panda":
        raise ValueError(f"robot={config.get('robot')!r}: this is robot=panda's evaluation")
    actor = make_actor(config, policy)  # a checkpoint that fails to load: before any folder
    out = pathlib.Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    max_steps = int(config.panda.max_steps) or suites.step_cap(config.suite)
    n_gifs, gif_note = E.gif_count(config)
    obs_p = perturb.parse_obs(config.perturbation, config.seed)
    t0 = time.time()
    tasks = _tasks(config)
    units = [u for k, name, src, _, idx in tasks for u in task_units(config, k, name, src, idx)]
    store = US.UnitStore(out, config)  # units finished by an earlier, interrupted run
    done = store.load()
    todo = [u for u in units if _key(u) not in done]
    fresh, n_workers = run_units(
        config, todo, actor, max_steps, (out, n_gifs), lambda u, r: store.add(_key(u), r)
    )
    done.update({_key(u): r for u, r in zip(todo, fresh, strict=True)})
    results = [done[_key(u)] for u in units]
    rows, episodes = [], []
    for k, name, src, task, indices in tasks:
        mine = [r for u, r in zip(units, results, strict=True) if u.k == k]
        row, eps = task_row(k, name, src, task, indices, mine)
        rows.append(row)
        episodes += eps
    n = len(episodes)
    wins = sum(e["success"] for e in episodes)
    result = {
        "suite": config.suite,
        "perturbation": config.perturbation,
        "observation_perturbation": dataclasses.asdict(obs_p) if obs_p else None,
        "gif_note": gif_note,
        "robot": "panda",
        "policy": config.policy,
        "trained": None,
        "openpi": actor.policy.describe() if isinstance(actor, OpenpiActor) else None,
        "seed": config.seed,
        "replan_steps": actor.replan if isinstance(actor, OpenpiActor) else 1,
        "wait_steps": int(config.panda.wait_steps),
        "fixture_seed": int(config.panda.fixture_seed),
        "fixture_chain": _chained(config),
        "max_steps": max_steps,
        "control_dt": E.LIBERO_CONTROL_DT,
        "episodes": n,
        "successes": wins,
        "suite_success": wins / max(n, 1),
        "control_steps": sum(e["steps"] for e in episodes),
        "wall_seconds": round(time.time() - t0, 1),
        "workers": n_workers,  # processes that ran the episodes (`panda.workers`)
        "resumed_units": len(units) - len(todo),  # finished before this run (`units.jsonl`)
        "versions": data.versions(),
        "openblas": blas.core(),  # the kernels numpy's linear algebra ran on (`coda.blas`)
        "per_task": rows,
        "per_episode": episodes,
    }
    E.write_results(out, config, result)
    return result
