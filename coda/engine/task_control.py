"""The control of a task mode: the task moved out of the failures' neighbourhood, in place.

A task diagnosis says "this fails because of what the task asks for": the kind of object a role
is played by, or the goal relation (open vs close). Redrawing the task (another object becomes
the target) also moves the role to another object's position, size and weight, so a failure
keyed on those would look task-keyed. The control therefore holds what the other factors
determine at the role (as the critic's task probes do, `coda.critic.directed`):

* relation: a task parameter the neighbourhood constrains (``choose_task``'s ``params``) set to
  a value outside its set that the family's own task resample makes on the same objects
  (articulated: open -> close);
* category: the focus role's object (where it has none to change to, the next task role's)
  replaced in place by an instance of a train category of the same kind (graspable object,
  container / plate, cabinet) outside the neighbourhood's set that the family accepts for the
  role, keeping its name, pose, mass and friction, and its size parameters where the new
  category has the same ones (a cube into a block), else its sizes scaled so its narrowest
  horizontal width matches the old one's.

Both are applied where they exist (as a layout / attribute control moves every interval that
leaves room); `SceneProgramError` when neither does (the neighbourhood covers every category
and relation the family allows here: nothing to control against).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.engine.roles import concrete_task_role
from coda.sim import assets
from coda.sim.compile import compile_scene
from coda.sim.scene import ObjectSpec, Scene
from coda.sim.sdk import SceneProgramError
from coda.sim.tasks import get_family

__all__ = ["task_control"]


def _narrowest(scene: Scene, name: str) -> float:
    c = compile_scene(scene)
    half = c.consts["body_half"][c.object_bodies[name]]
    return float(2.0 * min(half[0], half[1]))


def _fresh(scene: Scene) -> Scene:
    out = copy.deepcopy(scene)
    out.program = None
    return out


def _relation(scene: Scene, params: Mapping[str, list], rng) -> Scene | None:
    fam = get_family(scene.task["family"])
    base = {**scene.task.get("params", {}), **scene.task["roles"]}
    options = [(k, v) for k, allowed in params.items() for v in _seen_values(scene, k)]
    options = [(k, v) for k, v in options if v not in params[k]]
    for k, v in [options[i] for i in rng.permutation(len(options))] if options else []:
        try:
            task = fam.make_task(scene.objects, {**base, k: v})
        except (SceneProgramError, ValueError, KeyError):
            continue
        out = _fresh(scene)
        out.task = task
        return out
    return None


def _seen_values(scene: Scene, key: str) -> list[Any]:
    """Values of task parameter `key` the family makes on these objects by its own resample."""
    fam = get_family(scene.task["family"])
    out = []
    for s in range(8):
        try:
            v = fam.resample_task(scene, np.random.default_rng(s)).get("params", {}).get(key)
        except (SceneProgramError, ValueError, KeyError):
            continue
        if v is not None and v not in out:
            out.append(v)
    return out


def _category(scene: Scene, role: str, excluded: list[str], rng) -> Scene | None:
    key = concrete_task_role(scene, role)
    if key is None:
        return None
    name = scene.task["roles"][key]
    old = scene.object(name)
    kind = assets.get_category(old.category)
    family = get_family(scene.task["family"])
    cats = [
        c.name
        for c in assets.CATEGORIES.values()
        if c.name not in excluded
        and c.name != old.category
        and c.split == "train"
        and (c.graspable, c.articulated, c.kind) == (kind.graspable, kind.articulated, kind.kind)
        and (not c.graspable or family._graspables([ObjectSpec(name, c.name, c.instances[0].name)]))
    ]
    params = {**scene.task.get("params", {}), **scene.task["roles"]}
    for cname in [cats[i] for i in rng.permutation(len(cats))] if cats else []:
        insts = assets.instances_for(cname, "train") or list(assets.get_category(cname).instances)
        inst = insts[int(rng.integers(len(insts)))]
        out = _fresh(scene)
        spec = out.object(name)
        spec.category, spec.instance = cname, inst.name
        try:
            out.task = family.make_task(out.objects, params)
        except (SceneProgramError, ValueError, KeyError):
            continue
        new_a = assets.get_category(cname).sample_attributes(rng, inst)
        new_a["mass"] = scene.attributes[name]["mass"]
        new_a["friction"] = scene.attributes[name]["friction"]
        out.attributes[name] = new_a
        old_dims = scene.attributes[name]["dims"]
        if set(new_a["dims"]) <= set(old_dims):  # the same size parameters: held as they are
            new_a["dims"] = {k: old_dims[k] for k in new_a["dims"]}
        else:  # other parameters: the narrowest horizontal width held
            scale = _narrowest(scene, name) / max(_narrowest(out, name), 1e-6)
            new_a["dims"] = {k: round(v * scale, 5) for k, v in new_a["dims"].items()}
        family.couple_attributes(out)
        return out
    return None


def task_control(scene: Scene, edit: Mapping[str, Any], seed: int) -> Scene:
    """`scene` with the task moved out of ``choose_task`` edit `edit`'s neighbourhood, in place
    (module docstring): the relation and a role's category both moved where each can be."""
    rng = np.random.default_rng([int(seed), 0x7C])
    cats = edit["categories"]
    focus = edit.get("focus") or next(iter(cats), None)
    out = scene
    if edit.get("params"):
        out = _relation(out, edit["params"], rng) or out
    for r in [r for r in dict.fromkeys([focus, *cats]) if r in cats]:
        moved = _category(out, r, cats[r], rng)  # the focus role, else the next that can move
        if moved is not None:
            out = moved
            break
    if out is scene:
        raise SceneProgramError(
            "no task control: no relation outside "
            f"{dict(edit.get('params', {}))} and no category outside {dict(cats)} the family "
            "accepts here"
        )
    return out
