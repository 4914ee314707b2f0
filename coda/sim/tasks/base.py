"""Base class for task families, and the helpers their program templates share.

A family owns everything that differs between families, so nothing outside its module switches
on its name: program templates and proposals, roles and τ, ν (`success_fn`), the ordered task
phases and the segmentation of a trace into them, the scripted planner's phases and waypoints
(pure JAX, called by the generic `coda.sim.planner.ScriptedPlanner`; a numpy mirror for
`verify`'s reach check), and the offline potential templates that `coda.potentials.library`
assembles into training programs.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from coda.sim import assets
from coda.sim.builder import SceneProgramError, run_program
from coda.sim.predicates import Predicate
from coda.sim.scene_data import ObjectSpec, Scene
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks import phases as ph
from coda.sim.tasks.phases import Phase
from coda.sim.tasks.waypoints import Waypoint

# Head noun of a category's noun phrase, where it is not the category name itself.
NOUNS = {"cabinet_drawer": "cabinet", "cabinet_door": "cabinet"}
# Instance words that read better in another form as a pre-noun modifier ("wood" -> "wooden").
MODIFIERS = {"wood": "wooden", "lid": "lidded"}
# Categories a pick-and-carry task (and a distractor) may use.
PICKABLE = ("block", "cube", "can", "ball", "fruit", "bottle")

# (phase name, object, tcp position [3]) the planner needs, for verify's reach check
ReachTarget = tuple[str, str, np.ndarray]


def noun_phrase(category: str, instance: str) -> str:
    """English noun phrase (no article) for an object instance, built modifier-before-noun.

    Instance names are `<category or part>_<attribute words>` ('cube_red', 'door_white' of
    'cabinet_door', 'hole_wide_rim') or name the object itself (fruit: 'apple'). The attribute
    words become one (hyphenated) modifier before the category's head noun: 'red cube',
    'white cabinet', 'wide-rim hole'.
    """
    if not category or not instance:
        raise ValueError(
            f"noun_phrase needs a category and an instance, got {category!r}, {instance!r}"
        )
    noun = NOUNS.get(category, category.replace("_", " "))
    words = instance.split("_")
    if words[0] not in (category, category.split("_")[-1]):
        return " ".join(words)  # the instance is the noun itself ('apple', 'pear')
    if len(words) == 1:
        return noun
    return f"{'-'.join(MODIFIERS.get(w, w) for w in words[1:])} {noun}"


def describe(obj: ObjectSpec) -> str:
    """Noun phrase naming an object in instructions: 'cube_red' -> 'red cube'."""
    return noun_phrase(obj.category, obj.instance)


# ----------------------------------------------------------------------------- program templates


def line(category: str, role: str, instance: str) -> str:
    """One `add_object` line of a scene program."""
    return f'add_object("{category}", role="{role}", instance="{instance}")\n'


def _draw(rng: np.random.Generator, options: list[str], ok) -> str:
    """A uniform draw from `options`, moved on (cyclically) to the next option that is `ok`.

    The draw always spends one `rng.integers(len(options))`, so avoiding a clash changes only
    that pick and not the rest of the random stream (proposals stay reproducible by seed).
    """
    i = int(rng.integers(len(options)))
    for k in range(len(options)):
        if ok(options[(i + k) % len(options)]):
            return options[(i + k) % len(options)]
    return options[i]  # nothing avoids the clash (e.g. a one-instance held-out pool)


def _pool(category: str, split: str) -> list[str]:
    """Instance names of `category` in `split` (all of them if the split has none)."""
    pool = assets.instances_for(category, split) or list(assets.get_category(category).instances)
    return [i.name for i in pool]


def choose_instance(
    rng: np.random.Generator, category: str, split: str, exclude: Collection[str] = ()
) -> str:
    """An instance of `category`, not one in `exclude` when the pool allows it."""
    return _draw(rng, _pool(category, split), lambda n: n not in exclude)


def choose_category(
    rng: np.random.Generator, options: tuple[str, ...], split: str, exclude: Collection[str] = ()
) -> str:
    """A category with instances in `split`, preferably one with an instance not in `exclude`
    (objects of one scene get distinct instances, so instructions name each unambiguously)."""
    ok = [c for c in options if assets.instances_for(c, split)]
    return _draw(rng, ok, lambda c: bool(set(_pool(c, split)) - set(exclude)))


def distractors(rng: np.random.Generator, split: str, n: int, used: Collection[str] = ()) -> str:
    """Distractor lines whose instances differ from `used` and from each other."""
    src, used = "", set(used)
    for k in range(n):
        cat = choose_category(rng, PICKABLE, split, used)
        inst = choose_instance(rng, cat, split, used)
        used.add(inst)
        src += line(cat, f"distractor_{k}", inst)
    return src


# ----------------------------------------------------------------------------- potentials


@dataclasses.dataclass(frozen=True)
class PotentialTemplate:
    """A family's offline Text2potential knowledge for one task (§3.4), written in the
    training-program language (`coda.potentials.program`); `coda.potentials.library` turns it
    into a staged program for a diagnosed phase and repair level.

    `defs` defines, for every stage name s, the functions named by `stages[s]` = (done,
    progress); `refine_defs` adds those of the finer stages that replace a diagnosed stage at
    level 0 (`refine`), with `refined_progress` the progress a refined-away stage keeps.
    `task_description` defines the single-stage `subgoal_0_done` / `subgoal_0_potential`.
    """

    kind: str  # program kind named in headers: pick_place | put_inside | stack | insert | ...
    phase_to_subgoal: Mapping[str, str]  # planner / critic phase name -> stage
    levels: Mapping[int, tuple[str, ...]]  # repair level 0 (full) / 1 (coarse) -> stages
    coarse: Mapping[str, str]  # full stage -> the level-1 stage that absorbs it
    stages: Mapping[str, tuple[str, str]]  # stage -> (done function, progress function)
    descriptions: Mapping[str, str]
    defs: str
    refine: Mapping[str, tuple[str, ...]]
    refine_defs: str
    refined_progress: Mapping[str, str]
    task_description: str


def roles_of(task: Mapping[str, Any], moved: str, kind: str) -> None:
    """Raises unless τ's role map (if it has one) names `moved`, the role a program acts on."""
    roles = task.get("roles", {})
    if roles and moved not in roles:
        raise ValueError(f"task roles {sorted(roles)} lack {moved!r} needed by {kind}")


