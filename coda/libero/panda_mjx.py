"""LIBERO's Panda as a batched, jitted JAX episode step on MJX (issue 31's accelerator path).

`PandaEnv` (`coda.libero.panda_env`) steps native MuJoCo per environment on the host, with
robosuite's OSC_POSE computed in batched numpy (`coda.libero.osc`). This module runs the same
controller and the same physics as one pure JAX function over a batch of worlds, so that a GPU
steps thousands of LIBERO episodes at once:

  * physics: the task's compiled Panda scene on MJX, by default its MuJoCo Warp backend
    (`impl="warp"`: LIBERO's scenes collide cylinders with meshes, which MJX's JAX backend does
    not implement); Warp also runs on a CPU (slowly: for tests and fidelity, not for speed);
  * controller: `osc_torques`, robosuite's OSC_POSE in `jax.numpy` (the formulas of
    `osc.arm_torques`), fed by the arm's joint-space inertia, site Jacobians and bias forces
    from a robot-only MJX model (`robot_spec`: the Panda on its mount and nothing else). Those
    quantities depend only on the arm's own bodies (objects are free bodies, not in its
    subtree), so they equal the scene's, and computing them on 12 bodies costs little beside
    the scene's collisions;
  * one control step (`PandaMJX.step`): the goal from the action at the first substep, then
    25 substeps of torques from the state each starts at, the gripper's command ramp and
    finger targets, `mjx.step` (robosuite's forward → controller → step order, as
    `osc.step`) with the sensors off (nothing reads them there); then the end state's forward
    pass with them on, whose sensors ν reads (success).

The first step after a reset uses robosuite's cached arm state at reset (`osc.OSCState.reset`)
for its goal and first torques, as `osc.step` does. Observations here are the end-of-step
end-effector pose (`PandaEnv(obs_timing="end")`); images are not rendered on this path.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from flax import struct
from mujoco import mjx

from coda.libero import osc
from coda.libero import panda as PD
from coda.libero import scene as S
from coda.sim.state import decode

IMPLS = ("warp", "jax")  # MJX backends of the scene (the robot-only model is always "jax")


@struct.dataclass
class Snapshot:
    """robosuite's cached arm state at reset (batch-free): what the first step uses."""

    mass: jax.Array  # [7, 7]
    jp: jax.Array  # [3, 7]
    jr: jax.Array  # [3, 7]
    q: jax.Array  # [7]
    qvel: jax.Array  # [7]
    bias: jax.Array  # [7]
    ee_pos: jax.Array  # [3]
    ee_ori: jax.Array  # [3, 3]


@struct.dataclass
class World:
    """What one world carries from step to step (a batch of them: leading axis B); the rest of
    MJX's data is recomputed by every step from these."""

    qpos: jax.Array  # [nq]
    qvel: jax.Array  # [nv]
    qacc_warmstart: jax.Array  # [nv] the constraint solver's warm start (as native MuJoCo's)
    time: jax.Array  # s
    eef_pos: jax.Array  # [3] the grasp site (our frame) at the end of the last step
    sensordata: jax.Array  # [nsensordata] the end state's sensors (ν reads them)


@struct.dataclass
class Control:
    """One world's controller state (a batch of them: leading axis B)."""

    goal_pos: jax.Array  # [3] world
    goal_ori: jax.Array  # [3, 3]
    gripper: jax.Array  # [2] robosuite's per-finger command in [-1, 1]
    stale: jax.Array  # bool: the next step is the first after reset (uses the Snapshot)


def axis_angle_matrix(v: jax.Array) -> jax.Array:
    """[3] axis-angle -> [3, 3] rotation (Rodrigues; identity at zero)."""
    theta = jnp.linalg.norm(v)
    k = jnp.where(theta > 1e-12, v / jnp.maximum(theta, 1e-12), 0.0)
    kx = jnp.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return jnp.eye(3) + jnp.sin(theta) * kx + (1.0 - jnp.cos(theta)) * (kx @ kx)


def orientation_error(desired: jax.Array, current: jax.Array) -> jax.Array:
    """[3] robosuite's ½ Σᵢ cᵢ × dᵢ over the rotation matrices' columns."""
    return 0.5 * jnp.sum(jnp.cross(current.T, desired.T), axis=0)


