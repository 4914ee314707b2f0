"""Scene -> mujoco.MjSpec -> MjModel (both backends) and same-structure buckets for MJX.

A bucket holds variants whose compiled models differ only in per-variant fields; MJX rolls a
bucket out as one batch by vmapping a single step over those fields. Which fields may vary is
checked, not assumed: `Bucket` compares every field of the variants' `mjx.Model`s and raises if
a field outside `PER_VARIANT_FIELDS` differs (such variants belong to different buckets).

PER_VARIANT_FIELDS (may differ inside a bucket; MJX reads them at run time):
  body_pos, body_quat       fixture and sub-body poses (σ: layout of receptacles / cabinets)
  body_mass, body_inertia, body_ipos, body_iquat, body_subtreemass, body_invweight0
                            (α: mass; inertia is recomputed by the compiler per variant)
  geom_size, geom_rbound, geom_aabb, geom_pos, geom_quat
                            (α: sizes; boxes/spheres/capsules read geom_size at run time,
                             rbound/aabb feed the broad phase; sub-geom offsets scale with size)
  geom_friction, geom_rgba, mat_rgba   (α: friction, colour)
  jnt_range, qpos0, qpos_spring, dof_invweight0, dof_M0, actuator_acc0, tendon_invweight0,
  stat, cam_*, light_*       (derived quantities the compiler recomputes per variant)
Everything else (types, counts, ids, contact pairs, solver options) is structure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Sequence

import mujoco
import numpy as np

from coda.sim import assets, robot, tasks
from coda.sim.predicates import Predicate
from coda.sim.scene import Scene, check_table
from coda.sim.state import FLOOR, LEFT, N_FIXED_ENTITIES, RIGHT, StateLayout, SymbolTable

PER_VARIANT_FIELDS = (
    "body_pos",
    "body_quat",
    "body_mass",
    "body_inertia",
    "body_ipos",
    "body_iquat",
    "body_subtreemass",
    "body_invweight0",
    "geom_size",
    "geom_rbound",
    "geom_aabb",
    "geom_pos",
    "geom_quat",
    "geom_friction",
    "geom_rgba",
    "mat_rgba",
    "jnt_range",
    "qpos0",
    "qpos_spring",
    "dof_invweight0",
    "dof_M0",
    "actuator_acc0",
    "tendon_invweight0",
    "stat",
    "cam_pos",
    "cam_quat",
    "cam_poscom0",
    "cam_pos0",
    "cam_mat0",
    "light_pos",
    "light_dir",
    "light_poscom0",
    "light_pos0",
    "light_dir0",
    "body_gravcomp",
    "dof_armature",
    "actuator_length0",
)

TABLE_GEOM = "table/top"  # the support surface (contact entity FLOOR)
RESERVED_NAMES = ("table", "floor", "gripper")  # model names an object must not take

SOLVER_ITERATIONS = 8  # Playground-style: few solver / line-search iterations
LS_ITERATIONS = 12


@dataclasses.dataclass
class CompiledScene:
    scene: Scene
    model: mujoco.MjModel
    layout: StateLayout
    sym: SymbolTable
    consts: dict[str, np.ndarray]  # body_half [NB,3], inner [NB,4], joint_range [NJ,2]
    init_qpos: np.ndarray  # [nq]
    init_ctrl: np.ndarray  # [nu]
    structure_key: str
    success: Predicate
    object_bodies: dict[str, int]  # object name -> tracked body index
    # () -> the model image observations render (same qpos layout; meshes / textures allowed,
    # one model shared by the variants that render with it); None: `model` itself (ours)
    render_model: Callable[[], mujoco.MjModel] | None = None


def _yaw_quat(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def build_spec(scene: Scene):
    """MjSpec of a scene, with the sensors of the shared state layout."""
    spec = _new_spec()
    _add_fixed_world(spec, scene)
    tracked, joints, geoms_of, movable = _add_objects(spec.worldbody, scene)
    body_index = {name: i for i, (name, _, _) in enumerate(tracked)}
    pairs = _contact_pairs(body_index, geoms_of, movable)
    return spec, tracked, joints, pairs, body_index


def _new_spec() -> mujoco.MjSpec:
    """An empty spec with the project's physics options (radians, implicit-fast, no autoreset)."""
    spec = mujoco.MjSpec()
    spec.modelname = "coda_scene"
    spec.compiler.degree = False  # every angle in this project is in radians
    opt = spec.option
    opt.timestep = robot.TIMESTEP
    opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    opt.iterations = SOLVER_ITERATIONS
    opt.ls_iterations = LS_ITERATIONS
    opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET  # let NaNs surface; we isolate them
    spec.visual.global_.offwidth = 640
    spec.visual.global_.offheight = 480
    return spec


