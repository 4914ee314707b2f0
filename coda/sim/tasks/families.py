"""The four task families: pick-place, articulated, put-inside, stack-or-insert."""

from __future__ import annotations

import functools
from collections.abc import Collection

from coda.sim import assets, predicates
from coda.sim.predicates import Predicate
from coda.sim.scene import Scene
from coda.sim.tasks import phases as ph
from coda.sim.tasks.base import TaskFamily, describe

PICKABLE = ("block", "cube", "can", "ball", "fruit", "bottle")


def _line(category: str, role: str, instance: str) -> str:
    return f'add_object("{category}", role="{role}", instance="{instance}")\n'


def _draw(rng, options: list[str], ok) -> str:
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


def _choose_instance(rng, category: str, split: str, exclude: Collection[str] = ()) -> str:
    """An instance of `category`, not one in `exclude` when the pool allows it."""
    return _draw(rng, _pool(category, split), lambda n: n not in exclude)


def _choose_category(
    rng, options: tuple[str, ...], split: str, exclude: Collection[str] = ()
) -> str:
    """A category with instances in `split`, preferably one with an instance not in `exclude`
    (objects of one scene get distinct instances, so instructions name each unambiguously)."""
    ok = [c for c in options if assets.instances_for(c, split)]
    return _draw(rng, ok, lambda c: bool(set(_pool(c, split)) - set(exclude)))


def _distractors(rng, split: str, n: int, used: Collection[str] = ()) -> str:
    """Distractor lines whose instances differ from `used` and from each other."""
    src, used = "", set(used)
    for k in range(n):
        cat = _choose_category(rng, PICKABLE, split, used)
        inst = _choose_instance(rng, cat, split, used)
        used.add(inst)
        src += _line(cat, f"distractor_{k}", inst)
    return src


class PickPlaceFamily(TaskFamily):
    name = "pick_place"
    roles = ("target", "goal")
    phases = ("approach", "descend", "grasp", "lift", "transport", "lower", "release", "retreat")

    def program(self, rng, split="train"):
        cat = _choose_category(rng, PICKABLE, split)
        target, goal = _choose_instance(rng, cat, split), _choose_instance(rng, "plate", split)
        src = _line(cat, "target", target) + _line("plate", "goal", goal)
        src += _distractors(rng, split, int(rng.integers(1, 3)), (target, goal))
        return src + 'set_task("pick_place", target="target", goal="goal")\nsample_layout()\n'

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

    def task_phases(self, task) -> tuple[ph.Phase, ...]:
        return (
            ph.Phase("reach", ph.reach("target")),
            ph.Phase("grasp", ph.grasp("target")),
            ph.Phase("lift", ph.lift("target")),
            ph.Phase("transport", ph.over("target", "goal")),
            ph.Phase("place", self.success_fn(task)),
        )


class PutInsideFamily(TaskFamily):
    name = "put_inside"
    roles = ("target", "container")
    phases = ("approach", "descend", "grasp", "lift", "transport", "lower", "release", "retreat")

    def program(self, rng, split="train"):
        cat = _choose_category(rng, ("block", "cube", "ball", "fruit", "can"), split)
        target = _choose_instance(rng, cat, split)
        src = _line(cat, "target", target)
        ccat = _choose_category(rng, ("bowl", "bin", "box"), split)
        inst = [i.name for i in assets.instances_for(ccat, split) if i.variant != "lid"]
        inst = inst or [i.name for i in assets.get_category(ccat).instances if i.variant != "lid"]
        container = inst[int(rng.integers(len(inst)))]
        src += _line(ccat, "container", container)
        src += _distractors(rng, split, int(rng.integers(1, 3)), (target, container))
        return src + (
            'set_task("put_inside", target="target", container="container")\nsample_layout()\n'
        )

    def make_task(self, objects, params):
        roles = self._role_map(objects, params, self.roles)
        t, c = self._obj(objects, roles["target"]), self._obj(objects, roles["container"])
        from coda.sim.sdk import SceneProgramError

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

    def task_phases(self, task) -> tuple[ph.Phase, ...]:
        return (
            ph.Phase("reach", ph.reach("target")),
            ph.Phase("grasp", ph.grasp("target")),
            ph.Phase("lift", ph.lift("target")),
            ph.Phase("transport", ph.over("target", "container", interior=True)),
            ph.Phase("place", self.success_fn(task)),
        )


