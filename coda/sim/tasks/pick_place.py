"""pick_place: put an object on a plate ("put the red cube on the white plate").

Roles target (a pickable object) and goal (a plate); ν: the target rests on the goal, released
(`predicates.placed_on`). The planner, task phases and potential template are the carry
skeleton (`carry.py`) with the put-down measured from the plate's top.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from coda.sim import predicates
from coda.sim.predicates import Predicate
from coda.sim.tasks.base import (
    PICKABLE,
    choose_category,
    choose_instance,
    describe,
    distractors,
    line,
)
from coda.sim.tasks.carry import CarryFamily, CarryProgram


class PickPlaceFamily(CarryFamily):
    name = "pick_place"
    roles = ("target", "goal")

    def program(self, rng, split="train"):
        cat = choose_category(rng, PICKABLE, split)
        target, goal = choose_instance(rng, cat, split), choose_instance(rng, "plate", split)
        src = line(cat, "target", target) + line("plate", "goal", goal)
        src += distractors(rng, split, int(rng.integers(1, 3)), (target, goal))
        return src + f'set_task("{self.name}", target="target", goal="goal")\nsample_layout()\n'

    def make_task(self, objects, params):
        roles = self._role_map(objects, params, self.roles)
        t, g = self._obj(objects, roles["target"]), self._obj(objects, roles["goal"])
        return {
            "family": self.name,
            "instruction": f"put the {describe(t)} on the {describe(g)}",
            "roles": roles,
            "params": {},
            "initial": {"target": "on table", "gripper": "open, at home"},
            "terminal": {"relation": "on_top", "args": ["target", "goal"], "released": True},
        }

    def resample_task(self, scene, rng):
        target = self._pick(rng, self._alternatives(scene, "target"))
        goal = scene.task["roles"]["goal"]
        return self.make_task(scene.objects, {"target": target.name, "goal": goal})

    def success_fn(self, task) -> Predicate:
        return functools.partial(predicates.placed_on, obj="target", support="goal")

    # ---------------------------------------------------------------- carry hooks
    def carried(self, params: Mapping[str, Any]) -> tuple[str, str]:
        return "target", "goal"

    def place_height(self, params, top, floor):
        return top, 0.008  # onto the plate's top surface

    def carry_program(self, task: Mapping[str, Any]) -> CarryProgram:
        return CarryProgram(
            kind="pick_place",
            final="return on_top(s, o, d, 0.02) & ~grasped(s, o)",
            at_dest="return above(s, o, d) | on_top(s, o, d, 0.02)",
            lowered="return on_top(s, o, d, 0.02) | placed(s, sym)",
            gap="bottom(s, o) - top(s, d)",
            goal_z="top(s, d) + half(s, o)[..., 2]",
        )


FAMILY = PickPlaceFamily()  # the registered instance (coda.registries.FAMILIES)
