"""A LIBERO task (BDDL + fixed initial states) -> our `Scene` -> `CompiledScene`.

Frame: LIBERO's world has the workspace (table) centre at the problem class's workspace offset
and the table top at `top_z`; ours has the table top at z = 0 and the gripper's home at x = 0.3.
We map LIBERO -> ours by p - (offset_x, offset_y, top_z) + (ORIGIN_X, 0, 0): LIBERO's table
centre lands at x = 0.5 (our table's default centre) and LIBERO's Panda home (about 0.2 m in
front of the table centre) lands near our gripper's home. The table is a box of LIBERO's size.

What comes from where (σ: layout, α: attributes, τ: task):
  τ  `:goal` atoms (AND), `:language` as the instruction, `:obj_of_interest` as roles.
  σ  movable objects: pose from LIBERO's initial state (qpos, one of 50 per task); fixtures:
     the centre and mean yaw of their `:regions` placement range, resting on the table (LIBERO
     samples them inside that range at reset; the ranges are 2 cm wide); fixture joints
     (drawers, doors, knobs) from the initial state.
  α  the object categories' real LIBERO assets (`assets.py`): collision boxes, LIBERO's masses.
The qpos layout of LIBERO's initial states is robot (7 arm + 2 fingers), then each object's free
joint in BDDL order, then the fixtures' joints; ours is gripper (6 + 2), then the same, so the
tail maps one to one (positions moved into our frame).

Compiled scenes carry the same sensors in the same order as `coda.sim.compile` (so `decode`,
`Bucket` and the native backend work unchanged); contact sensors match bodies (MuJoCo's body
matching), one per pair of tracked bodies that ν or verification read, which MJX does not
support yet: LIBERO scenes run on the native backend.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import math

import mujoco
import numpy as np

from coda import lifetime
from coda.libero import assets, bddl, data, suites
from coda.libero import predicates as P
from coda.libero.cameras import (  # noqa: F401  (re-exported: scene.AGENTVIEW_POSE etc.)
    AGENTVIEW_CAMERA,
    AGENTVIEW_FOVY,
    AGENTVIEW_POSE,
    WRIST_CAMERA,
    WRIST_FOVY,
    WRIST_POS,
    WRIST_QUAT,
)
from coda.libero.geoms import body_half, geom_half_extents
from coda.libero.potential import goal_symbols
from coda.libero.settle import (  # noqa: F401  (re-exported: scene.SETTLE_S etc.)
    SETTLE_MAX_S,
    SETTLE_S,
    settled_qpos,
)
from coda.sim import robot
from coda.sim.compile import (
    LS_ITERATIONS,
    TABLE_GEOM,
    CompiledScene,
    _look_quat,
    add_state_sensors,
)
from coda.sim.scene import ObjectSpec, Scene, check_table
from coda.sim.state import FLOOR, LEFT, N_FIXED_ENTITIES, RIGHT, StateLayout, SymbolTable

ORIGIN_X = 0.5  # our x of LIBERO's workspace centre


@dataclasses.dataclass(frozen=True)
class Workspace:
    name: str  # the workspace fixture / region prefix in BDDL
    size: tuple[float, float, float]  # LIBERO's table full size (x, y, thickness), m
    offset: tuple[float, float]  # LIBERO's workspace offset (x, y): region coordinates' origin
    top_z: float  # LIBERO's world z of the support surface (its table's / floor's collision top)
    region_z: float  # LIBERO's world z of its workspace regions' sites (TargetZone centres)
    offset_z: float  # LIBERO's workspace offset z: its placement samplers' reference height
    fixture_dz: float  # the problem class's `z_offset` for fixtures (0.01 - table thickness)


# From LIBERO's problem classes (table_full_size, *_table_offset); the heights as LIBERO itself
# builds them (measured in the reference environment, benchmarks/libero_reference): the
# support surface is not always the workspace offset's z (living room: the table mesh's top at
# 0.437, offset 0.41; study: 0.885, offset 0.867; floor: 0, offset -0.035), and the region
# sites sit at the offset's z less TargetZone's 5 mm on the main table, at the offset's z
# elsewhere (kitchen 0.875 under a 0.90 top; floor 0.02).
WORKSPACES = {
    "libero_tabletop_manipulation": Workspace(
        "main_table", (1.0, 1.2, 0.05), (0.0, 0.0), 0.90, 0.895, 0.90, -0.04
    ),
    "libero_kitchen_tabletop_manipulation": Workspace(
        "kitchen_table", (1.0, 1.2, 0.05), (0.0, 0.0), 0.90, 0.875, 0.90, -0.04
    ),
    "libero_living_room_tabletop_manipulation": Workspace(
        "living_room_table", (0.70, 1.6, 0.024), (0.0, 0.0), 0.437, 0.41, 0.41, -0.014
    ),
    "libero_study_tabletop_manipulation": Workspace(
        "study_table", (1.0, 1.2, 0.05), (-0.2, 0.0), 0.885, 0.867, 0.867, -0.04
    ),
    "libero_floor_manipulation": Workspace(
        "floor", (2.0, 2.0, 0.05), (0.0, 0.0), 0.0, 0.02, -0.035, -0.025
    ),
}
REGION_HALF_Z = 0.007  # m: TargetZone's zone_height
# Solver iterations for LIBERO scenes (ours use compile.SOLVER_ITERATIONS = 8): LIBERO's light
# objects (butter 5 g, soup 26 g) resting on each other in the free basket kept 1.5 cm
# penetrations after 8 iterations, and the solver blew up (libero_10_task's three basket
# tasks; blow-ups before and after, and the wall-time cost, in
# benchmarks/results/libero_planner_summary.md; the solver stops at its tolerance, so the cap
# costs only where it is needed)
LIBERO_SOLVER_ITERATIONS = 50
ROBOT_NQ, ROBOT_NV = 9, 9  # LIBERO's mounted Panda: 7 arm joints + 2 finger joints
GRIPPER_NQ = 8  # ours: x, y, z, yaw, pitch, roll + 2 fingers


class LiberoImportError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class LiberoTask:
    suite: str
    name: str
    problem: bddl.Problem
    states: np.ndarray  # [50, 1 + nq + nv] LIBERO's fixed initial states

    @property
    def workspace(self) -> Workspace:
        if self.problem.problem not in WORKSPACES:
            raise LiberoImportError(
                f"{self.name}: problem class {self.problem.problem!r} not supported; "
                f"known: {sorted(WORKSPACES)}"
            )
        return WORKSPACES[self.problem.problem]

    @property
    def fixtures(self) -> list[tuple[str, str]]:
        """(instance, category) of the fixtures that are assets (not the workspace)."""
        return [(n, c) for n, c in self.problem.fixtures if c not in assets.WORKSPACES]

    @property
    def n_init(self) -> int:
        return int(self.states.shape[0])


PLUS_PREFIX = "plus:"  # "plus:<suite>": LIBERO-Plus's own tasks of a suite (coda.libero.plus)
# suite prefix -> "module:function(suite, name) -> LiberoTask" of task sets built on this module
# ("edit:<suite>": source tasks with factor edits, `coda.libero.program`)
# (looked up by name, as coda.registries does, so this module does not import them)
TASK_SOURCES = {PLUS_PREFIX: "coda.libero.plus:load", "edit:": "coda.libero.program:load"}


@functools.lru_cache(maxsize=256)
def load_task(suite: str, name: str) -> LiberoTask:
    """A LIBERO task by suite (one of `suites.all_suites()`, LIBERO-PRO's perturbed ones too,
    or "plus:<suite>" for LIBERO-Plus's benchmark tasks) and task name: the wheel's BDDL file
    and initial states."""
    for prefix, target in TASK_SOURCES.items():
        if suite.startswith(prefix):
            module, fn = target.split(":")
            return getattr(importlib.import_module(module), fn)(suite[len(prefix) :], name)
    names = suites.tasks(suite)
    if name not in names:
        raise KeyError(f"no task {name!r} in {suite}; tasks: {names}")
    problem = bddl.parse(data.bddl_text(suite, name))
    return LiberoTask(suite, name, problem, data.init_states(suite, name))


# ----------------------------------------------------------------------------- frames


def to_ours(p: np.ndarray, ws: Workspace) -> np.ndarray:
    """LIBERO world positions [..., 3] -> ours."""
    return np.asarray(p, float) - np.array([ws.offset[0] - ORIGIN_X, ws.offset[1], ws.top_z])


def region_to_ours(x: float, y: float, ws: Workspace) -> tuple[float, float]:
    """A point of a workspace region (coordinates relative to the workspace offset) -> ours."""
    return x + ORIGIN_X, y


def table_of(ws: Workspace) -> dict[str, float]:
    return check_table(
        {
            "x": ORIGIN_X,
            "y": 0.0,
            "half_x": ws.size[0] / 2,
            "half_y": ws.size[1] / 2,
            "height": min(max(ws.top_z, 0.2), 1.2),  # the floor workspace: nothing below
        }
    )


def _yaw_quat(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


@functools.lru_cache(maxsize=64)
def bottom_offset(category: str) -> float:
    """z of the lowest collision point of an asset in its root frame (at zero joint angles)."""
    spec = assets.load(category)
    m = spec.compile()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    lo = math.inf
    for g in range(m.ngeom):
        if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0:
            continue
        ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
        lo = min(lo, float(d.geom_xpos[g][2] - ext[2]))
    root = m.body("object").id
    return lo - float(d.xpos[root][2])


def bottom_site(category: str) -> float | None:
    """z of an asset's `bottom_site` in its root frame (robosuite's `bottom_offset`), if any."""
    for s in assets.load(category).sites:
        if s.name.endswith("bottom_site"):
            return float(s.pos[2])
    return None


def fixture_pose(
    task: LiberoTask, name: str, category: str, liberos_height: bool = False
) -> dict[str, float]:
    """A fixture's pose in our frame: the centre and mean yaw of the workspace region its :init
    places it on (LIBERO samples inside it per seed), resting on the table top; with
    `liberos_height` (LIBERO's Panda) at the height LIBERO's placement sampler gives it
    (workspace offset z + the class's fixture z offset - the asset's bottom site: equal to
    LIBERO's on every fixture of the fidelity benchmark; 1.5 cm below resting for the stove,
    2 cm above for the microwave). Our gripper's scenes keep the resting height: its scripted
    planner chose another, failing, strategy for LIBERO-PRO's "put the plate on the stove"
    with the stove at LIBERO's height."""
    ws = task.workspace
    region = None
    for atom in task.problem.init:
        if len(atom) == 3 and atom[0] == "on" and atom[1] == name:
            region = task.problem.regions.get(atom[2])
    if region is None or not region.ranges:
        raise LiberoImportError(f"{task.name}: fixture {name} has no placement region in :init")
    x0, y0, x1, y1 = region.ranges[0]
    x, y = region_to_ours((x0 + x1) / 2, (y0 + y1) / 2, ws)
    yaw = (region.yaw[0] + region.yaw[1]) / 2
    site = bottom_site(category) if liberos_height else None
    z = -bottom_offset(category) if site is None else ws.offset_z + ws.fixture_dz - site - ws.top_z
    return {"x": x, "y": y, "z": z, "yaw": yaw}


# ----------------------------------------------------------------------------- scene


def _nq_libero(task: LiberoTask) -> int:
    width = task.states.shape[1] - 1
    n_obj = len(task.problem.objects)
    if (width + n_obj) % 2:
        raise LiberoImportError(f"{task.name}: initial-state width {width + 1} is not 1 + nq + nv")
    return (width + n_obj) // 2


def scene_of(task: LiberoTask, index: int, liberos_fixtures: bool = False) -> Scene:
    """Our `Scene` of a task with LIBERO's initial state `index` as the layout."""
    if not 0 <= index < task.n_init:
        raise IndexError(f"{task.name}: initial state {index} outside [0, {task.n_init})")
    ws = task.workspace
    qpos = task.states[index, 1 : 1 + _nq_libero(task)]
    objects, layout, attrs = [], {}, {}
    for k, (name, cat) in enumerate(task.problem.objects):
        q = qpos[ROBOT_NQ + 7 * k : ROBOT_NQ + 7 * k + 7]
        p = to_ours(q[:3], ws)
        quat = q[3:7] / np.linalg.norm(q[3:7])
        yaw = math.atan2(
            2 * (quat[0] * quat[3] + quat[1] * quat[2]), 1 - 2 * (quat[2] ** 2 + quat[3] ** 2)
        )
        layout[name] = {"x": p[0], "y": p[1], "z": p[2], "yaw": yaw}
        layout[name].update({f"q{c}": float(v) for c, v in zip("wxyz", quat, strict=True)})
        layout[name] = {k2: float(v) for k2, v in layout[name].items()}
        objects.append(ObjectSpec(name, f"libero:{cat}", "default", name))
        attrs[name] = {"libero_category": cat, "fixture": False}
    for name, cat in task.fixtures:
        pose = fixture_pose(task, name, cat, liberos_fixtures)
        layout[name] = {k2: float(v) for k2, v in pose.items()}
        objects.append(ObjectSpec(name, f"libero:{cat}", "default", name))
        attrs[name] = {"libero_category": cat, "fixture": True}
    joint_q = [float(v) for v in qpos[ROBOT_NQ + 7 * len(task.problem.objects) :]]
    goal = [list(a) for a in task.problem.goal]
    roles = {n: n for n in task.problem.obj_of_interest if n in layout}
    return Scene(
        objects=objects,
        task={
            "family": "libero",
            "instruction": task.problem.language,
            "roles": roles,
            "params": {"suite": task.suite, "task": task.name, "goal": str(goal)},
            "initial": {"init_index": int(index), "fixture_joint_q": joint_q},
            "terminal": {"goal": goal},
        },
        layout=layout,
        attributes=attrs,
        seed=int(index),
        table=table_of(ws),
    )


# ----------------------------------------------------------------------------- compile


@dataclasses.dataclass(frozen=True)
class Built:
    spec: mujoco.MjSpec
    tracked: tuple[str, ...]  # tracked body names (objects' roots and their sub-bodies)
    owner: tuple[str, ...]  # object of each tracked body
    joints: tuple[str, ...]  # fixture / object joints, in qpos order
    pairs: tuple[tuple[int, int, str, str, int], ...]  # (e1, e2, name1, name2, objtype1)


def _base_spec(task: LiberoTask, scene0: Scene, add_robot=None) -> mujoco.MjSpec:
    """The spec's options, table, floor, light, front camera, robot (our gripper, else
    `add_robot(spec, task)`, which also adds its wrist camera), LIBERO's cameras and the
    workspace regions (as sites of the table: LIBERO's TargetZones, for rendering / lookup)."""
    ws = task.workspace
    spec = mujoco.MjSpec()
    spec.modelname = f"libero_{task.name}"[:60]
    spec.compiler.degree = False
    opt = spec.option
    opt.timestep = robot.TIMESTEP
    opt.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    opt.iterations = LIBERO_SOLVER_ITERATIONS
    opt.ls_iterations = LS_ITERATIONS
    opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_AUTORESET
    spec.visual.global_.offwidth = 640
    spec.visual.global_.offheight = 480
    wb = spec.worldbody
    table = scene0.table
    top = wb.add_body(name="table", pos=[table["x"], table["y"], -table["height"] / 2])
    g = top.add_geom(
        name=TABLE_GEOM,
        type=mujoco.mjtGeom.mjGEOM_BOX,
        size=[table["half_x"], table["half_y"], table["height"] / 2],
    )
    g.rgba = [0.82, 0.78, 0.72, 1]
    g.friction = [0.6, 0.005, 0.0001]  # LIBERO's table friction
    floor = wb.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[3, 3, 0.1])
    floor.pos = [table["x"], table["y"], -table["height"]]
    light = wb.add_light(name="top", pos=[0.4, 0, 1.5])
    light.dir = [0, 0, -1]
    eye, at = np.array([-0.15, 0.0, 0.75]), np.array([0.5, 0.0, 0.05])
    cam = wb.add_camera(name="front", pos=list(eye))
    cam.quat = list(_look_quat(eye, at))
    if add_robot is None:
        robot.add_gripper(spec)
    else:
        add_robot(spec, task)
    add_cameras(spec, task, wrist=add_robot is None)
    for rname, region in task.problem.regions.items():
        if region.target == ws.name and region.ranges:
            x0, y0, x1, y1 = region.ranges[0]
            x, y = region_to_ours((x0 + x1) / 2, (y0 + y1) / 2, ws)
            s = wb.add_site(name=rname, pos=[x, y, ws.region_z - ws.top_z])
            s.type = mujoco.mjtGeom.mjGEOM_BOX
            s.size = [(x1 - x0) / 2, (y1 - y0) / 2, REGION_HALF_Z]
            s.rgba = [0, 0, 1, 0]
    return spec