class ArticulatedFamily(TaskFamily):
    name = "articulated"
    roles = ("cabinet",)
    phases = ("approach", "descend", "grasp", "pull", "release", "retreat")
    INITIAL_OPEN = 0.65  # joint fraction at the start of a "close" task

    def program(self, rng, split="train"):
        cat = _choose_category(rng, ("cabinet_drawer", "cabinet_door"), split)
        action = ("open", "close")[int(rng.integers(2))]
        cabinet = _choose_instance(rng, cat, split)
        src = _line(cat, "cabinet", cabinet)
        src += _distractors(rng, split, int(rng.integers(0, 2)), (cabinet,))
        return (
            src + f'set_task("articulated", cabinet="cabinet", action="{action}")\n'
            "sample_layout()\n"
        )

    def make_task(self, objects, params):
        from coda.sim.sdk import SceneProgramError

        roles = self._role_map(objects, params, self.roles)
        c = self._obj(objects, roles["cabinet"])
        if not assets.get_category(c.category).articulated:
            raise SceneProgramError(f"articulated needs a cabinet; got {c.category}")
        action = params.get("action", "open")
        if action not in ("open", "close"):
            raise SceneProgramError(f"action must be 'open' or 'close', got {action!r}")
        part = "drawer" if c.category == "cabinet_drawer" else "door"
        start = 0.0 if action == "open" else self.INITIAL_OPEN
        return {
            "family": self.name,
            "instruction": f"{action} the {part} of the {describe(c)}",
            "roles": roles,
            "params": {"action": action, "part": part},
            "initial": {"joint_fraction": {"cabinet": start}},
            "terminal": {
                "relation": "joint_fraction",
                "args": [
                    "cabinet",
                    ">=" if action == "open" else "<=",
                    predicates.OPEN_FRACTION if action == "open" else predicates.CLOSED_FRACTION,
                ],
            },
        }

    def resample_task(self, scene, rng):
        action = "close" if scene.task["params"]["action"] == "open" else "open"
        return self.make_task(
            scene.objects, {"cabinet": scene.task["roles"]["cabinet"], "action": action}
        )

    def success_fn(self, task) -> Predicate:
        return functools.partial(
            predicates.articulated_at, obj="cabinet", action=task["params"]["action"]
        )

    def task_phases(self, task) -> tuple[ph.Phase, ...]:
        return (
            ph.Phase("reach", ph.reach("cabinet.handle")),
            ph.Phase("grasp", ph.grasp("cabinet.handle")),
            ph.Phase(task["params"]["action"], self.success_fn(task)),
        )


class StackOrInsertFamily(TaskFamily):
    name = "stack_or_insert"
    phases = ("approach", "descend", "grasp", "lift", "transport", "lower", "release", "retreat")
    CLEARANCE = 0.006  # m between peg and hole on each side
    DEPTHS = (0.01, 0.015, 0.02)  # m the peg must sink below the rim

    def program(self, rng, split="train"):
        mode = ("stack", "insert")[int(rng.integers(2))]
        if mode == "stack":
            c1 = _choose_category(rng, ("cube", "block"), split)
            top = _choose_instance(rng, c1, split)
            c2 = _choose_category(rng, ("cube", "block"), split, (top,))
            base = _choose_instance(rng, c2, split, (top,))
            src = _line(c1, "top", top) + _line(c2, "base", base)
            src += _distractors(rng, split, int(rng.integers(0, 2)), (top, base))
            return src + (
                'set_task("stack_or_insert", mode="stack", top="top", base="base")\n'
                "sample_layout()\n"
            )
        peg, hole = _choose_instance(rng, "peg", split), _choose_instance(rng, "hole", split)
        src = _line("peg", "peg", peg) + _line("hole", "hole", hole)
        src += _distractors(rng, split, int(rng.integers(0, 2)), (peg, hole))
        return src + (
            'set_task("stack_or_insert", mode="insert", peg="peg", hole="hole")\nsample_layout()\n'
        )

    def make_task(self, objects, params):
        from coda.sim.sdk import SceneProgramError

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

    def task_phases(self, task) -> tuple[ph.Phase, ...]:
        if task["params"]["mode"] == "stack":
            obj, dest, last = "top", "base", "stack"
        else:
            obj, dest, last = "peg", "hole", "insert"
        return (
            ph.Phase("reach", ph.reach(obj)),
            ph.Phase("grasp", ph.grasp(obj)),
            ph.Phase("lift", ph.lift(obj)),
            ph.Phase("transport", ph.over(obj, dest, interior=last == "insert")),
            ph.Phase(last, self.success_fn(task)),
        )
