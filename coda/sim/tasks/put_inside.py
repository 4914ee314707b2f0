"""put_inside: put an object into an open container ("put the apple in the blue bowl").

Roles target (a pickable object) and container (an open bowl, bin or box; not a plate, hole or
lidded box); ν: the target is inside the container, released and at rest
(`predicates.placed_inside`). Carry skeleton (`carry.py`): transport ends over the container's
interior and the put-down is measured from its floor.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from coda.sim import assets, predicates
from coda.sim.builder import SceneProgramError
from coda.sim.predicates import Predicate
from coda.sim.tasks.base import choose_category, choose_instance, describe, distractors, line
from coda.sim.tasks.carry import CarryFamily, CarryProgram


class PutInsideFamily(CarryFamily):
    name = "put_inside"
    roles = ("target", "container")

    def program(self, rng, split="train"):
        cat = choose_category(rng, ("block", "cube", "ball", "fruit", "can"), split)
        target = choose_instance(rng, cat, split)
        src = line(cat, "target", target)
        ccat = choose_category(rng, ("bowl", "bin", "box"), split)
        inst = [i.name for i in assets.instances_for(ccat, split) if i.variant != "lid"]
        inst = inst or [i.name for i in assets.get_category(ccat).instances if i.variant != "lid"]
        container = inst[int(rng.integers(len(inst)))]
        src += line(ccat, "container", container)
        src += distractors(rng, split, int(rng.integers(1, 3)), (target, container))
        return src + (
            f'set_task("{self.name}", target="target", container="container")\nsample_layout()\n'
        )

    def make_task(self, objects, params):
        roles = self._role_map(objects, params, self.roles)
        t, c = self._obj(objects, roles["target"]), self._obj(objects, roles["container"])
        if not assets.get_category(c.category).container or c.category in ("plate", "hole"):
            raise SceneProgramError(f"put_inside needs a bowl, bin or box; got {c.category}")
        if assets.get_category(c.category).instance(c.instance).variant == "lid":
            raise SceneProgramError("put_inside needs an open container (not a lidded box)")
        return {
            "family": self.name,
            "instruction": f"put the {describe(t)} in the {describe(c)}",
            "roles": roles,
            "params": {},
            "initial": {"target": "on table, outside the container"},
            "terminal": {"relation": "inside", "args": ["target", "container"], "released": True},
        }

    def resample_task(self, scene, rng):
        target = self._pick(rng, self._alternatives(scene, "target"))
        return self.make_task(
            scene.objects, {"target": target.name, "container": scene.task["roles"]["container"]}
        )

    def success_fn(self, task) -> Predicate:
        return functools.partial(predicates.placed_inside, obj="target", container="container")

    # ---------------------------------------------------------------- carry hooks
    def carried(self, params: Mapping[str, Any]) -> tuple[str, str]:
        return "target", "container"

    def place_height(self, params, top, floor):
        return floor, 0.012  # down onto the container's floor

    def interior(self, params: Mapping[str, Any]) -> bool:
        return True

    def carry_program(self, task: Mapping[str, Any]) -> CarryProgram:
        return CarryProgram(
            kind="put_inside",
            final="return inside(s, o, d) & ~grasped(s, o)",
            at_dest=(
                "over = within_footprint(s, pos(s, o), d, 0.0, True)\n"
                "    over = over & (bottom(s, o) > top(s, d) - 0.01)\n"
                "    return over | inside(s, o, d)"
            ),
            lowered="return inside(s, o, d) | placed(s, sym)",
            gap="bottom(s, o) - (s.body_pos[..., d, 2] + s.inner[..., d, 3])",
            goal_z="pos(s, d)[..., 2] + s.inner[..., d, 3] + half(s, o)[..., 2]",
        )


FAMILY = PutInsideFamily()  # the registered instance (coda.registries.FAMILIES)