def _attach_objects(spec: mujoco.MjSpec, task: LiberoTask, scene0: Scene, visual: bool):
    """(names of the objects then fixtures, the movable ones): their assets attached at the
    scene's layout, movable objects on free joints."""
    wb = spec.worldbody
    movable: list[str] = []
    items = [(n, c, False) for n, c in task.problem.objects] + [
        (n, c, True) for n, c in task.fixtures
    ]
    for name, cat, fixed in items:
        child = assets.load(cat, visual)
        frame = wb.add_frame()
        body = frame.attach_body(child.body("object"), f"{name}_", "")
        body.name = name
        pose = scene0.layout[name]
        body.pos = [pose["x"], pose["y"], pose["z"]]
        body.quat = _yaw_quat(pose["yaw"]) if fixed else [pose[f"q{c}"] for c in "wxyz"]
        if not fixed:
            body.add_freejoint(name=f"{name}/free")
            movable.append(name)
    return [n for n, _, _ in items], movable


def _contact_pairs(spec: mujoco.MjSpec, tracked: list[str], owner: list[str], movable: list):
    """(e1, e2, name1, name2, objtype1) contact sensors: each finger pad with every solid
    tracked body, each movable object's solid bodies with the table and with every other
    object's (once per pair)."""
    ent = {b: N_FIXED_ENTITIES + i for i, b in enumerate(tracked)}
    geom_bodies = set()
    m0 = spec.compile()
    for gi in range(m0.ngeom):
        if m0.geom_contype[gi] or m0.geom_conaffinity[gi]:
            geom_bodies.add(m0.body(m0.geom_bodyid[gi]).name)
    solid = [b for b in tracked if b in geom_bodies]
    pairs: list[tuple[int, int, str, str, int]] = []
    body_t = int(mujoco.mjtObj.mjOBJ_BODY)
    geom_t = int(mujoco.mjtObj.mjOBJ_GEOM)
    for pad, e_pad in (("gripper/left_pad", LEFT), ("gripper/right_pad", RIGHT)):
        pairs += [(e_pad, ent[b], pad, b, geom_t) for b in solid]
    own = dict(zip(tracked, owner, strict=True))
    for i, a in enumerate(solid):
        if own[a] not in movable:
            continue
        pairs.append((ent[a], FLOOR, a, TABLE_GEOM, body_t))
        for b in solid:
            if own[b] == own[a] or (own[b] in movable and solid.index(b) < i):
                continue
            pairs.append((ent[a], ent[b], a, b, body_t))
    return pairs