# ----------------------------------------------------------------------------- the family


class TaskFamily(abc.ABC):
    """A task generator. Subclasses set `name` (and `roles`) and implement the hooks below."""

    name: str = ""
    roles: tuple[str, ...] = ()

    # ---------------------------------------------------------------- proposals
    @abc.abstractmethod
    def program(self, rng: np.random.Generator, split: str = "train") -> str:
        """Source of a scene program for a fresh proposal; its `set_task` names `self.name`."""

    def propose(
        self, rng: np.random.Generator, split: str = "train", max_tries: int = 10
    ) -> str | None:
        """A scene program whose task has a verifier ν; None if none could be made.

        The program runs against the SDK with this family as the only one `set_task` may name,
        so a family can check its proposals before it is registered."""
        for _ in range(max_tries):
            src = self.program(rng, split)
            scene = run_program(
                src,
                seed=int(rng.integers(2**31)),
                split=split,
                families={self.name: self},
                isolation="inprocess",
            )
            if self.success_fn(scene.task) is not None:
                return src
        return None

    # ---------------------------------------------------------------- τ
    @abc.abstractmethod
    def make_task(self, objects: list[ObjectSpec], params: dict[str, Any]) -> dict[str, Any]: ...

    @abc.abstractmethod
    def resample_task(self, scene: Scene, rng: np.random.Generator) -> dict[str, Any]: ...

    def couple_attributes(self, scene: Scene) -> None:
        """Adjusts attributes that a task ties together (e.g. hole fits peg). Default: none."""

    @abc.abstractmethod
    def success_fn(self, task: dict[str, Any]) -> Predicate | None: ...

    # ---------------------------------------------------------------- phases
    def task_phases(self, task: dict[str, Any]) -> tuple[Phase, ...]:
        """Ordered task phases with completion predicates; the last is always ν.

        Default: one phase, success itself (a family without finer sub-goals). Families
        override this with their own sub-goals (reach, grasp, ...) ahead of ν.
        """
        nu = self.success_fn(task)
        if nu is None:
            raise ValueError(f"family {self.name!r} has no success predicate ν for this task")
        return (Phase("success", nu),)

    def segment(
        self, states: SimState, sym: SymbolTable, task: dict[str, Any]
    ) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Phase segmentation of chunk-endpoint traces (leaves [B, T, ...]) into this task's
        phases: (phase index [B, T], stopped_at [B]); see `phases.segment`."""
        return ph.segment(states, sym, self.task_phases(task))

    # ---------------------------------------------------------------- planner
    @abc.abstractmethod
    def planner_phases(self, params: Mapping[str, Any]) -> tuple[Waypoint, ...]:
        """The scripted planner's phases, in order (gripper, speed, tolerance, settle time)."""

    @abc.abstractmethod
    def waypoints(
        self, params: Mapping[str, Any], sym: SymbolTable, s: SimState, target: jnp.ndarray
    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        """Pure JAX: every planner phase's tcp xyz [B, P, 3], yaw [B, P] and the path still to
        go beyond the waypoint [B, P], from the chunk-start state and the servo setpoint
        `target` [B, 6] (x, y, z, yaw, pitch, roll of the wrist)."""

    @abc.abstractmethod
    def reach_targets(self, c: Any, d: Any) -> list[ReachTarget]:
        """Numpy mirror of `waypoints` from a compiled scene `c` and its MuJoCo data `d` at
        t = 0, covering every pose the planner may need (for `verify.check_reach`)."""

    # ---------------------------------------------------------------- potentials
    @abc.abstractmethod
    def potential_template(self, task: Mapping[str, Any]) -> PotentialTemplate:
        """The offline training-program template for τ (raises ValueError if τ lacks a role
        or parameter the template needs)."""

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _role_map(
        objects: list[ObjectSpec], params: dict[str, Any], roles: tuple[str, ...]
    ) -> dict[str, str]:
        names = {o.name for o in objects}
        by_role = {o.role: o.name for o in objects if o.role}
        out = {}
        for r in roles:
            v = params.get(r, r)
            v = by_role.get(v, v)
            if v not in names:
                raise SceneProgramError(
                    f"task role {r!r} refers to unknown object {v!r}; objects: {sorted(names)}"
                )
            out[r] = v
        return out

    @staticmethod
    def _graspables(objects: list[ObjectSpec]) -> list[ObjectSpec]:
        return [
            o for o in objects if assets.get_category(o.category).graspable and o.category != "peg"
        ]

    def _alternatives(self, scene: Scene, role: str) -> list[ObjectSpec]:
        """Graspable objects other than the one now playing `role` (for resampling τ)."""
        current = scene.task["roles"][role]
        alts = [o for o in self._graspables(scene.objects) if o.name != current]
        if not alts:
            raise ValueError(f"no other object can play {role!r}; cannot resample the task")
        return alts

    @staticmethod
    def _pick(rng: np.random.Generator, options: list):
        return options[int(rng.integers(len(options)))]

    @staticmethod
    def _obj(objects: list[ObjectSpec], name: str) -> ObjectSpec:
        return next(o for o in objects if o.name == name)
