"""Perturbation generators for LIBERO scenes beyond LIBERO-PRO's shipped suites (`suites.py`).

`layout_shift` is LIBERO-Plus's layout perturbation: at level L (1-5) every object that LIBERO
places on a workspace region has its region centre, so its initial position, moved by up to
0.01 * L m in a random direction (seeded), before the usual settle. Objects LIBERO places in
or on fixtures (drawers, shelves, the stove) move with their fixture, so they are not shifted.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from coda.libero import scene as S
from coda.sim.compile import CompiledScene

LEVELS = (1, 2, 3, 4, 5)
SHIFT_PER_LEVEL = 0.01  # m


def shiftable(task: S.LiberoTask) -> list[str]:
    """Movable objects whose :init puts them on a workspace (table / floor) region."""
    ws = task.workspace.name
    movable = {n for n, _ in task.problem.objects}
    out = []
    for atom in task.problem.init:
        if len(atom) == 3 and atom[0] == "on" and atom[1] in movable:
            region = task.problem.regions.get(atom[2])
            if region is not None and region.target == ws and atom[1] not in out:
                out.append(atom[1])
    return out


def layout_shift(suite: str, name: str, index: int, level: int, seed: int) -> CompiledScene:
    """Task `name` with initial state `index`, its table objects shifted at `level`, settled."""
    if level not in LEVELS:
        raise ValueError(f"layout_shift level must be one of {LEVELS}, got {level!r}")
    raw = S.compile_task(suite, name, index, settle=False)
    task = S.load_task(suite, name)
    rng = np.random.default_rng([seed, index, level])
    qpos = raw.init_qpos.copy()
    moved = {}
    names = [n for n, _ in task.problem.objects]
    for obj in shiftable(task):
        k = names.index(obj)
        adr = S.GRIPPER_NQ + 7 * k
        r = SHIFT_PER_LEVEL * level * math.sqrt(rng.uniform())  # uniform over the disc
        a = rng.uniform(0.0, 2 * math.pi)
        dxy = np.array([r * math.cos(a), r * math.sin(a)])
        qpos[adr : adr + 2] += dxy
        moved[obj] = [float(v) for v in dxy]
    qpos = S.settled_qpos(raw.model, qpos)
    scene = raw.scene
    layout = {k: dict(v) for k, v in scene.layout.items()}
    for k, (obj, _) in enumerate(task.problem.objects):
        adr = S.GRIPPER_NQ + 7 * k
        layout[obj].update(x=float(qpos[adr]), y=float(qpos[adr + 1]), z=float(qpos[adr + 2]))
    initial = dict(scene.task["initial"])
    initial["perturbation"] = {"kind": "layout_shift", "level": level, "seed": seed, "moved": moved}
    scene = dataclasses.replace(scene, layout=layout, task={**scene.task, "initial": initial})
    return dataclasses.replace(raw, scene=scene, init_qpos=qpos)
