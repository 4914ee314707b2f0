"""Text2potential for LIBERO goals: the goal's roles in a scene's symbol table and the offline
Φ template over them (issue 30; `coda.potentials.library` asks the scene kind for it, and
`coda.libero.kind` reads the task's atoms back to build it).

**Roles.** `goal_symbols` adds, for the k-th atom of the goal in execution order
(`execution_atoms`: the planner's, with the Open of a drawer an In atom's region moves with),
roles named by what the atom
asks, so a program written for one goal compiles only on scenes whose goal has the same shape
(a mode's τ-edited variant with another kind of goal gets no Φ, `PotentialStep.phi`):

    On(a, b) of two objects   bodies  goal<k>.object (a), goal<k>.support (b)
    On(a, region)             body    goal<k>.object, site goal<k>.on_region
    In(a, region)             body    goal<k>.object, site goal<k>.in_region
    Open / Close / TurnOn /   joint   goal<k>.<action>:<kind> (the atom's first joint; kind and
    TurnOff                           action name LIBERO's threshold), body goal<k>.part (the
                                      body the joint moves)

A site is the region's box on its tracked body (`SymbolTable.site`), read with the `site_*`
geometry helpers, so a region that moves with a drawer moves in Φ too.

**Stages** (the critic's LIBERO phases, `coda.libero.phases`; later atoms suffixed _2, _3 ...):
a placement is reach → grasp → lift → transport → place, an articulation reach → move. Every
done predicate is cumulative (this stage or a later one of the same atom achieved) and holds
wherever LIBERO's atom holds, so Φ completes on every state ν accepts (the program checks
verify it on planner demos). `place` / `move` done are LIBERO's atom itself, region tests taken
in the site's own frame, without the touch test of an object's region (so they are implied by,
not equal to, the atom). Level 1 merges reach + grasp into acquire and lift into transport; the
task-description program is one stage: every atom done, progress toward each atom's end state.
"""

from __future__ import annotations

import mujoco

from coda.libero import predicates as P
from coda.libero.planner_geometry import execution_atoms
from coda.sim import predicates as SP
from coda.sim.state import SymbolTable
from coda.sim.tasks import PotentialTemplate

PLACEMENTS = ("on_obj", "on_region", "in_region")
_ACTIONS = {v: k for k, v in P._ACTION.items()}  # LIBERO's threshold names -> BDDL's


def joint_role(k: int, atom: tuple) -> str:
    """The joint role of articulation atom k: goal<k>.<action>:<LIBERO joint kind>."""
    for kind, table in SP.LIBERO_JOINT_THRESHOLDS.items():
        for action, (op, bound) in table.items():
            if (op, float(bound)) == (atom[1], float(atom[2])):
                return f"goal{k}.{_ACTIONS[action]}:{kind}"
    return f"goal{k}.joint{atom[1]}{atom[2]:g}"


def goal_symbols(sym: SymbolTable, atoms: tuple, model: mujoco.MjModel, built) -> SymbolTable:
    """`sym` with the goal's roles (module doc); `atoms` are the resolved goal atoms."""
    bodies, joints, sites = list(sym.bodies), list(sym.joints), list(sym.sites)
    tracked = {b: i for i, b in enumerate(built.tracked)}
    for k, a in enumerate(execution_atoms(atoms, model, built.tracked, built.joints)):
        g = f"goal{k}"
        if a[0] == "joint":
            j = int(a[3][0])
            joints.append((joint_role(k, a), j))
            body = model.body(model.jnt_bodyid[model.joint(built.joints[j]).id]).name
            if body in tracked:
                bodies.append((f"{g}.part", tracked[body]))
            continue
        bodies.append((f"{g}.object", int(a[1])))
        if a[0] == "on_obj":
            bodies.append((f"{g}.support", int(a[3])))
        else:
            site = (int(a[2]), tuple(a[3]), tuple(a[4]), tuple(a[5]))
            sites.append((f"{g}.{a[0]}", site))
    return SymbolTable(tuple(sorted(bodies)), tuple(sorted(joints)), tuple(sorted(sites)))


# ----------------------------------------------------------------------------- program text