def osc_torques(
    cfg: osc.OSCConfig,
    goal_pos: jax.Array,
    goal_ori: jax.Array,
    initial_joint: jax.Array,
    mass: jax.Array,
    jp: jax.Array,
    jr: jax.Array,
    q: jax.Array,
    qvel: jax.Array,
    bias: jax.Array,
    ee_pos: jax.Array,
    ee_ori: jax.Array,
    limit: jax.Array,
) -> jax.Array:
    """[7] OSC_POSE torques of one world for one substep (`osc.arm_torques`, unbatched)."""
    force = cfg.kp * (goal_pos - ee_pos) - cfg.kd * (jp @ qvel)
    torque = cfg.kp * orientation_error(goal_ori, ee_ori) - cfg.kd * (jr @ qvel)
    m_inv = jnp.linalg.inv(mass)
    jac = jnp.concatenate([jp, jr], axis=0)  # [6, 7]

    def lam(j: jax.Array) -> jax.Array:
        return jnp.linalg.pinv(j @ m_inv @ j.T)

    wrench = jnp.concatenate([lam(jp) @ force, lam(jr) @ torque])
    tau = jac.T @ wrench + bias
    j_bar = m_inv @ jac.T @ lam(jac)
    null = jnp.eye(7) - j_bar @ jac
    kd_n = 2.0 * np.sqrt(cfg.nullspace_kp)
    pose = mass @ (cfg.nullspace_kp * (initial_joint - q) - kd_n * qvel)
    return jnp.clip(tau + null.T @ pose, limit[:, 0], limit[:, 1])


def arm_dynamics(rm: mjx.Model, qpos: jax.Array, qvel: jax.Array) -> mjx.Data:
    """The robot-only model's data at (qpos, qvel) with what the controller reads and nothing
    else: kinematics and the site, the composite inertia (`mjx.full_m`), `cdof` (`mjx.jac`),
    and the bias forces `qfrc_bias` (gravity, Coriolis: RNE without acceleration)."""
    rd = mjx.make_data(rm).replace(qpos=qpos, qvel=qvel)
    rd = mjx.com_pos(rm, mjx.kinematics(rm, rd))
    rd = mjx.crb(rm, rd)
    return mjx.rne(rm, mjx.com_vel(rm, rd))


def robot_spec(task: S.LiberoTask) -> mujoco.MjSpec:
    """The task's Panda (arm, gripper, mount where LIBERO has one) alone, at its base pose."""
    spec = mujoco.MjSpec()
    PD.add_panda(spec, task)
    for sensor in list(spec.sensors):
        spec.delete(sensor)
    for geom in spec.geoms:  # its dynamics only: no collisions (MJX would check their pairs)
        geom.contype, geom.conaffinity = 0, 0
    return spec


def scene_model(suite: str, name: str) -> mujoco.MjModel:
    """A copy of the task's compiled Panda scene as MJX takes it: `mjDSBL_AUTORESET` (native
    MuJoCo's reset of a diverged simulation; no stable step depends on it) cleared."""
    m = copy.copy(PD.compile_panda_task(suite, name).model)
    m.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_AUTORESET)
    return m