def build_spec(task: LiberoTask, visual: bool = False, add_robot=None) -> Built:
    """MjSpec of a task's scene (layout-independent: free bodies are posed by qpos); the robot
    is our gripper unless `add_robot` (`coda.libero.panda.add_panda`) adds another one, which
    names its parts as the state sensors read them (site `tcp`, joints `gripper/*_finger`,
    geoms `gripper/*_pad`), and whose scene has fixtures at LIBERO's heights."""
    scene0 = scene_of(task, 0, liberos_fixtures=add_robot is not None)
    spec = _base_spec(task, scene0, add_robot)
    names, movable = _attach_objects(spec, task, scene0, visual)
    # rename sub-bodies "<name>_<sub>" -> "<name>/<sub>" (our "object/part" convention)
    tracked: list[str] = []
    owner: list[str] = []
    for b in spec.bodies:
        for n in names:
            if b.name == n or b.name.startswith(n + "_"):
                if b.name != n:
                    b.name = n + "/" + b.name[len(n) + 1 :]
                tracked.append(b.name)
                owner.append(n)
                break
    joints = tuple(
        j.name for j in spec.joints if j.name and any(j.name.startswith(n + "_") for n in names)
    )
    pairs = _contact_pairs(spec, tracked, owner, movable)
    return Built(spec, tuple(tracked), tuple(owner), joints, tuple(pairs))


