"""LIBERO's predicate semantics transcribed line by line onto `mujoco.MjData` (numpy, host side).

This is the cross-check for `predicates.py`: it reads MuJoCo's own data the way LIBERO's
object_states / predicates do (body_xpos, site_xpos / site_xmat, the contact list filtered by
the objects' geoms, raw joint qpos), with none of our SimState machinery, so ν (JAX, from
sensors) and this (numpy, from MjData) agree only if both implement LIBERO's rules.
Sources: libero/envs/predicates/base_predicates.py (On, In, Open, Close, TurnOn, TurnOff),
object_states/base_object_states.py (check_ontop, check_contain, is_open ...),
objects/site_object.py (in_box, under), objects/articulated_objects.py (thresholds).
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import assets

# articulated_objects.py: default_{open,close,turnon,turnoff}_ranges and the comparisons
_THRESH = {
    "wooden_cabinet": {"open": lambda q: q < -0.14, "close": lambda q: q > 0.0},
    "white_cabinet": {"open": lambda q: q < -0.14, "close": lambda q: q > 0.0},
    "yellow_cabinet": {"open": lambda q: q < -0.14, "close": lambda q: q > 0.0},
    "microwave": {"open": lambda q: q < -1.3, "close": lambda q: q > -0.005},
    "flat_stove": {"turnon": lambda q: q >= 0.5, "turnoff": lambda q: q < 0.0},
    "yellow_stove": {"turnon": lambda q: q >= 0.5, "turnoff": lambda q: q < 0.0},
}


class Reference:
    """LIBERO's predicates for one compiled LIBERO task (model from `scene.compile_task`)."""

    def __init__(self, task, model: mujoco.MjModel):
        self.task, self.m = task, model
        self.objects = {n: c for n, c in task.problem.objects} | {n: c for n, c in task.fixtures}
        self.site_parts = {c: assets.site_parts(c) for c in set(self.objects.values())}
        self._geom_cache: dict[str, set[int]] = {}

    def _geoms(self, obj: str) -> set[int]:
        if obj not in self._geom_cache:
            self._geom_cache[obj] = self._find_geoms(obj)
        return self._geom_cache[obj]

    def _find_geoms(self, obj: str) -> set[int]:
        root = self.m.body(obj).id
        out = set()
        for g in range(self.m.ngeom):
            b = self.m.geom_bodyid[g]
            while b not in (0, root):
                b = self.m.body_parentid[b]
            if b == root and (self.m.geom_contype[g] or self.m.geom_conaffinity[g]):
                out.add(g)
        return out

    def check_contact(self, d: mujoco.MjData, a: str, b: str) -> bool:
        ga, gb = self._geoms(a), self._geoms(b)
        for i in range(d.ncon):
            g1, g2 = d.contact[i].geom1, d.contact[i].geom2
            if (g1 in ga and g2 in gb) or (g1 in gb and g2 in ga):
                return True
        return False

    def _region(self, region: str) -> tuple[str | None, np.ndarray, np.ndarray, np.ndarray]:
        sid = self.m.site(region).id
        target = self.task.problem.regions[region].target
        parent = target if target in self.objects else None
        return parent, self.m.site_size[sid].copy(), None, sid

    def _joints(self, name: str) -> tuple[str, list[float]]:
        if name in self.objects:
            cat = self.objects[name]
            js = [j for j in range(self.m.njnt) if self.m.joint(j).name.startswith(name + "_")]
        else:
            parent = self.task.problem.regions[name].target
            cat = self.objects[parent]
            _, jnames = self.site_parts[cat][name[len(parent) + 1 :]]
            js = [self.m.joint(f"{parent}_{j}").id for j in jnames]
        return cat, js

    def holds(self, d: mujoco.MjData, atom: tuple[str, ...]) -> bool:
        pred, args = atom[0], atom[1:]
        if pred in ("open", "close", "turnon", "turnoff"):
            cat, js = self._joints(args[0])
            qs = [d.qpos[self.m.jnt_qposadr[j]] for j in js]
            f = _THRESH[cat][pred]
            if pred in ("open", "turnon"):
                return any(f(q) for q in qs)  # is_open / turn_on: any joint
            return all(f(q) for q in qs)  # is_close / turn_off: every joint
        a, b = args
        pa = d.xpos[self.m.body(a).id]
        if pred == "on" and b in self.objects:  # ObjectState.check_ontop
            pb = d.xpos[self.m.body(b).id]
            return bool(
                pb[2] <= pa[2]
                and self.check_contact(d, b, a)
                and np.linalg.norm(pb[:2] - pa[:2]) < 0.03
            )
        parent, size, _, sid = self._region(b)
        ps, mat = d.site_xpos[sid], d.site_xmat[sid].reshape(3, 3)
        if pred == "on":  # SiteObject.under, then contact with the region's parent
            delta = mat @ (pa - ps)
            under = size[2] - 0.005 < delta[2] < size[2] + 0.10 and bool(
                np.all(np.abs(delta[:2]) < size[:2])
            )
            return under and (parent is None or self.check_contact(d, parent, a))
        total = np.abs(mat @ size)  # SiteObject.in_box
        ub, lb = ps + total, ps - total
        lb[2] -= 0.01
        return bool(np.all(pa > lb) and np.all(pa < ub))