def _add_fixed_world(spec: mujoco.MjSpec, scene: Scene) -> None:
    """What every scene has: the table, the floor, a light, the agent camera and the gripper
    with its wrist camera. Raises when an object takes a reserved name."""
    wb = spec.worldbody
    reserved = {o.name for o in scene.objects} & set(RESERVED_NAMES)
    if reserved:
        raise ValueError(f"object names {sorted(reserved)} are reserved ({RESERVED_NAMES})")
    table = check_table(scene.table)
    # the table: a fixed box whose top is at z = 0; the ground lies a table height below, so an
    # object pushed over an edge falls instead of resting on an infinite plane
    top = wb.add_body(name="table", pos=[table["x"], table["y"], -table["height"] / 2])
    g = top.add_geom(
        name=TABLE_GEOM,
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[table["half_x"], table["half_y"], table["height"] / 2],
    )
    g.rgba = [0.82, 0.78, 0.72, 1]
    g.friction = [1.0, 0.005, 0.0001]
    floor = wb.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.1])
    floor.pos = [table["x"], table["y"], -table["height"]]
    floor.rgba = [0.45, 0.45, 0.48, 1]
    floor.friction = [1.0, 0.005, 0.0001]
    light = wb.add_light(name="top", pos=[0.4, 0, 1.5])
    light.dir = [0, 0, -1]
    cam = wb.add_camera(name=AGENT_CAMERA, pos=[-0.15, 0.0, 0.75])
    cam.quat = list(_look_quat(np.array([-0.15, 0.0, 0.75]), np.array([0.5, 0.0, 0.05])))
    robot.add_gripper(spec)
    add_wrist_camera(spec)


def _add_objects(wb, scene: Scene):
    """Builds every object under the world body, in scene order -> (tracked [(body name, half,
    inner[4])], joints [(name, range)], collision geoms per tracked body, movable names)."""
    tracked: list[tuple[str, np.ndarray, np.ndarray]] = []  # (body name, half, inner[4])
    joints: list[tuple[str, tuple[float, float]]] = []
    geoms_of: dict[str, list[str]] = {}
    movable: set[str] = set()
    for obj in scene.objects:
        cat = assets.get_category(obj.category)
        inst = cat.instance(obj.instance)
        pose = scene.layout[obj.name]
        body = wb.add_body(name=obj.name, quat=_yaw_quat(pose["yaw"]))
        built = cat.build(body, obj.name, scene.attributes[obj.name], inst)
        # resting on the table, 0.5 mm clear; an optional "z" lifts it (σ may say so)
        body.pos = [pose["x"], pose["y"], float(built.half[2]) + 0.0005 + pose.get("z", 0.0)]
        if cat.kind == assets.MOVABLE:
            body.add_freejoint(name=f"{obj.name}/free")
            movable.add(obj.name)
        inner = np.zeros(4)
        if built.inner_half is not None:
            inner = np.concatenate([built.inner_half, [built.inner_floor_z]])
        tracked.append((obj.name, built.half, inner))
        geoms_of[obj.name] = list(built.geoms)
        for part in built.parts:
            pname = f"{obj.name}/{part.suffix}"
            tracked.append((pname, part.half, np.zeros(4)))
            geoms_of[pname] = list(built.part_geoms[part.suffix])
        if built.joint:
            joints.append((built.joint, built.joint_range))
    return tracked, joints, geoms_of, movable


def _contact_pairs(
    body_index: dict[str, int], geoms_of: dict[str, list[str]], movable: set[str]
) -> list[tuple[int, int, str, str]]:
    """Contact sensor pairs (entity, entity, geom, geom): finger pads x (movable geoms +
    handles); movable x (floor, others)."""
    pairs: list[tuple[int, int, str, str]] = []
    ent = {name: N_FIXED_ENTITIES + i for name, i in body_index.items()}
    grippable = [n for n in body_index if n in movable or n.endswith("/handle")]
    for pad, e_pad in (("gripper/left_pad", LEFT), ("gripper/right_pad", RIGHT)):
        for n in grippable:
            pairs += [(e_pad, ent[n], pad, g) for g in geoms_of[n]]
    names = list(body_index)
    for i, a in enumerate(names):
        if a not in movable:
            continue
        pairs += [(ent[a], FLOOR, g, TABLE_GEOM) for g in geoms_of[a]]  # FLOOR: the table top
        for b in names:
            if b == a or (b in movable and names.index(b) < i):
                continue
            if b.startswith(a + "/"):
                continue
            pairs += [(ent[a], ent[b], ga, gb) for ga in geoms_of[a] for gb in geoms_of[b]]
    return pairs