def add_cameras(spec: mujoco.MjSpec, task: LiberoTask, wrist: bool = True) -> None:
    """LIBERO's observation cameras: the agent view (world) and, with `wrist`, the wrist view on
    our gripper (LIBERO's Panda brings its own `eye_in_hand`)."""
    if task.problem.problem not in AGENTVIEW_POSE:
        raise LiberoImportError(
            f"{task.name}: no agentview pose for {task.problem.problem!r}; "
            f"known: {sorted(AGENTVIEW_POSE)}"
        )
    pos, quat = AGENTVIEW_POSE[task.problem.problem]
    cam = spec.worldbody.add_camera(name=AGENTVIEW_CAMERA, pos=list(to_ours(pos, task.workspace)))
    cam.quat = list(quat)
    cam.fovy = AGENTVIEW_FOVY
    if wrist:
        cam = spec.body("gripper").add_camera(name=WRIST_CAMERA, pos=list(WRIST_POS))
        cam.quat = list(WRIST_QUAT)
        cam.fovy = WRIST_FOVY


@functools.lru_cache(maxsize=64)
def visual_model(suite: str, name: str) -> mujoco.MjModel:
    """The task's model with LIBERO's visual meshes and textures, sites hidden (for rendering;
    shared, do not step it): same bodies, joints and qpos layout as `compile_task`'s model."""
    model = _compiled_model(suite, name, True)[2]
    physics = _compiled_model(suite, name, False)[2]
    if model.nq != physics.nq:  # meshes are geoms only; a mismatch would mis-pose the replay
        raise LiberoImportError(f"{name}: visual model nq {model.nq} != physics nq {physics.nq}")
    model.site_rgba[:, 3] = 0.0  # LIBERO's observations show no sites (our tcp marker)
    return model