# per placement atom: {t} the stage suffix, {o} / {d} the object's and the destination's roles
_OBJ_DEST = {
    "on_obj": (
        'DEST{t} = "{d}"\n\n\ndef dest{t}(s, sym):\n    return pos(s, sym.body(DEST{t}))\n'
        "\n\ndef over{t}(s, sym):\n    o, d = sym.body(OBJ{t}), sym.body(DEST{t})\n"
        "    near = xy_distance(pos(s, o), pos(s, d)) < {xy_tol}\n"
        "    return near | within_footprint(s, pos(s, o), d)\n"
        "\n\ndef placed{t}(s, sym):\n    o, d = sym.body(OBJ{t}), sym.body(DEST{t})\n"
        "    near = xy_distance(pos(s, o), pos(s, d)) < {xy_tol}\n"
        "    return near & touching(s, o, d) & (pos(s, d)[..., 2] <= pos(s, o)[..., 2])\n"
        "\n\ndef gap{t}(s, sym):\n"
        "    return bottom(s, sym.body(OBJ{t})) - top(s, sym.body(DEST{t}))\n"
    ),
    "on_region": (
        'DEST{t} = "{d}"\n\n\ndef dest{t}(s, sym):\n    return site_pos(s, sym.site(DEST{t}))\n'
        "\n\ndef local{t}(s, sym):\n"
        "    return site_local(s, pos(s, sym.body(OBJ{t})), sym.site(DEST{t}))\n"
        "\n\ndef over{t}(s, sym):\n    h = site_half(s, sym.site(DEST{t}))\n"
        "    return jnp.all(jnp.abs(local{t}(s, sym)[..., :2]) < h[..., :2], axis=-1)\n"
        "\n\ndef placed{t}(s, sym):\n    dz = gap{t}(s, sym)\n"
        "    return over{t}(s, sym) & (dz > {z_lo}) & (dz < {z_hi})\n"
        "\n\ndef gap{t}(s, sym):\n"
        "    return local{t}(s, sym)[..., 2] - site_half(s, sym.site(DEST{t}))[..., 2]\n"
    ),
    "in_region": (
        'DEST{t} = "{d}"\n\n\ndef dest{t}(s, sym):\n    return site_pos(s, sym.site(DEST{t}))\n'
        "\n\ndef offset{t}(s, sym):\n"
        "    return pos(s, sym.body(OBJ{t})) - site_pos(s, sym.site(DEST{t}))\n"
        "\n\ndef over{t}(s, sym):\n    e = site_extent(s, sym.site(DEST{t}))\n"
        "    return jnp.all(jnp.abs(offset{t}(s, sym)[..., :2]) < e[..., :2], axis=-1)\n"
        "\n\ndef placed{t}(s, sym):\n"
        "    e, d = site_extent(s, sym.site(DEST{t})), offset{t}(s, sym)\n"
        "    below_top = over{t}(s, sym) & (d[..., 2] < e[..., 2])\n"
        "    return below_top & (d[..., 2] > -e[..., 2] + {in_low})\n"
        "\n\ndef gap{t}(s, sym):\n    return offset{t}(s, sym)[..., 2]\n"
    ),
}

_PLACEMENT = """
OBJ{t} = "{o}"
{dest}

def place_done{t}(s, sym):
    return placed{t}(s, sym)


def transport_done{t}(s, sym):
    o = sym.body(OBJ{t})
    return (over{t}(s, sym) & (grasped(s, o) | fingers_off(s, o))) | placed{t}(s, sym)


def lift_done{t}(s, sym):
    o = sym.body(OBJ{t})
    return (grasped(s, o) & lifted(s, o, 0.03)) | transport_done{t}(s, sym)


def grasp_done{t}(s, sym):
    return grasped(s, sym.body(OBJ{t})) | lift_done{t}(s, sym)


def reach_done{t}(s, sym):
    o = sym.body(OBJ{t})
    around = within_footprint(s, s.ee_pos, o, -0.01) & (s.ee_pos[..., 2] < top(s, o) + 0.02)
    return around | grasp_done{t}(s, sym)


def reach_progress{t}(s, sym):
    return distance_progress(ee_distance(s, sym.body(OBJ{t})), 0.15)


def grasp_progress{t}(s, sym):
    closing = ramp(0.09 - gripper_opening(s), 0.0, 0.04)
    return closing * distance_progress(ee_distance(s, sym.body(OBJ{t})), 0.08)


def lift_progress{t}(s, sym):
    o = sym.body(OBJ{t})
    return jnp.where(grasped(s, o), ramp(height(s, o), 0.0, 0.03), 0.0)


def transport_progress{t}(s, sym):
    return distance_progress(xy_distance(pos(s, sym.body(OBJ{t})), dest{t}(s, sym)), 0.15)


def place_progress{t}(s, sym):
    lowered = ramp(-jnp.abs(gap{t}(s, sym)), -0.12, -0.005)
    released = jnp.where(grasped(s, sym.body(OBJ{t})), 0.0, 1.0)
    return 0.7 * lowered + 0.3 * released


def end_progress{t}(s, sym):
    d = distance(pos(s, sym.body(OBJ{t})), dest{t}(s, sym))
    return jnp.where(placed{t}(s, sym), 1.0, distance_progress(d, 0.2))
"""

_ARTICULATION = """
JOINT{t} = "{j}"


def moved{t}(s, sym):
    q = s.joint_pos[..., sym.joint(JOINT{t})]
    return {moved}


def move_done{t}(s, sym):
    q = s.joint_pos[..., sym.joint(JOINT{t})]
    return {done}


def reach_done{t}(s, sym):
    {near}
    return near | (moved{t}(s, sym) >= 0.2) | move_done{t}(s, sym)


def reach_progress{t}(s, sym):
    {reach}


def move_progress{t}(s, sym):
    return moved{t}(s, sym)


def end_progress{t}(s, sym):
    return jnp.where(move_done{t}(s, sym), 1.0, moved{t}(s, sym))
"""

