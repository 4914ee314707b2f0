"""Base class for task families."""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from coda.sim import assets
from coda.sim.predicates import Predicate
from coda.sim.scene import ObjectSpec, Scene
from coda.sim.tasks.phases import Phase

# Head noun of a category's noun phrase, where it is not the category name itself.
NOUNS = {"cabinet_drawer": "cabinet", "cabinet_door": "cabinet"}
# Instance words that read better in another form as a pre-noun modifier ("wood" -> "wooden").
MODIFIERS = {"wood": "wooden", "lid": "lidded"}


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


class TaskFamily(abc.ABC):
    """A task generator. Subclasses set `name`, `phases` and implement the hooks below."""

    name: str = ""
    phases: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()

    # ---------------------------------------------------------------- proposals
    @abc.abstractmethod
    def program(self, rng: np.random.Generator, split: str = "train") -> str:
        """Source of a scene program for a fresh proposal."""

    def propose(
        self, rng: np.random.Generator, split: str = "train", max_tries: int = 10
    ) -> str | None:
        """A scene program whose task has a verifier ν; None if none could be made."""
        from coda.sim.sdk import exec_program

        for _ in range(max_tries):
            src = self.program(rng, split)
            scene = exec_program(
                src, seed=int(rng.integers(2**31)), split=split, isolation="inprocess"
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

    def task_phases(self, task: dict[str, Any]) -> tuple[Phase, ...]:
        """Ordered task phases with completion predicates; the last is always ν.

        Default: one phase, success itself (a family without finer sub-goals). Families
        override this with their own sub-goals (reach, grasp, ...) ahead of ν.
        """
        nu = self.success_fn(task)
        if nu is None:
            raise ValueError(f"family {self.name!r} has no success predicate ν for this task")
        return (Phase("success", nu),)

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _role_map(
        objects: list[ObjectSpec], params: dict[str, Any], roles: tuple[str, ...]
    ) -> dict[str, str]:
        from coda.sim.sdk import SceneProgramError

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