@functools.lru_cache(maxsize=128)  # a LIBERO-seeded run's suites span up to 50 tasks x 2 kinds
def _compiled_model(suite: str, name: str, visual: bool):
    task = load_task(suite, name)
    built = build_spec(task, visual)
    return (task, built, *compile_built(built))


def compile_built(built: Built) -> tuple[mujoco.MjModel, StateLayout]:
    """(model, state layout) of a built scene with the state sensors `state.decode` reads."""
    spec = built.spec
    add_state_sensors(
        spec,
        bodies=built.tracked,
        joints=built.joints,
        contacts=[
            (
                mujoco.mjtObj(t1),
                n1,
                mujoco.mjtObj.mjOBJ_GEOM if n2 == TABLE_GEOM else mujoco.mjtObj.mjOBJ_BODY,
                n2,
            )
            for _, _, n1, n2, t1 in built.pairs
        ],
    )
    model = spec.compile()
    layout = StateLayout(
        body_names=built.tracked,
        joint_names=built.joints,
        contact_pairs=tuple((a, b) for a, b, _, _, _ in built.pairs),
        nsensordata=int(model.nsensordata),
    )
    assert model.nsensordata == layout.expected_nsensordata
    return model, layout


def tail_to_ours(task: LiberoTask, model: mujoco.MjModel, tail: np.ndarray, robot_nq: int):
    """LIBERO's object / fixture qpos (after its robot's) in our frame: free joints moved."""
    tail = np.array(tail, np.float64)
    for k, (obj, _) in enumerate(task.problem.objects):
        tail[7 * k : 7 * k + 3] = to_ours(tail[7 * k : 7 * k + 3], task.workspace)
        jid = model.joint(f"{obj}/free").id
        assert model.jnt_qposadr[jid] == robot_nq + 7 * k, "object free joints out of order"
    return tail