# Observation cameras of our scenes (image-mode policies, `coda.sim.observe`): the fixed agent
# view behind the robot base and a wrist camera riding on the floating gripper.
AGENT_CAMERA = "front"
WRIST_CAMERA = "wrist"
WRIST_FOVY = 75.0  # deg: fingers and the object between them fill the lower half of the view
# In the gripper body frame: 5 cm ahead (+x) of the palm, 3 cm above the wrist origin, looking
# down the approach axis (-z) with image up = +x (the fingers at the bottom edge), like the
# eye-in-hand camera of LIBERO's Panda (coda.libero.scene.WRIST_POS / WRIST_QUAT).
WRIST_POS = (0.05, 0.0, 0.03)
WRIST_QUAT = (math.sqrt(0.5), 0.0, 0.0, -math.sqrt(0.5))


def add_wrist_camera(spec: mujoco.MjSpec) -> None:
    """The wrist camera on the gripper body (moves with it; constant across variants)."""
    cam = spec.body("gripper").add_camera(name=WRIST_CAMERA, pos=list(WRIST_POS))
    cam.quat = list(WRIST_QUAT)
    cam.fovy = WRIST_FOVY


def _look_quat(eye: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Camera quaternion looking from eye to target (camera looks along its -z, y up)."""
    fwd = target - eye
    fwd /= np.linalg.norm(fwd)
    z = -fwd
    x = np.cross(np.array([0.0, 0.0, 1.0]), z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    m = np.stack([x, y, z], axis=1)
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, m.reshape(-1))
    return q


def add_state_sensors(
    spec: mujoco.MjSpec,
    bodies: Sequence[str],
    joints: Sequence[str],
    contacts: Sequence[tuple[mujoco.mjtObj, str, mujoco.mjtObj, str]],
) -> None:
    """The sensors `state.decode` reads, in its order (`StateLayout`): tcp pose, fingers, body
    frames, joint positions, body velocities, contact pairs (objtype, name, reftype, refname).
    One definition for every scene compiler (ours and `coda.libero`'s)."""
    spec.add_sensor(
        name="tcp:pos",
        type=mujoco.mjtSensor.mjSENS_FRAMEPOS,
        objtype=mujoco.mjtObj.mjOBJ_SITE,
        objname="tcp",
    )
    spec.add_sensor(
        name="tcp:quat",
        type=mujoco.mjtSensor.mjSENS_FRAMEQUAT,
        objtype=mujoco.mjtObj.mjOBJ_SITE,
        objname="tcp",
    )
    for side in ("left", "right"):
        spec.add_sensor(
            name=f"{side}_finger",
            type=mujoco.mjtSensor.mjSENS_JOINTPOS,
            objtype=mujoco.mjtObj.mjOBJ_JOINT,
            objname=f"gripper/{side}_finger",
        )

    def body_frame_sensors(kinds: tuple[str, ...]) -> None:
        for name in bodies:
            for kind in kinds:
                spec.add_sensor(
                    name=f"{name}:{kind}",
                    type=getattr(mujoco.mjtSensor, f"mjSENS_FRAME{kind.upper()}"),
                    objtype=mujoco.mjtObj.mjOBJ_XBODY,
                    objname=name,
                )

    body_frame_sensors(("pos", "quat"))
    for jname in joints:
        spec.add_sensor(
            name=f"{jname}:q",
            type=mujoco.mjtSensor.mjSENS_JOINTPOS,
            objtype=mujoco.mjtObj.mjOBJ_JOINT,
            objname=jname,
        )
    body_frame_sensors(("linvel", "angvel"))  # world frame: ν's "at rest" (released in a bin)
    for k, (t1, n1, t2, n2) in enumerate(contacts):
        s = spec.add_sensor(
            name=f"contact{k}",
            type=mujoco.mjtSensor.mjSENS_CONTACT,
            objtype=t1,
            objname=n1,
            reftype=t2,
            refname=n2,
        )
        s.intprm = [1, 0, 1]  # data=found, reduce=none, num=1


def compile_scene(scene: Scene) -> CompiledScene:
    spec, tracked, joints, pairs, body_index = build_spec(scene)
    add_state_sensors(
        spec,
        bodies=list(body_index),
        joints=[j for j, _ in joints],
        contacts=[
            (mujoco.mjtObj.mjOBJ_GEOM, g1, mujoco.mjtObj.mjOBJ_GEOM, g2) for _, _, g1, g2 in pairs
        ],
    )
    model = spec.compile()

    layout = StateLayout(
        body_names=tuple(n for n, _, _ in tracked),
        joint_names=tuple(j for j, _ in joints),
        contact_pairs=tuple((a, b) for a, b, _, _ in pairs),
        nsensordata=int(model.nsensordata),
    )
    assert model.nsensordata == layout.expected_nsensordata
    sym = symbol_table(scene.task["roles"], body_index, [j for j, _ in joints])
    role_of = {v: k for k, v in scene.task["roles"].items()}

    consts = {
        "body_half": np.stack([h for _, h, _ in tracked]).astype(np.float32),
        "inner": np.stack([i for _, _, i in tracked]).astype(np.float32),
        "joint_range": np.array([r for _, r in joints], np.float32).reshape(len(joints), 2),
    }
    init_qpos = model.qpos0.copy()
    for jname, rng in joints:
        obj = jname.split("/")[0]
        frac = scene.task.get("initial", {}).get("joint_fraction", {})
        # keyed by role; an object name only counts when no role has that name (see symbol_table)
        by_name = frac.get(obj, 0.0) if obj not in scene.task["roles"] else 0.0
        f = frac.get(role_of[obj], by_name) if obj in role_of else by_name
        jid = model.joint(jname).id
        init_qpos[model.jnt_qposadr[jid]] = rng[0] + f * (rng[1] - rng[0])
    init_qpos[:6] = robot.HOME
    init_qpos[6:8] = robot.FINGER_OPEN
    family = tasks.get_family(scene.task["family"])
    success = family.success_fn(scene.task)
    if success is None:
        raise ValueError(f"task of family {family.name!r} has no success predicate ν")
    key = _structure_key(scene, model)
    return CompiledScene(
        scene,
        model,
        layout,
        sym,
        consts,
        init_qpos,
        robot.home_ctrl(),
        key,
        success,
        {o.name: body_index[o.name] for o in scene.objects},
    )


def symbol_table(
    roles: dict[str, str], body_index: dict[str, int], joint_names: Sequence[str]
) -> SymbolTable:
    """Roles (and object names) -> tracked body / joint indices; "<key>.<part>" for sub-bodies.

    Task roles take precedence over object names: the SDK names an object after the role it
    was added with, so after `resample(scene, "task")` swaps roles the object named "top" plays
    "base". ν, the planner and potentials read roles, so a role key must never be overwritten
    by a same-named object (that bound both "top" and "base" to one cube).
    """
    role_of = {v: k for k, v in roles.items()}
    bodies: dict[str, int] = {}
    jmap: dict[str, int] = {}
    for name, idx in body_index.items():  # object names first ...
        obj, _, part = name.partition("/")
        bodies[f"{obj}.{part}" if part else obj] = idx
    for j, jname in enumerate(joint_names):
        jmap[jname.split("/")[0]] = j
    for name, idx in body_index.items():  # ... then roles, which win a clash
        obj, _, part = name.partition("/")
        if obj in role_of:
            bodies[f"{role_of[obj]}.{part}" if part else role_of[obj]] = idx
    for j, jname in enumerate(joint_names):
        obj = jname.split("/")[0]
        if obj in role_of:
            jmap[role_of[obj]] = j
    return SymbolTable(tuple(sorted(bodies.items())), tuple(sorted(jmap.items())))


def role_binding(c: CompiledScene) -> dict[str, int]:
    """{role or "role.part": body index, "joint:<role>": joint index} for every task role:
    the part of the symbol table that ν, the planner and potentials read."""
    roles = set(c.scene.task["roles"])
    out = {k: i for k, i in c.sym.bodies if k.partition(".")[0] in roles}
    out.update({f"joint:{k}": j for k, j in c.sym.joints if k in roles})
    return out


def _structure_key(scene: Scene, model: mujoco.MjModel) -> str:
    h = hashlib.sha1()
    h.update(repr(scene.structure()).encode())
    for f in ("nq", "nv", "nu", "nbody", "ngeom", "nsensordata", "njnt"):
        h.update(f"{f}={getattr(model, f)};".encode())
    h.update(np.asarray(model.geom_type).tobytes())
    h.update(np.asarray(model.geom_contype).tobytes())
    return h.hexdigest()[:16]


def group_buckets(compiled: Sequence[CompiledScene]) -> list[list[CompiledScene]]:
    """Groups compiled variants by structure key, preserving first-seen order."""
    groups: dict[str, list[CompiledScene]] = {}
    for c in compiled:
        groups.setdefault(c.structure_key, []).append(c)
    return list(groups.values())
