"""LIBERO's own robot: robosuite's Franka Panda with its gripper, on LIBERO's mounts.

The model files (MJCF + meshes) are read from robosuite 1.4.0's MIT wheel, kept as data in
`<venv>/share/libero/` by `make setup` (robosuite is never installed or imported), and
assembled with MjSpec as robosuite and LIBERO assemble them:

  * arm: `robots/panda/robot.xml`, with robosuite's joint settings (`Panda`: damping 0.1 on
    joints 1-5 and 0.01 on 6-7; `RobotModel`: frictionloss 0.1 and armature 5 / (i + 1) where
    the XML sets none), torque motors ±80 / ±12 N m;
  * gripper: `grippers/panda_gripper.xml` on the arm's `right_hand` (position actuators,
    kp 1000, ±20 N);
  * mount: LIBERO's `MountedPanda` (table-top, kitchen and study scenes) stands on robosuite's
    `RethinkMount`; `OnTheGroundPanda` (living room, coffee table, floor) has none.

The base sits where LIBERO's problem class puts it (`BASES`, LIBERO's world frame), moved into
our frame like every position (`scene.to_ours`). Parts are named as our state sensors read
them, so ν, decoding and verification work unchanged: the grasp site `grip_site` is `tcp`, the
finger joints are `gripper/left_finger` / `gripper/right_finger`, the finger pads' collision
boxes `gripper/left_pad` / `gripper/right_pad`; the wrist camera keeps robosuite's name
`robot0_eye_in_hand`. Every other element carries robosuite's prefixes (`robot0_`,
`gripper0_`, `mount0_`). Physics options are robosuite's (`models/assets/base.xml`: 2 ms
steps, elliptic cones, impratio 20, air density and viscosity), MuJoCo's defaults otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import posixpath
import re
import zipfile

import mujoco
import numpy as np

from coda.libero import arena, data
from coda.libero import predicates as P
from coda.libero import scene as S

WHEEL_NAME = "robosuite-1.4.0-py3-none-any.whl"
ENV_WHEEL = "CODA_ROBOSUITE_WHEEL"  # override the wheel's path
_ASSETS = "robosuite/models/assets"

# LIBERO's initial arm pose (`MountedPanda.init_qpos`, also `OnTheGroundPanda`'s) and the
# gripper's (`PandaGripper.init_qpos`); LIBERO's stored initial states set both.
INIT_QPOS = (0.0, -0.161037389, 0.0, -2.44459747, 0.0, 2.2267522, math.pi / 4)
GRIPPER_INIT = (0.020833, -0.020833)
ARM_DAMPING = (0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01)  # `Panda` sets these
ARM_FRICTIONLOSS = 0.1  # `RobotModel`'s default where the XML sets none
MOUNT_TOP = 0.912  # m: a mounted base's height above the floor (RethinkMount: 0.922 - 0.01)
_TABLE_X = -0.16  # m: LIBERO's base x offset from the table's near edge


@dataclasses.dataclass(frozen=True)
class Base:
    pos: tuple[float, float, float]  # the arm's `base` body in LIBERO's world frame
    mounted: bool  # MountedPanda on the Rethink mount, else OnTheGroundPanda


# LIBERO's problem classes: `base_xpos_offset[...]` minus the robot's bottom offset
# (`set_base_xpos`); the mount lifts the base by MOUNT_TOP, a robot on the ground has none.
BASES = {
    "libero_tabletop_manipulation": Base((_TABLE_X - 0.5, 0.0, MOUNT_TOP), True),
    "libero_kitchen_tabletop_manipulation": Base((_TABLE_X - 0.5, 0.0, MOUNT_TOP), True),
    "libero_study_tabletop_manipulation": Base((-0.25 - 0.5, 0.0, MOUNT_TOP), True),
    "libero_living_room_tabletop_manipulation": Base((_TABLE_X - 0.35, 0.0, 0.42), False),
    "libero_coffee_table_manipulation": Base((_TABLE_X - 0.35, 0.0, 0.41), False),
    "libero_floor_manipulation": Base((-0.6, 0.0, 0.0), False),
}
ARM_JOINTS = tuple(f"robot0_joint{i}" for i in range(1, 8))
ARM_ACTUATORS = tuple(f"robot0_torq_j{i}" for i in range(1, 8))
FINGER_JOINTS = ("gripper/left_finger", "gripper/right_finger")  # as renamed (RENAME)
FINGER_ACTUATORS = ("gripper0_gripper_finger_joint1", "gripper0_gripper_finger_joint2")
GRIPPER_PREFIX = "gripper0_"  # the gripper's bodies (robosuite's prefix)
HAND_BODY = "robot0_right_hand"  # robosuite's `eef_name`: `robot0_eef_quat` is its orientation
RENAME = {  # robosuite's (prefixed) names -> the names our state sensors read
    "gripper0_grip_site": "tcp",
    "gripper0_finger_joint1": FINGER_JOINTS[0],
    "gripper0_finger_joint2": FINGER_JOINTS[1],
    "gripper0_finger1_pad_collision": "gripper/left_pad",
    "gripper0_finger2_pad_collision": "gripper/right_pad",
}


class RobosuiteDataMissing(data.LiberoDataMissing):
    """robosuite's wheel (the Panda's model files) is not in <venv>/share/libero."""


def wheel_path():
    return data.shared_wheel(
        WHEEL_NAME, ENV_WHEEL, "robosuite==1.4.0", RobosuiteDataMissing, "setup-libero"
    )


@functools.lru_cache(maxsize=1)
def _zip() -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path())


def _load(rel: str, visual: bool) -> mujoco.MjSpec:
    """An MJCF of the wheel's assets folder with the files it references; without `visual`
    the render-only geoms (no collisions) and the meshes only they use are dropped."""
    xml = data.read_member(_zip(), f"{_ASSETS}/{rel}")
    folder = posixpath.dirname(rel)
    assets = {
        f: _zip().read(posixpath.normpath(f"{_ASSETS}/{folder}/{f}"))
        for f in set(re.findall(r'file="([^"]+)"', xml))
    }
    # robosuite's models are in radians (its base.xml: <compiler angle="radian">)
    xml = re.sub(r"(<mujoco[^>]*>)", r'\1<compiler angle="radian"/>', xml, count=1)
    spec = mujoco.MjSpec.from_string(xml, assets=assets)
    spec.assets = assets  # carried to the scene's spec by `add_panda` (attach does not)
    if not visual:
        for g in list(spec.geoms):
            if not g.contype and not g.conaffinity:
                spec.delete(g)
        used = {g.meshname for g in spec.geoms}
        for m in list(spec.meshes):
            if m.name not in used:
                spec.delete(m)
    return spec


def _parts(visual: bool) -> tuple[mujoco.MjSpec, mujoco.MjSpec, mujoco.MjSpec]:
    """Fresh specs of the arm, gripper and mount (attaching consumes them)."""
    return tuple(
        _load(rel, visual)
        for rel in (
            "robots/panda/robot.xml",
            "grippers/panda_gripper.xml",
            "mounts/rethink_mount.xml",
        )
    )


def _robosuite_joint_defaults(arm: mujoco.MjSpec) -> None:
    for i, name in enumerate(f"joint{k}" for k in range(1, 8)):
        j = arm.joint(name)
        damping = np.array(j.damping, np.float64).reshape(-1)  # MuJoCo 4: [linear, ...]
        damping[0] = ARM_DAMPING[i]
        j.damping = damping
        if not j.frictionloss:
            j.frictionloss = ARM_FRICTIONLOSS
        if not j.armature:
            j.armature = 5.0 / (i + 1)


def _robosuite_options(spec: mujoco.MjSpec) -> None:
    """robosuite's `base.xml` options on MuJoCo's defaults (LIBERO's scenes set no others)."""
    default = mujoco.MjSpec().option
    opt = spec.option
    opt.timestep = default.timestep
    opt.integrator = default.integrator
    opt.iterations = default.iterations
    opt.ls_iterations = default.ls_iterations
    opt.impratio = 20.0
    opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    opt.density = 1.2
    opt.viscosity = 2e-5
    spec.visual.map.znear = 0.001


def add_panda(spec: mujoco.MjSpec, task, visual: bool = False) -> None:
    """LIBERO's Panda (arm, gripper, mount as the task's problem class has it) into `spec`."""
    problem = task.problem.problem
    if problem not in BASES:
        raise S.LiberoImportError(
            f"{task.name}: no Panda base for {problem!r}; known: {sorted(BASES)}"
        )
    base = BASES[problem]
    arm, grip, mount = _parts(visual)
    _robosuite_joint_defaults(arm)
    hand = arm.body("right_hand")
    hand.add_frame().attach_body(grip.body("right_gripper"), "gripper0_", "")
    if base.mounted:  # the mount's root sits 1 cm above the arm's base: robosuite's `add_mount`
        # replaces the root's own pos (0, 0, -0.922 in its file), kept, that put the pedestal
        # 0.922 m under LIBERO's, out of the agent view's frames
        root = mount.body("base")
        root.pos = [0.0, 0.0, 0.0]
        arm.body("base").add_frame(pos=[0, 0, 0.01]).attach_body(root, "mount0_", "")
    pos = S.to_ours(np.asarray(base.pos), task.workspace)
    spec.worldbody.add_frame(pos=list(pos)).attach_body(arm.body("base"), "robot0_", "")

    def renamed(name: str) -> str:  # robosuite names the gripper's elements gripper0_*
        for part in ("gripper0_", "mount0_"):  # and its mount's mount0_*
            name = name.replace("robot0_" + part, part)
        return RENAME.get(name, name)

    for kind in (spec.bodies, spec.joints, spec.sites, spec.geoms, spec.actuators):
        for el in kind:
            el.name = renamed(el.name)
    for act in spec.actuators:  # actuators name their joint: follow the renaming
        act.target = renamed(act.target)
    for sensor in list(spec.sensors):  # the gripper's force / torque sensors: not observed
        if sensor.name.startswith("robot0_gripper0_"):
            spec.delete(sensor)
    spec.camera("robot0_eye_in_hand").name = S.WRIST_CAMERA
    _robosuite_options(spec)
    if visual:  # LIBERO's floor, walls, backgrounds, table visuals and lights
        arena.add_arena(spec, task, S.to_ours(np.zeros(3), task.workspace))
    spec.assets = {**spec.assets, **arm.assets, **grip.assets, **mount.assets}


def to_libero(p: np.ndarray, ws: S.Workspace) -> np.ndarray:
    """Our positions [..., 3] -> LIBERO's world frame (the inverse of `scene.to_ours`)."""
    return np.asarray(p, float) + np.array([ws.offset[0] - S.ORIGIN_X, ws.offset[1], ws.top_z])


@dataclasses.dataclass(frozen=True)
class PandaTask:
    """A LIBERO task compiled with LIBERO's Panda: qpos and qvel are LIBERO's stored layout
    (arm, fingers, objects, fixtures) with positions in our frame."""

    suite: str
    task: S.LiberoTask
    built: S.Built
    model: mujoco.MjModel
    layout: object  # coda.sim.state.StateLayout
    consts: dict
    sym: object  # coda.sim.state.SymbolTable
    success: object  # ν: (SimState, SymbolTable) -> bool[...]

    def init_state(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(qpos [nq], qvel [nv]) of LIBERO's stored initial state `index`, in our frame."""
        m, st = self.model, self.task.states
        if not 0 <= index < len(st):
            raise ValueError(f"initial state {index} is out of range: valid 0..{len(st) - 1}")
        if st.shape[1] != 1 + m.nq + m.nv:
            raise S.LiberoImportError(
                f"{self.task.name}: stored states have {st.shape[1]} values, the Panda model "
                f"1 + nq {m.nq} + nv {m.nv}"
            )
        qpos = np.array(st[index, 1 : 1 + m.nq], np.float64)
        qpos[S.ROBOT_NQ :] = S.tail_to_ours(self.task, m, qpos[S.ROBOT_NQ :], S.ROBOT_NQ)
        return qpos, np.array(st[index, 1 + m.nq :], np.float64)


@functools.lru_cache(maxsize=16)
def compile_panda_task(suite: str, name: str, visual: bool = False) -> PandaTask:
    """A LIBERO task's scene with LIBERO's Panda (`visual`: its meshes and textures too)."""
    task = S.load_task(suite, name)
    built = S.build_spec(task, visual, add_robot=functools.partial(add_panda, visual=visual))
    model, layout = S.compile_built(built)
    d = mujoco.MjData(model)
    mujoco.mj_kinematics(model, d)
    consts, sym, _ = S.scene_constants(model, d, built)
    success = P.goal_predicate(task, model, built)
    return PandaTask(suite, task, built, model, layout, consts, sym, success)