def scene_constants(model: mujoco.MjModel, d: mujoco.MjData, built: Built):
    """(decode's per-variant constants, symbol table, tracked body -> index) at `d`'s pose."""
    half = np.stack([body_half(model, d, model.body(b).id) for b in built.tracked])
    jr = np.array([model.jnt_range[model.joint(j).id] for j in built.joints], np.float32)
    consts = {
        "body_half": half.astype(np.float32),
        "inner": np.zeros((len(built.tracked), 4), np.float32),
        "joint_range": jr.reshape(len(built.joints), 2),
    }
    body_index = {b: i for i, b in enumerate(built.tracked)}
    bodies = {b.replace("/", "."): i for b, i in body_index.items()}
    jmap = {j: i for i, j in enumerate(built.joints)}
    sym = SymbolTable(tuple(sorted(bodies.items())), tuple(sorted(jmap.items())))
    return consts, sym, body_index


def compile_task(
    suite: str, name: str, index: int = 0, visual: bool = False, settle: bool = True
) -> CompiledScene:
    """A LIBERO task compiled with initial state `index` (0..49) as its layout.

    With `settle` (LIBERO's protocol) the layout is the state after SETTLE_S of passive
    physics from LIBERO's stored state; without, the stored state itself (objects mid-air).
    The MjModel is shared by all 50 initial states of a task (one bucket); only `init_qpos`
    differs. ν is `predicates.goal_predicate` of the task's goal."""
    task, built, model, layout = _compiled_model(suite, name, visual)
    scene = scene_of(task, index)
    nq_l = _nq_libero(task)
    q_l = task.states[index, 1 : 1 + nq_l]
    if model.nq - GRIPPER_NQ != nq_l - ROBOT_NQ:
        raise LiberoImportError(
            f"{name}: our model has {model.nq - GRIPPER_NQ} object/fixture qpos, LIBERO's "
            f"initial states {nq_l - ROBOT_NQ}"
        )
    qpos = model.qpos0.copy()
    qpos[:6] = robot.HOME
    qpos[6:8] = robot.FINGER_OPEN
    qpos[GRIPPER_NQ:] = tail_to_ours(task, model, q_l[ROBOT_NQ:], GRIPPER_NQ)
    d = mujoco.MjData(model)
    d.qpos[:] = qpos
    if settle:
        qpos = settled_qpos(model, qpos)
        d.qpos[:] = qpos
    mujoco.mj_kinematics(model, d)
    consts, sym, body_index = scene_constants(model, d, built)
    success = P.goal_predicate(task, model, built)
    sym = goal_symbols(sym, success.keywords["atoms"], model, built)  # Φ's roles (potential)
    h = hashlib.sha1(f"libero:{suite}/{name}:{visual}:{model.nsensordata}".encode())
    return CompiledScene(
        scene,
        model,
        layout,
        sym,
        consts,
        qpos,
        robot.home_ctrl(),
        h.hexdigest()[:16],
        success,
        {n: body_index[n] for n, _ in task.problem.objects + tuple(task.fixtures)},
        # image observations show LIBERO's meshes and textures (loaded on first use)
        None if visual else functools.partial(visual_model, suite, name),
    )


# compiled MuJoCo models (LIBERO's meshes and textures): emptied when a run ends (coda.lifetime)
lifetime.register("libero.compiled_models", _compiled_model.cache_clear)
lifetime.register("libero.visual_models", visual_model.cache_clear)