class PandaMJX:
    """A LIBERO task's Panda scene as jitted batched JAX steps (module doc).

    `reset(inits)` -> (worlds, control) at LIBERO's stored initial states (a batch of worlds);
    `step(worlds, control, actions [B, 7])` -> (worlds, control, success [B]) is jitted: one
    20 Hz step of every world."""

    def __init__(
        self,
        suite: str,
        name: str,
        impl: str = "warp",
        cfg: osc.OSCConfig = osc.OSCConfig(),
        max_contacts: int = 256,
        max_constraints: int = 1024,
    ):
        """`max_contacts` / `max_constraints`: Warp's buffers per world (a world that needs
        more drops contacts: Warp prints an overflow). Warp's contact buffer is one for the
        whole batch, so a batch of B worlds gets B · `max_contacts` (`template`)."""
        if impl not in IMPLS:
            raise ValueError(f"impl {impl!r}: valid {', '.join(IMPLS)}")
        self.pt = PD.compile_panda_task(suite, name)
        self.cfg, self.impl = cfg, impl
        self.model = scene_model(suite, name)
        robot = robot_spec(self.pt.task).compile()
        self.m = mjx.put_model(self.model, impl=impl)
        with osc.sensors_off(self.model):  # the substeps' model: ν reads only the end state's
            self.m_sub = mjx.put_model(self.model, impl=impl)
        self.rm = mjx.put_model(robot, impl="jax")
        self.idx = osc.ArmIndex.of(
            self.model, PD.ARM_JOINTS, "tcp", PD.ARM_ACTUATORS, PD.FINGER_ACTUATORS
        )
        self.ridx = osc.ArmIndex.of(robot, PD.ARM_JOINTS, "tcp", PD.ARM_ACTUATORS, [])
        self.rbody = int(robot.site_bodyid[self.ridx.site])
        # the robot model's qpos / qvel are the scene's first ones (the robot is built first)
        self.nq, self.nv = robot.nq, robot.nv
        if not (np.array_equal(self.ridx.qpos, self.idx.qpos) and robot.nv == S.ROBOT_NV):
            raise ValueError(f"{name}: the scene's robot dofs are not its first {robot.nv}")
        self.limit = jnp.asarray(self.model.actuator_ctrlrange[self.idx.motors])
        franges = self.model.actuator_ctrlrange[self.idx.fingers]  # the fingers' targets:
        self.fmid = jnp.asarray(franges.mean(axis=1))  # the middle + half-width · command
        self.fhalf = jnp.asarray(0.5 * (franges[:, 1] - franges[:, 0]))  # (`osc.finger_targets`)
        self.initial_joint = jnp.asarray(PD.INIT_QPOS)
        self.snapshot = self._snapshot()
        self.max_contacts, self.max_constraints = max_contacts, max_constraints
        self._templates: dict[int, mjx.Data] = {}
        layout, consts, sym, nu = self.pt.layout, self.pt.consts, self.pt.sym, self.pt.success
        self._nu = lambda sd: nu(decode(sd, layout, consts, jnp.zeros(sd.shape[:-1] + (6,))), sym)
        self._step_jit = jax.jit(self._step)

    def _snapshot(self) -> Snapshot:
        fingers = dict(zip(
            [int(self.model.jnt_qposadr[self.model.joint(j).id]) for j in PD.FINGER_JOINTS],
            PD.GRIPPER_INIT, strict=True,
        ))  # fmt: skip
        st = osc.reset_state(
            self.model, [mujoco.MjData(self.model)], self.idx, np.asarray(PD.INIT_QPOS), fingers
        )
        r = st.reset
        return Snapshot(
            mass=r["mass"][0], jp=r["jp"][0], jr=r["jr"][0], q=r["q"][0], qvel=r["qvel"][0],
            bias=r["bias"][0], ee_pos=r["ee_pos"][0], ee_ori=r["ee_ori"][0],
        )  # fmt: skip

    def reset(self, inits: Sequence[int]) -> tuple[World, Control]:
        rows = []
        for i in inits:
            d = mujoco.MjData(self.model)
            d.qpos[:], d.qvel[:] = self.pt.init_state(int(i))
            mujoco.mj_forward(self.model, d)
            rows.append((d.qpos, d.qvel, d.qacc_warmstart, d.time, d.site_xpos[self.idx.site],
                         d.sensordata))  # fmt: skip
        worlds = World(*(jnp.asarray(np.stack(x)) for x in zip(*rows, strict=True)))
        b, s = len(inits), self.snapshot
        control = Control(
            goal_pos=jnp.tile(jnp.asarray(s.ee_pos), (b, 1)),
            goal_ori=jnp.tile(jnp.asarray(s.ee_ori), (b, 1, 1)),
            gripper=jnp.zeros((b, 2)),
            stale=jnp.ones((b,), bool),
        )
        return worlds, control

    def _dynamics(self, qpos: jax.Array, qvel: jax.Array) -> Snapshot:
        """The arm's inertia block, site Jacobians, bias forces and site pose at one world's
        robot state (the robot-only model)."""
        rd = arm_dynamics(self.rm, qpos[: self.nq], qvel[: self.nv])
        dof = self.ridx.dof
        full = mjx.full_m(self.rm, rd)
        jp, jr = mjx.jac(self.rm, rd, rd.site_xpos[self.ridx.site], self.rbody)
        return Snapshot(
            mass=full[np.ix_(dof, dof)], jp=jp[dof].T, jr=jr[dof].T, q=qpos[self.idx.qpos],
            qvel=qvel[self.idx.dof], bias=rd.qfrc_bias[dof],
            ee_pos=rd.site_xpos[self.ridx.site], ee_ori=rd.site_xmat[self.ridx.site],
        )  # fmt: skip

    def _substep(self, action: jax.Array, carry, k: jax.Array):
        d, c = carry
        now = self._dynamics(d.qpos, d.qvel)
        first = (k == 0) & c.stale
        dyn = jax.tree.map(lambda a, b: jnp.where(first, a, b), self.snapshot, now)
        a = jnp.clip(action[:6], -1.0, 1.0)
        dpos, drot = a[:3] * self.cfg.max_delta_pos, a[3:] * self.cfg.max_delta_rot
        turned = axis_angle_matrix(drot) @ dyn.ee_ori
        goal_ori = jnp.where(jnp.any(drot != 0.0), turned, c.goal_ori)
        c = c.replace(
            goal_pos=jnp.where(k == 0, dyn.ee_pos + dpos, c.goal_pos),
            goal_ori=jnp.where(k == 0, goal_ori, c.goal_ori),
        )
        tau = osc_torques(
            self.cfg, c.goal_pos, c.goal_ori, self.initial_joint, dyn.mass, dyn.jp, dyn.jr,
            dyn.q, dyn.qvel, dyn.bias, dyn.ee_pos, dyn.ee_ori, self.limit,
        )  # fmt: skip
        sign = jnp.sign(action[6])
        grip = jnp.clip(c.gripper + jnp.array([-1.0, 1.0]) * self.cfg.gripper_speed * sign, -1, 1)
        fingers = self.fmid + self.fhalf * grip
        ctrl = d.ctrl.at[self.idx.motors].set(tau).at[self.idx.fingers].set(fingers)
        d = mjx.step(self.m_sub, d.replace(ctrl=ctrl))
        return (d, c.replace(gripper=grip)), None

    def template(self, worlds: int) -> mjx.Data:
        """The MJX data a batch of `worlds` starts each step from (its fields but the state's
        are shared: vmapped over, not stacked), made once per batch size on the host and passed
        to the jitted step (not traced into it: Warp's buffers would be constants). Warp's
        contact buffer is the batch's, not a world's: `worlds` · `max_contacts` contacts; its
        constraint rows are per world."""
        if worlds not in self._templates:
            extra = {}
            if self.impl == "warp":
                extra = {"naconmax": worlds * self.max_contacts, "njmax": self.max_constraints}
            self._templates[worlds] = mjx.make_data(self.model, impl=self.impl, **extra)
        return self._templates[worlds]

    def step(
        self, worlds: World, control: Control, actions: jax.Array
    ) -> tuple[World, Control, jax.Array]:
        """One 20 Hz step of every world (jitted per batch size): (worlds, control, success)."""
        return self._step_jit(worlds, control, actions, self.template(actions.shape[0]))

    def _one(
        self, w: World, c: Control, action: jax.Array, template: mjx.Data
    ) -> tuple[World, Control]:
        d = template.replace(qpos=w.qpos, qvel=w.qvel, qacc_warmstart=w.qacc_warmstart, time=w.time)
        ks = jnp.arange(self.cfg.substeps)
        (d, c), _ = jax.lax.scan(functools.partial(self._substep, action), (d, c), ks)
        d = mjx.forward(self.m, d)  # the end state's sensors (ν) and kinematics
        w = World(d.qpos, d.qvel, d.qacc_warmstart, d.time, d.site_xpos[self.idx.site],
                  d.sensordata)  # fmt: skip
        return w, c.replace(stale=jnp.zeros((), bool))

    def _step(self, worlds: World, control: Control, actions: jax.Array, template: mjx.Data):
        worlds, control = jax.vmap(self._one, in_axes=(0, 0, 0, None))(
            worlds, control, actions, template
        )
        return worlds, control, self._nu(worlds.sensordata.astype(jnp.float32))
