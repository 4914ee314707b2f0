"""stack_or_insert: stack one block on another, or insert a peg into a hole fixture.

Mode "stack": roles top and base (cubes or blocks), ν: top stacked on base, released, upright
(`predicates.stacked`). Mode "insert": roles peg and hole, ν: the peg's bottom `depth` below the
rim inside the hole, released (`predicates.inserted`); the hole is sized to the peg
(`couple_attributes`). Carry skeleton (`carry.py`): a stack is put down on the base's top; a
peg is turned to the hole's heading while carried, transported over the hole's interior and
lowered towards the table.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from coda.sim import assets, predicates
from coda.sim import geometry as G
from coda.sim.builder import SceneProgramError
from coda.sim.predicates import Predicate
from coda.sim.scene_data import Scene
from coda.sim.state import SimState
from coda.sim.tasks.base import choose_category, choose_instance, describe, distractors, line
from coda.sim.tasks.carry import CarryFamily, CarryProgram
from coda.sim.tasks.waypoints import wrap

MODES = ("stack", "insert")


def _insert(params: Mapping[str, Any]) -> bool:
    return params.get("mode") == "insert"


class StackOrInsertFamily(CarryFamily):
    name = "stack_or_insert"
    CLEARANCE = 0.006  # m between peg and hole on each side
    DEPTHS = (0.01, 0.015, 0.02)  # m the peg must sink below the rim

    def program(self, rng, split="train"):
        mode = MODES[int(rng.integers(2))]
        if mode == "stack":
            c1 = choose_category(rng, ("cube", "block"), split)
            top = choose_instance(rng, c1, split)
            c2 = choose_category(rng, ("cube", "block"), split, (top,))
            base = choose_instance(rng, c2, split, (top,))
            src = line(c1, "top", top) + line(c2, "base", base)
            src += distractors(rng, split, int(rng.integers(0, 2)), (top, base))
            return src + (
                f'set_task("{self.name}", mode="stack", top="top", base="base")\nsample_layout()\n'
            )
        peg, hole = choose_instance(rng, "peg", split), choose_instance(rng, "hole", split)
        src = line("peg", "peg", peg) + line("hole", "hole", hole)
        src += distractors(rng, split, int(rng.integers(0, 2)), (peg, hole))
        return src + (
            f'set_task("{self.name}", mode="insert", peg="peg", hole="hole")\nsample_layout()\n'
        )

    def make_task(self, objects, params):
        mode = params.get("mode", "stack")
        if mode == "stack":
            roles = self._role_map(objects, params, ("top", "base"))
            t, b = self._obj(objects, roles["top"]), self._obj(objects, roles["base"])
            for o in (t, b):
                if o.category not in ("cube", "block"):
                    raise SceneProgramError(f"stacking needs cubes or blocks; got {o.category}")
            return {
                "family": self.name,
                "instruction": (
                    f"stack one {describe(t)} on the other"  # two alike: no NP repeated
                    if describe(t) == describe(b)
                    else f"stack the {describe(t)} on the {describe(b)}"
                ),
                "roles": roles,
                "params": {"mode": "stack"},
                "initial": {"top": "on table", "base": "on table"},
                "terminal": {"relation": "on_top", "args": ["top", "base"], "released": True},
            }
        if mode != "insert":
            raise SceneProgramError(f"mode must be 'stack' or 'insert', got {mode!r}")
        roles = self._role_map(objects, params, ("peg", "hole"))
        p, h = self._obj(objects, roles["peg"]), self._obj(objects, roles["hole"])
        if p.category != "peg" or h.category != "hole":
            raise SceneProgramError("insert needs a peg and a hole fixture")
        depth = float(params.get("depth", predicates.INSERT_DEPTH))
        if not 0.005 <= depth <= 0.03:
            raise SceneProgramError(f"insertion depth must be in [0.005, 0.03] m, got {depth}")
        return {
            "family": self.name,
            "instruction": f"insert the {describe(p)} into the {describe(h)}",
            "roles": roles,
            "params": {"mode": "insert", "depth": depth},
            "initial": {"peg": "upright on table"},
            "terminal": {"relation": "inserted", "args": ["peg", "hole"], "depth": depth},
        }

    def couple_attributes(self, scene: Scene) -> None:
        if scene.task["params"].get("mode") != "insert":
            return
        peg = scene.object(scene.task["roles"]["peg"])
        hole = scene.object(scene.task["roles"]["hole"])
        inst = assets.get_category("peg").instance(peg.instance)
        peg_half = scene.attributes[peg.name]["dims"]["half"] * max(inst.proportions[:2])
        scene.attributes[hole.name]["dims"]["hole_half"] = round(peg_half + self.CLEARANCE, 5)

    def resample_task(self, scene, rng):
        params = dict(scene.task["params"])
        if params["mode"] == "stack":  # swap which block goes on top, or pick another pair
            blocks = [o for o in scene.objects if o.category in ("cube", "block")]
            i, j = rng.choice(len(blocks), size=2, replace=False)
            roles = (scene.task["roles"]["top"], scene.task["roles"]["base"])
            new = (blocks[i].name, blocks[j].name)
            if new == roles:
                new = (roles[1], roles[0])
            return self.make_task(scene.objects, {"mode": "stack", "top": new[0], "base": new[1]})
        # one peg, one hole: vary how deep the peg must go (changes the terminal state and ν)
        depths = [d for d in self.DEPTHS if d != params.get("depth", predicates.INSERT_DEPTH)]
        return self.make_task(
            scene.objects,
            {
                "mode": "insert",
                "depth": self._pick(rng, depths),
                "peg": scene.task["roles"]["peg"],
                "hole": scene.task["roles"]["hole"],
            },
        )

    def success_fn(self, task) -> Predicate:
        if task["params"]["mode"] == "stack":
            return functools.partial(predicates.stacked, obj="top", base="base")
        depth = task["params"].get("depth", predicates.INSERT_DEPTH)
        return functools.partial(predicates.inserted, obj="peg", hole="hole", depth=depth)

    # ---------------------------------------------------------------- carry hooks
    def carried(self, params: Mapping[str, Any]) -> tuple[str, str]:
        return ("peg", "hole") if _insert(params) else ("top", "base")

    def place_height(self, params, top, floor):
        if _insert(params):
            return G.TABLE_Z, 0.004  # the peg goes down into the hole, towards the table
        return top, 0.008  # onto the base's top

    def carry_yaw(
        self, params: Mapping[str, Any], s: SimState, o: int, d: int, ee_yaw: jnp.ndarray
    ) -> jnp.ndarray:
        if not _insert(params):
            return ee_yaw
        # turn the peg to the hole's heading (square section: a quarter-turn symmetry)
        dyaw = wrap(G.yaw_of(s.body_quat[..., d, :]) - G.yaw_of(s.body_quat[..., o, :]), jnp.pi / 2)
        return ee_yaw + dyaw

    def interior(self, params: Mapping[str, Any]) -> bool:
        return _insert(params)

    def last_phase(self, params: Mapping[str, Any]) -> str:
        return "insert" if _insert(params) else "stack"

    def carry_program(self, task: Mapping[str, Any]) -> CarryProgram:
        mode = task.get("params", {}).get("mode", "stack")
        if mode not in MODES:
            raise ValueError(f"stack_or_insert mode must be stack or insert, got {mode!r}")
        if mode == "stack":
            return CarryProgram(
                kind="stack",
                final="return on_top(s, o, d, 0.015) & ~grasped(s, o) & upright(s, o)",
                at_dest="return above(s, o, d) | on_top(s, o, d, 0.02)",
                lowered="return on_top(s, o, d, 0.015) | placed(s, sym)",
                gap="bottom(s, o) - top(s, d)",
                goal_z="top(s, d) + half(s, o)[..., 2]",
            )
        return CarryProgram(
            kind="insert",
            final=(
                "in_xy = within_footprint(s, pos(s, o), d, 0.0, True)\n"
                "    return in_xy & (bottom(s, o) < top(s, d) - DEPTH) & ~grasped(s, o)"
            ),
            at_dest="return within_footprint(s, pos(s, o), d, -0.01, True)",
            lowered=(
                "in_xy = within_footprint(s, pos(s, o), d, 0.0, True)\n"
                "    return (in_xy & (bottom(s, o) < top(s, d) - DEPTH)) | placed(s, sym)"
            ),
            gap="bottom(s, o) - (top(s, d) - DEPTH)",
            goal_z="top(s, d) - DEPTH + half(s, o)[..., 2]",
        )


FAMILY = StackOrInsertFamily()  # the registered instance (coda.registries.FAMILIES)
