"""Where a run's scenes come from: `sim.source` (registry `SOURCES`).

``families`` (default): our task families' scene programs (`sim.families`), seeded by the
families' `propose`, executed by the SDK, verified by `coda.sim.verify`; the engine edits them.

``libero:<suite>``: a LIBERO suite (`coda.libero`): the training pool is the suite's tasks
(`libero.tasks`) at their first `libero.train_states` fixed initial states; planner demos come
from the LIBERO planner; the evaluation suites are LIBERO's own held-out initial states, their
LIBERO-Plus layout shifts and LIBERO-PRO's perturbed suites
(`coda.registries.LIBERO_SUITE_NAMES`); a round's
fresh scenes are layout-shifted initial states of the suite's tasks, and a pool episode is
resampled by editing its task in one factor (`coda.libero.program`: swaps and moves, object
instances, new goals from LIBERO's goal vocabulary), made from the source tasks only; a generated
scene whose task is one of the ood_tasks suite's (LIBERO-PRO's changed tasks) is dropped like a
held-out family task. Episodes are named by
`coda.libero.episodes` programs, so pool.jsonl / suites.json / resume work as for families.

A source answers: the pool and held-out tasks (round 0), extra demo layouts, the planner of a
bucket, the fixed suites, a pool scene resampled, fresh scenes, and the pool rebuilt on resume.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from coda.engine.seeding import propose_scenes, verify_scenes
from coda.eval import Suite
from coda.libero.heldout import EvalIndex, task_identity
from coda.loop.evaluation import build_suites
from coda.sim import tasks
from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.regions import accept_for, factor_of, parse_regions
from coda.sim.scene import Scene, resample
from coda.sim.sdk import exec_program

log = logging.getLogger(__name__)

SOURCES = ("families", "libero")
MAX_DRAWS = 200  # draws of a layout / attribute before a region is declared unreachable
LIBERO_STATES = 50  # fixed initial states per LIBERO task
LAYOUT_SHIFT_SHARE = 0.5  # LIBERO layout variants: the share that are small shifts (the rest:
# swaps and moves to free regions, coda.libero.program)


def source_kind(spec: str) -> tuple[str, str]:
    """("families", "") or ("libero", suite) from `sim.source`; ValueError naming the forms."""
    if spec == "families":
        return "families", ""
    if isinstance(spec, str) and spec.startswith("libero:") and spec[len("libero:") :]:
        return "libero", spec[len("libero:") :]
    raise ValueError(f"sim.source={spec!r} is unknown (valid: 'families' or 'libero:<suite>')")


def make_source(config: Any) -> Any:
    kind, suite = source_kind(str(config.sim.get("source", "families")))
    return LiberoSource(config, suite) if kind == "libero" else FamilySource(config)


# ----------------------------------------------------------------------------- families


def task_key(scene: Any) -> tuple:
    """What makes two scenes the same task, whatever their layout and distractors: the family,
    the goal relation and its arguments, the task's parameters, and the category and instance
    of each object bound to a role. A LIBERO scene: its objects (name, category) and its goal
    atoms, whatever the task file is called (an edited source task and a LIBERO-PRO task file
    with the same goal over the same objects are the same task)."""
    t = scene.task
    if t.get("family") == "libero":  # the scene's objects and the goal over them
        return task_identity(scene)
    objs = {o.name: o for o in scene.objects}
    bound = tuple(
        sorted(
            (role, objs[name].category, objs[name].instance)
            for role, name in t.get("roles", {}).items()
            if name in objs
        )
    )
    term = t.get("terminal", {})
    params = tuple(sorted((k, repr(v)) for k, v in t.get("params", {}).items()))
    return (t["family"], term.get("relation"), tuple(term.get("args", ())), params, bound)


class FamilySource:
    """Our task families through the SDK (the loop's original source)."""

    name = "families"
    native_only = False  # "auto" picks MJX with an accelerator

    def __init__(self, config: Any) -> None:
        self.config = config
        self._held: tuple[tuple, frozenset] = ((), frozenset())  # heldout_task_keys' last
        # sim.hard_regions (the focused experiment): the pool and round 0's demos stay outside
        self.regions = parse_regions(tuple(config.sim.get("hard_regions", ()) or ()))

    def _draw(self, prog: str, rng, where: str, taken: frozenset | set = frozenset()) -> Any:
        """exec_program(prog, seed) for the first seed from `rng` not in `taken` whose scene
        lands `where` (coda.sim.regions.accept_for); with no regions, exactly one draw."""
        ok = accept_for(self.regions, where if self.regions else "")
        for _ in range(MAX_DRAWS):
            s = int(rng.integers(2**31))
            if s in taken:
                continue
            scene = exec_program(prog, s, self.config.sim.split, isolation="inprocess")
            if ok(scene):
                return scene
        raise ValueError(
            f"sim.hard_regions: no layout of a program lands {where or 'anywhere'} in "
            f"{MAX_DRAWS} draws (regions {[r.text for r in self.regions]}); widen the regions"
        )

    def seed_pool(self) -> tuple[list, list[str], list[dict], int]:
        """(pool of verified compiled scenes, held-out task programs, scenes.jsonl rows,
        scenes generated), deterministic in the seed."""

        c = self.config
        rng = np.random.default_rng(c.seed)
        scenes, rows = [], []
        fixed = list(c.sim.get("programs", ()) or ())

        def programs():  # lazily: each proposal draws from rng before its layouts do
            if fixed:  # the config's programs, in order
                yield from fixed
                return
            for fam in c.sim.families:
                f = tasks.get_family(fam)
                for _ in range(int(c.sim.programs_per_family)):
                    src = f.propose(rng, split=c.sim.split)
                    if src is not None:
                        yield src

        for src in programs():
            for _ in range(int(c.sim.seeds_per_program)):
                scenes.append(self._draw(src, rng, "nominal"))
        held: list[str] = []
        seen = {s.program for s in scenes}
        for fam in c.sim.families:  # distinct programs, none of them trained on
            f, want, got = tasks.get_family(fam), int(c.eval.heldout_tasks_per_family), 0
            for _ in range(10 * want):
                if got == want:
                    break
                src = f.propose(rng, split=c.sim.split)
                if src is not None and src not in seen:
                    held.append(src)
                    seen.add(src)
                    got += 1
        pool = []
        for s, (comp, v) in zip(scenes, verify_scenes(scenes), strict=True):
            rows.append(
                {"family": s.task["family"], "scene": s.to_dict(), "verification": v.to_dict()}
            )
            if v.ok:
                pool.append(comp)
        return pool, held, rows, len(scenes)

    def demo_scenes(self, pool: Sequence[Any]) -> list:
        """`loop.demo_seeds` more verified layouts of every pool program, for planner demos
        only (the pool, and so the ID suite and the engine's parents, stay as seeded): BC from
        a handful of layouts memorises them and fails on new ones (results/finetune.md)."""

        c = self.config
        n = int(c.loop.demo_seeds)
        if n == 0:
            return []
        rng = np.random.default_rng([int(c.seed), 7])
        taken = {int(p.scene.seed) for p in pool}
        scenes = []
        for prog in sorted({p.scene.program for p in pool}):
            for _ in range(n):
                scenes.append(self._draw(prog, rng, "nominal", taken))
                taken.add(int(scenes[-1].seed))
        return [comp for comp, v in verify_scenes(scenes) if v.ok]

    def planner(self, bucket: Any) -> Any:
        return planner_for(bucket)

    def build_suites(self, pool: Sequence[Any], held: Sequence[str]) -> dict:
        c = self.config
        train = [(p.scene.program, int(p.scene.seed)) for p in pool]
        names = tuple(c.eval.suites)
        out = build_suites(
            train,
            held,
            int(c.eval.episodes),
            int(c.seed),
            int(c.loop.bucket_size),
            tuple(n for n in names if n != "ood_hard"),
        )
        if "ood_hard" in names:
            out["ood_hard"] = self._hard_suite(sorted({p for p, _ in train}), {s for _, s in train})
        return {n: out[n] for n in names}

    def _hard_suite(self, programs: Sequence[str], taken: set) -> Suite:
        """ood_hard: held-out layouts of the training programs inside the declared regions,
        episode k in region k mod R and program k mod P (seeds never a pool scene's)."""
        c, R = self.config, len(self.regions)
        rng = np.random.default_rng([int(c.seed), 11])
        progs, seeds = [], []
        for k in range(int(c.eval.episodes)):
            prog = programs[(k // R) % len(programs)]
            scene = self._draw(prog, rng, f"hard:{k % R}", taken)
            taken.add(int(scene.seed))
            progs.append(prog)
            seeds.append(int(scene.seed))
        return Suite(
            "ood_hard", progs, seeds, split=c.sim.split, batch_size=int(c.loop.bucket_size)
        )

    def resamplable(self, factors: Sequence[str]) -> tuple[str, ...]:
        """The factors of `factors` this source can resample (all of ours)."""
        return tuple(factors)

    def heldout_task_keys(self, programs: Sequence[str]) -> frozenset:
        """The task identities (`task_key`) of the held-out task programs: a generated scene
        with one of them would train on an ood_tasks task (step 2 drops it). Computed once per
        set of programs (a run's suites are fixed)."""
        key = tuple(sorted(set(programs)))
        if self._held[0] != key:
            split = self.config.sim.split
            keys = (task_key(exec_program(p, 0, split, isolation="inprocess")) for p in key)
            self._held = (key, frozenset(keys))
        return self._held[1]

    def resample(
        self, base: Any, factors: Sequence[str], n: int, rng, where: str = ""
    ) -> tuple[int, list]:
        """(tried, [(compiled, factor)] verified): `n` resamples of one factor of a pool scene;
        `where` (coda.sim.regions.accept_for) redraws until the scene lands there ("hard:<i>"
        redraws region i's own factor), up to MAX_DRAWS times, else that resample is skipped."""

        ok = accept_for(self.regions, where)
        scenes = []
        for _ in range(n):
            f = factor_of(self.regions, where) or factors[int(rng.integers(len(factors)))]
            try:
                for _ in range(MAX_DRAWS):
                    new = resample(base.scene, f, int(rng.integers(2**31)))
                    if ok(new):
                        scenes.append((new, f))
                        break
            except Exception as e:  # noqa: BLE001 - a family that cannot resample: skip
                log.info("resample %s failed: %s", f, e)
        out = []
        for (_, f), (c, v) in zip(scenes, verify_scenes([s for s, _ in scenes]), strict=True):
            if v.ok:
                out.append((c, f))
        return len(scenes), out

    def novel(self, n: int, rng) -> tuple[int, list]:
        """(tried, verified compiled scenes): `n` fresh seeded tasks, families in turn."""

        fams = list(self.config.sim.families)
        tried, out = 0, []
        for k in range(n):
            scenes = propose_scenes(fams[k % len(fams)], 1, 1, self.config.sim.split, rng)
            tried += len(scenes)
            out += [c for c, v in verify_scenes(scenes) if v.ok]
        return tried, out

    def compile(self, scene: dict) -> Any:
        """A pool scene again from its pool.jsonl record (resume)."""

        return compile_scene(Scene.from_dict(scene))


# ----------------------------------------------------------------------------- LIBERO


class LiberoSource:
    """A LIBERO suite as the run's scenes (module docstring)."""

    name = "libero"
    native_only = True  # LIBERO's body-matched contact sensors: native MuJoCo only

    def __init__(self, config: Any, suite: str) -> None:
        from coda.libero import suites as LS  # lazy: LIBERO's data (the [libero] extra)

        self.config, self.suite = config, suite  # checked by coda.runconfig
        lc = config.libero
        names = LS.tasks(suite)
        ids = _task_ids(str(lc.tasks), len(names), suite)
        self.task_ids = ids
        self.tasks = [names[i] for i in ids]
        self.train_states = int(lc.train_states)
        self.heldout_from = int(lc.heldout_from)
        self.shift_levels = tuple(int(x) for x in lc.shift_levels)
        self.ood_shift_level = int(lc.ood_shift_level)
        # wordings of each goal that training scenes are told in (1: LIBERO's own sentence)
        self.phrasings = int(lc.get("phrasings", 1))
        # the fixed suites' indexes, built once per run (keyed by what they were built from)
        self._held_key, self._held = None, frozenset()  # heldout_task_keys
        self._eval_key, self._eval_index = None, None  # evaluation_duplicate
        self._planners: dict[str, Any] = {}

    def _compiled(self, ep: Any, seed: int = 0) -> Any:
        from coda.libero.episodes import compile_episode  # lazy: LIBERO's data (the [libero] extra)

        return compile_episode(ep.program, seed)

    def seed_pool(self) -> tuple[list, list[str], list[dict], int]:
        """Every task at its training initial states, verified (LIBERO's checks)."""
        from coda.libero.episodes import Episode, verify  # lazy: LIBERO's data (the [libero] extra)

        pool, rows = [], []
        for t in self.tasks:
            for i in range(self.train_states):
                c = self._compiled(Episode(self.suite, t, i))
                ok = verify(c)
                rows.append({"family": "libero", "scene": c.scene.to_dict(), "verified": ok})
                if ok:
                    pool.append(c)
        return pool, [], rows, len(rows)

    def demo_scenes(self, pool: Sequence[Any]) -> list:
        """`loop.demo_seeds` more initial states per task, after the training ones and before
        the held-out ones (demos only)."""
        from coda.libero.episodes import Episode, verify  # lazy: LIBERO's data (the [libero] extra)

        n = min(int(self.config.loop.demo_seeds), self.heldout_from - self.train_states)
        out = []
        for k, t in enumerate(self.tasks):
            for i in range(self.train_states, self.train_states + n):
                say = (k + i) % self.phrasings  # the wordings in turn (`libero.phrasings`)
                c = self._compiled(Episode(self.suite, t, i, say=say))
                if verify(c):
                    out.append(c)
        return out

    def planner(self, bucket: Any) -> Any:
        """The LIBERO planner of a bucket's task (one per task; None for a goal it cannot
        script: such tasks get no demos)."""
        from coda.libero.planner import planner_for  # lazy: LIBERO's data (the [libero] extra)

        c = bucket.variants[0]
        key = c.scene.task["params"]["suite"] + "/" + c.scene.task["params"]["task"]
        if key not in self._planners:
            try:
                self._planners[key] = planner_for(c, int(self.config.sim.horizon))
            except ValueError as e:
                log.warning("no planner demos for %s: %s", key, e)
                self._planners[key] = None
        return self._planners[key]

    def _ood_episodes(self, data_suite: str, level: int, n: int) -> list:
        from coda.libero import suites as LS  # lazy: LIBERO's data (the [libero] extra)
        from coda.libero.episodes import Episode  # lazy: LIBERO's data (the [libero] extra)

        names = LS.tasks(data_suite)
        base = LS.tasks(self.suite)
        # the chosen tasks' counterparts when the perturbed suite keeps the task list
        tasks = [names[i] for i in self.task_ids] if len(names) == len(base) else names
        states = list(range(self.heldout_from, LIBERO_STATES))
        return [
            Episode(
                data_suite, tasks[i % len(tasks)], states[(i // len(tasks)) % len(states)], level
            )
            for i in range(n)
        ]

    def build_suites(self, pool: Sequence[Any], held: Sequence[str]) -> dict:
        """ID: the pool's episodes; OOD: held-out initial states (`ood_layouts`), their layout
        shifted (`ood_shift`, LIBERO-Plus), LIBERO-PRO's swap / object / lan / task suites.
        Success as LIBERO counts it: the goal held at any chunk endpoint (`Suite.success`)."""
        from coda.libero import suites as LS  # lazy: LIBERO's data (the [libero] extra)

        c = self.config
        n, bs = int(c.eval.episodes), int(c.loop.bucket_size)
        kinds = {"ood_swap": "swap", "ood_objects": "object", "ood_language": "lan"}
        kinds["ood_tasks"] = "task"
        out = {}
        for name in c.eval.suites:  # names checked by coda.runconfig for this suite
            if name == "id":
                progs = [pool[i % len(pool)].scene.program for i in range(n)]
                seeds = [int(pool[i % len(pool)].scene.seed) for i in range(n)]
                out[name] = Suite(name, progs, seeds, "train", bs, "any")
                continue
            if name == "ood_layouts":
                eps = self._ood_episodes(self.suite, 0, n)
            elif name == "ood_shift":
                eps = self._ood_episodes(self.suite, self.ood_shift_level, n)
            else:
                eps = self._ood_episodes(LS.perturbed(self.suite, kinds[name]), 0, n)
            seeds = [
                1_700_000_000 + 7919 * i + int(c.seed) if e.level else 0 for i, e in enumerate(eps)
            ]
            out[name] = Suite(name, [e.program for e in eps], seeds, "train", bs, "any")
        return out

    def resamplable(self, factors: Sequence[str]) -> tuple[str, ...]:
        """The factors of `factors` a LIBERO task can be edited in (`coda.libero.program`:
        layout, attributes and task all)."""
        return tuple(f for f in factors if f in ("layout", "attributes", "task"))

    def _shifted(self, task: str, index: int, rng) -> tuple[Any, bool]:
        from coda.libero.episodes import Episode, verify  # lazy: LIBERO's data (the [libero] extra)

        level = self.shift_levels[int(rng.integers(len(self.shift_levels)))]
        ep = Episode(self.suite, task, index, level, say=int(rng.integers(self.phrasings)))
        c = self._compiled(ep, int(rng.integers(2**31)))
        return c, verify(c)

    def _edited(self, program: str, factor: str, rng) -> tuple[Any, bool] | None:
        """One variant of an episode in `factor` (`coda.libero.program.variant`): layout is
        half the time a small shift of its table objects (LIBERO-Plus's kind), else a swap or a
        move; attributes and task are edits of that factor."""
        from coda.libero import program as LP  # lazy: LIBERO's data (the [libero] extra)

        say = int(rng.integers(self.phrasings))
        return LP.variant(program, factor, rng, self.shift_levels, LAYOUT_SHIFT_SHARE, say)

    def resample(
        self, base: Any, factors: Sequence[str], n: int, rng, where: str = ""
    ) -> tuple[int, list]:
        """(tried, [(compiled, factor)] verified): `n` edits of one factor each (drawn from
        `factors`) of a pool episode (`_edited`)."""
        out, tried = [], 0
        for _ in range(n):
            f = factors[int(rng.integers(len(factors)))]
            try:
                got = self._edited(base.scene.program, f, rng)
            except ValueError as e:  # a task this edit cannot build: skip it
                log.info("LIBERO %s edit of %s failed: %s", f, base.scene.program, e)
                got = None
            tried += got is not None
            if got is not None and got[1]:
                out.append((got[0], f))
        return tried, out

    def evaluation_duplicate(self, compiled: Any, episodes: Sequence[tuple[str, int]]):
        """The evaluation episode program a generated scene recreates (`coda.libero.heldout`:
        the same task, every movable object within 1 cm), or None; the evaluation scenes
        (`episodes`: (program, seed) of the OOD suites, fixed for a run) compiled once."""
        key = tuple(sorted(set(episodes)))
        if self._eval_key != key:
            comp = (self.compile({"program": p, "seed": s}) for p, s in key)
            self._eval_index, self._eval_key = EvalIndex.of(comp), key
        return self._eval_index.duplicate(compiled)

    def heldout_task_keys(self, programs: Sequence[str]) -> frozenset:
        """The task identities (`task_key`) of the ood_tasks suite's episodes (LIBERO-PRO's
        changed tasks): a generated scene with one of them is dropped (step 2)."""
        key = tuple(sorted(set(programs)))
        if self._held_key != key:
            # one episode per task (a program up to "@<initial state>" names its task)
            firsts = {p.split("@")[0]: p for p in key}.values()
            self._held = frozenset(
                task_key(self.compile({"program": p, "seed": 0}).scene) for p in firsts
            )
            self._held_key = key
        return self._held

    def novel(self, n: int, rng) -> tuple[int, list]:
        """`n` fresh scenes: a task of the suite at a non-held-out initial state, shifted."""
        out = []
        for _ in range(n):
            t = self.tasks[int(rng.integers(len(self.tasks)))]
            c, ok = self._shifted(t, int(rng.integers(self.heldout_from)), rng)
            if ok:
                out.append(c)
        return n, out

    def compile(self, scene: dict) -> Any:
        """A pool episode again from its pool.jsonl record (its program and seed)."""
        from coda.libero.episodes import compile_episode  # lazy: LIBERO's data (the [libero] extra)

        return compile_episode(scene["program"], int(scene["seed"]))


def _task_ids(spec: str, n: int, suite: str) -> list[int]:
    if not spec.strip():
        return list(range(n))
    try:
        ids = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"libero.tasks={spec!r} must be task ids like '0,3' ('' = all)") from None
    bad = [i for i in ids if not 0 <= i < n]
    if bad or not ids:
        raise ValueError(f"libero.tasks: ids {bad or ids} outside [0, {n}) of {suite}")
    return ids


__all__ = ["SOURCES", "FamilySource", "LiberoSource", "make_source", "source_kind"]