PLACE_STAGES = ("reach", "grasp", "lift", "transport", "place")
MOVE_STAGES = ("reach", "move")
COARSE = {"reach": "acquire", "grasp": "acquire", "lift": "transport"}
DESCRIPTIONS = {
    "reach": "gripper around the object (or the part a joint moves)",
    "grasp": "both fingers hold the object",
    "lift": "object held off the table",
    "transport": "object over its destination",
    "place": "the goal's atom holds for the object",
    "move": "the joint past LIBERO's threshold",
    "acquire": "object held",
}


def _articulation(k: int, atom: tuple, has_part: bool) -> str:
    """Program text of articulation atom k: progress is the joint's way from the far end of
    its range to LIBERO's threshold; reach is the gripper at the part the joint moves."""
    t, op, bound = _tag(k), atom[1], float(atom[2])
    rng = f"s.joint_range[..., sym.joint(JOINT{t})"
    if op in (">", ">="):
        moved = f"ramp(q, {rng}, 0], {bound})"
    else:  # "<": from the range's top down to the bound
        moved = f"ramp(-q, -{rng}, 1], {-bound})"
    if has_part:
        part = f'sym.body("goal{k}.part")'
        near = f"near = ee_distance(s, {part}) < jnp.max(half(s, {part}), axis=-1) + 0.03"
        reach = f"return distance_progress(ee_distance(s, {part}), 0.15)"
    else:  # no tracked part: reaching shows only as the joint starting to move
        near, reach = f"near = moved{t}(s, sym) > 0.05", f"return moved{t}(s, sym)"
    return _ARTICULATION.format(
        t=t, j=joint_role(k, atom), moved=moved, done=f"q {op} {bound}", near=near, reach=reach
    )


def _tag(k: int) -> str:
    return "" if k == 0 else f"_{k + 1}"


def _placement(k: int, atom: tuple) -> str:
    t, kind = _tag(k), atom[0]
    dest = _OBJ_DEST[kind].format(
        t=t,
        d=f"goal{k}.support" if kind == "on_obj" else f"goal{k}.{kind}",
        xy_tol=SP.ON_XY_TOL,
        z_lo=SP.LIBERO_REGION_ON_Z[0],
        z_hi=SP.LIBERO_REGION_ON_Z[1],
        in_low=SP.LIBERO_IN_Z_LOW,
    )
    return _PLACEMENT.format(t=t, o=f"goal{k}.object", dest=dest)


def template_of(goal: tuple, ordered: tuple, has_part: tuple[bool, ...]) -> PotentialTemplate:
    """The Φ template of a goal: its resolved atoms `goal` and those the planner executes,
    `ordered` (`execution_atoms`); `has_part[k]`: articulation atom k moves a tracked body."""
    defs, stages, full, coarse_names, phase_map, coarse = "", {}, [], [], {}, {}
    desc = dict(DESCRIPTIONS)
    for k, a in enumerate(ordered):
        t = _tag(k)
        place = a[0] in PLACEMENTS
        defs += _placement(k, a) if place else _articulation(k, a, has_part[k])
        names = PLACE_STAGES if place else MOVE_STAGES
        for n in names:
            stages[n + t] = (f"{n}_done{t}", f"{n}_progress{t}")
            full.append(n + t)
            coarse[n + t] = COARSE.get(n, n) + t if place else "move" + t
            desc[n + t] = DESCRIPTIONS[n]
        if place:
            stages["acquire" + t] = (f"grasp_done{t}", f"reach_progress{t}")
            desc["acquire" + t] = DESCRIPTIONS["acquire"]
            coarse_names += ["acquire" + t, "transport" + t, "place" + t]
        else:
            coarse_names += ["move" + t]
    # the critic's phases are the goal's own atoms' (`coda.libero.phases`), "reach:2" etc.
    for g, a in enumerate(P.order_atoms(tuple(goal))):
        k = ordered.index(a)
        for n in PLACE_STAGES if a[0] in PLACEMENTS else ("move",):
            phase_map[n + (f":{g + 1}" if g else "")] = n + _tag(k)
    ends = " * ".join(f"end_progress{_tag(k)}(s, sym)" for k in range(len(ordered)))
    finals = " & ".join(
        f"{'place' if a[0] in PLACEMENTS else 'move'}_done{_tag(k)}(s, sym)"
        for k, a in enumerate(ordered)
    )
    task_desc = (
        defs
        + f"\n\ndef subgoal_0_done(s, sym):\n    return {finals}\n"
        + f"\n\ndef subgoal_0_potential(s, sym):\n    return {ends}\n"
    )
    return PotentialTemplate(
        kind="libero_goal",
        phase_to_subgoal=phase_map,
        levels={0: tuple(full), 1: tuple(coarse_names)},
        coarse=coarse,
        stages=stages,
        descriptions=desc,
        defs=defs,
        refine={},
        refine_defs="",
        refined_progress={},
        task_description=task_desc,
    )


__all__ = ["goal_symbols", "joint_role", "template_of"]
