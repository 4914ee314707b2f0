"""robosuite's OSC_POSE controller and Panda gripper command, as LIBERO drives its robot.

An action is 7-D: a delta pose in [-1, 1]^6 (position, axis-angle rotation) scaled to
(±0.05 m, ±0.5 rad), and the gripper command (-1 open, +1 close). Once per policy step (20 Hz)
the goal is set from the current grasp site pose: position = current + delta, orientation =
R(delta) · current (only when the rotation is non-zero). Every physics substep (25 of 2 ms) the
arm gets operational-space torques

    τ = Jᵀ [Λ_pos (kp e_pos − kd v); Λ_ori (kp e_ori − kd ω)] + bias + Nᵀ M (kp_n (q₀ − q) − kd_n q̇)

with Λ = pinv(J M⁻¹ Jᵀ) per block (uncoupled position / orientation), kp 150, kd = 2√kp, the
nullspace pulling towards the joints at reset (kp_n 10), clipped to the motors' range; the
gripper's internal command moves 0.01 per substep towards ±1 and sets the fingers' position
targets (robosuite `controllers/osc.py`, `utils/control_utils.py`, `models/grippers/
panda_gripper.py`, `controllers/config/osc_pose.json`).

The math is batched numpy over environments (`OSCState` holds each one's goal); the MuJoCo
calls that feed it (`mj_step1`, Jacobians, the mass matrix) run per environment on the host.
"""

from __future__ import annotations

import contextlib
import dataclasses

import mujoco
import numpy as np


@dataclasses.dataclass(frozen=True)
class OSCConfig:
    kp: float = 150.0  # stiffness of position and orientation errors
    damping_ratio: float = 1.0  # kd = 2 damping_ratio sqrt(kp)
    max_delta_pos: float = 0.05  # m: an action of ±1 moves the goal this far
    max_delta_rot: float = 0.5  # rad: an action of ±1 turns the goal this far
    nullspace_kp: float = 10.0  # pull towards the joints at reset, inside the task's nullspace
    substeps: int = 25  # physics steps per policy step (20 Hz over 2 ms)
    gripper_speed: float = 0.01  # change of the gripper's internal command per substep

    @property
    def kd(self) -> float:
        return 2.0 * self.damping_ratio * float(np.sqrt(self.kp))


@dataclasses.dataclass
class OSCState:
    goal_pos: np.ndarray  # [B, 3] world
    goal_ori: np.ndarray  # [B, 3, 3] world rotation matrix
    initial_joint: np.ndarray  # [B, 7] the nullspace's rest pose (the arm at reset)
    gripper: np.ndarray  # [B, 2] robosuite's `current_action` per finger, in [-1, 1]
    # robosuite's controller caches the arm's state and refreshes it only after it has run once:
    # the first policy step after reset (LIBERO sets the stored state in between) sets its goal
    # from, and computes its first substep's torques with, the arm as it was at reset. `reset`
    # holds that snapshot (mass, jac_pos, jac_rot, q, qvel, bias, ee_pos, ee_ori; batch 1) until
    # the first step has used it, then None.
    reset: dict | None = None


def axis_angle_matrix(v: np.ndarray) -> np.ndarray:
    """[B, 3] axis-angle -> [B, 3, 3] rotation (Rodrigues; identity at zero)."""
    v = np.asarray(v, np.float64)
    theta = np.linalg.norm(v, axis=-1, keepdims=True)
    k = np.where(theta > 1e-12, v / np.maximum(theta, 1e-12), 0.0)
    kx = np.zeros(v.shape[:-1] + (3, 3))
    kx[..., 0, 1], kx[..., 0, 2] = -k[..., 2], k[..., 1]
    kx[..., 1, 0], kx[..., 1, 2] = k[..., 2], -k[..., 0]
    kx[..., 2, 0], kx[..., 2, 1] = -k[..., 1], k[..., 0]
    s, c = np.sin(theta)[..., None], np.cos(theta)[..., None]
    return np.eye(3) + s * kx + (1 - c) * (kx @ kx)


def orientation_error(desired: np.ndarray, current: np.ndarray) -> np.ndarray:
    """[B, 3] robosuite's ½ Σ cᵢ × dᵢ over the rotation matrices' columns (each cross
    product's components as `np.cross` computes them, summed in the same order: the same
    bits, without its per-call overhead)."""
    total = 0.0
    for i in range(3):
        a, b = current[..., :, i], desired[..., :, i]
        total = total + np.stack(
            [
                a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0],
            ],
            axis=-1,
        )
    return 0.5 * total


def set_goal(
    state: OSCState, action: np.ndarray, ee_pos: np.ndarray, ee_ori: np.ndarray, cfg: OSCConfig
) -> OSCState:
    """The goal of one policy step from actions [B, 7] (clipped to [-1, 1]) at the current grasp
    site pose; rows whose rotation is exactly zero keep their orientation goal (robosuite)."""
    a = np.clip(np.asarray(action, np.float64)[:, :6], -1.0, 1.0)
    dpos, drot = a[:, :3] * cfg.max_delta_pos, a[:, 3:6] * cfg.max_delta_rot
    turn = np.any(drot != 0.0, axis=-1)
    new_ori = axis_angle_matrix(drot) @ ee_ori
    goal_ori = np.where(turn[:, None, None], new_ori, state.goal_ori)
    return dataclasses.replace(state, goal_pos=ee_pos + dpos, goal_ori=goal_ori)


def arm_torques(
    state: OSCState,
    cfg: OSCConfig,
    mass: np.ndarray,  # [B, 7, 7] the arm's block of the joint-space inertia
    jac_pos: np.ndarray,  # [B, 3, 7]
    jac_rot: np.ndarray,  # [B, 3, 7]
    q: np.ndarray,  # [B, 7]
    qvel: np.ndarray,  # [B, 7]
    bias: np.ndarray,  # [B, 7] qfrc_bias (gravity, Coriolis)
    ee_pos: np.ndarray,  # [B, 3]
    ee_ori: np.ndarray,  # [B, 3, 3]
    limit: np.ndarray,  # [7, 2] the motors' ctrlrange
) -> np.ndarray:
    """[B, 7] OSC_POSE torques for one substep (robosuite's `run_controller`)."""
    force = cfg.kp * (state.goal_pos - ee_pos) - cfg.kd * np.einsum("bij,bj->bi", jac_pos, qvel)
    torque = cfg.kp * orientation_error(state.goal_ori, ee_ori) - cfg.kd * np.einsum(
        "bij,bj->bi", jac_rot, qvel
    )
    m_inv = np.linalg.inv(mass)
    jac = np.concatenate([jac_pos, jac_rot], axis=1)  # [B, 6, 7]
    jt = np.swapaxes(jac, 1, 2)

    def lam(j: np.ndarray) -> np.ndarray:
        return np.linalg.pinv(j @ m_inv @ np.swapaxes(j, 1, 2))

    wrench = np.concatenate(
        [
            np.einsum("bij,bj->bi", lam(jac_pos), force),
            np.einsum("bij,bj->bi", lam(jac_rot), torque),
        ],
        axis=1,
    )
    tau = np.einsum("bij,bj->bi", jt, wrench) + bias
    j_bar = m_inv @ jt @ lam(jac)
    null = np.eye(7) - j_bar @ jac
    kd_n = 2.0 * np.sqrt(cfg.nullspace_kp)
    pose = np.einsum("bij,bj->bi", mass, cfg.nullspace_kp * (state.initial_joint - q) - kd_n * qvel)
    tau = tau + np.einsum("bji,bj->bi", null, pose)
    return np.clip(tau, limit[:, 0], limit[:, 1])


def gripper_step(state: OSCState, command: np.ndarray, cfg: OSCConfig) -> OSCState:
    """One substep of the gripper's internal command: +1 closes (finger 1 towards its lower
    limit, finger 2 towards its upper), -1 opens, 0 holds."""
    sign = np.sign(np.asarray(command, np.float64))[:, None]
    g = np.clip(state.gripper + np.array([-1.0, 1.0]) * cfg.gripper_speed * sign, -1.0, 1.0)
    return dataclasses.replace(state, gripper=g)


def finger_targets(state: OSCState, ctrlrange: np.ndarray) -> np.ndarray:
    """[B, 2] the fingers' position targets: the range's middle + half-width · command."""
    mid = 0.5 * (ctrlrange[:, 1] + ctrlrange[:, 0])
    half = 0.5 * (ctrlrange[:, 1] - ctrlrange[:, 0])
    return mid + half * state.gripper


@dataclasses.dataclass(frozen=True)
class ArmIndex:
    """Addresses of the arm in a model: its 7 dofs / qpos, the grasp site, its motors and the
    gripper's two position actuators."""

    dof: np.ndarray
    qpos: np.ndarray
    site: int
    motors: np.ndarray
    fingers: np.ndarray

    @classmethod
    def of(cls, model: mujoco.MjModel, joints, site: str, motors, fingers) -> ArmIndex:
        jid = [model.joint(j).id for j in joints]
        return cls(
            dof=np.asarray([model.jnt_dofadr[j] for j in jid]),
            qpos=np.asarray([model.jnt_qposadr[j] for j in jid]),
            site=model.site(site).id,
            motors=np.asarray([model.actuator(a).id for a in motors]),
            fingers=np.asarray([model.actuator(a).id for a in fingers]),
        )


def site_pose(model: mujoco.MjModel, datas, idx: ArmIndex) -> tuple[np.ndarray, np.ndarray]:
    """([B, 3], [B, 3, 3]) the grasp site's world pose in each data (kinematics current)."""
    pos = np.stack([d.site_xpos[idx.site] for d in datas])
    ori = np.stack([d.site_xmat[idx.site].reshape(3, 3) for d in datas])
    return pos.copy(), ori.copy()


def _dynamics(model: mujoco.MjModel, datas, idx: ArmIndex):
    """The arm's mass block, site Jacobians, joints and bias of each data: MuJoCo fills one
    batched array per quantity, then the arm's rows and columns are taken once for the batch
    (the same bits as taking them per data: `test_batched_dynamics_are_the_per_data_ones`)."""
    nv, b, dof = model.nv, len(datas), idx.dof
    jp, jr, full = np.zeros((b, 3, nv)), np.zeros((b, 3, nv)), np.zeros((b, nv, nv))
    for i, d in enumerate(datas):
        mujoco.mj_jacSite(model, d, jp[i], jr[i], idx.site)
        mujoco.mj_fullM(model, d, full[i])
    out = {
        "mass": full[:, dof][:, :, dof],
        "jp": jp[:, :, dof],
        "jr": jr[:, :, dof],
        "q": np.stack([d.qpos for d in datas])[:, idx.qpos],
        "qvel": np.stack([d.qvel for d in datas])[:, dof],
        "bias": np.stack([d.qfrc_bias for d in datas])[:, dof],
    }
    # row-major, as the controller's matmuls expect: indexing the last axis leaves the result
    # transposed in memory, and numpy's matmul then sums in another order (other last bits)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def step(
    model: mujoco.MjModel,
    datas,
    idx: ArmIndex,
    state: OSCState,
    actions: np.ndarray,
    cfg: OSCConfig = OSCConfig(),
    on_substep=None,
) -> OSCState:
    """One policy step for every environment: goal from `actions` [B, 7], then `cfg.substeps`
    physics steps, each computing torques from the state it starts at (robosuite calls
    `sim.forward()` then the controller then `sim.step()`; `mj_step1` / `mj_step2` is the same
    computation done once). `on_substep(k)` runs after substep k (observation sampling)."""
    actions = np.asarray(actions, np.float64)
    limit = model.actuator_ctrlrange[idx.motors]
    franges = model.actuator_ctrlrange[idx.fingers]
    stale = state.reset
    b = len(datas)
    for k in range(cfg.substeps):
        for d in datas:
            mujoco.mj_step1(model, d)
        if k == 0 and stale is not None:  # robosuite's cached arm state from reset
            dyn = {key: np.repeat(v, b, 0) for key, v in stale.items()}
            ee_pos, ee_ori = dyn.pop("ee_pos"), dyn.pop("ee_ori")
            state = dataclasses.replace(state, reset=None)
        else:
            dyn = _dynamics(model, datas, idx)
            ee_pos, ee_ori = site_pose(model, datas, idx)
        if k == 0:
            state = set_goal(state, actions, ee_pos, ee_ori, cfg)
        tau = arm_torques(
            state, cfg, dyn["mass"], dyn["jp"], dyn["jr"], dyn["q"], dyn["qvel"], dyn["bias"],
            ee_pos, ee_ori, limit,
        )  # fmt: skip
        state = gripper_step(state, actions[:, 6], cfg)
        fingers = finger_targets(state, franges)
        for j, d in enumerate(datas):
            d.ctrl[idx.motors] = tau[j]
            d.ctrl[idx.fingers] = fingers[j]
            mujoco.mj_step2(model, d)
        if on_substep is not None:
            on_substep(k)
    return state


@contextlib.contextmanager
def sensors_off(model: mujoco.MjModel):
    """`model` with its sensors disabled inside the block (restored on exit). The physics does
    not read sensors, so the states are bit-for-bit the same; a LIBERO scene's ν sensors (tens
    of contact sensors) are a large share of a substep's cost (benchmarks/libero_speed.py), and
    only the step's end state is read, after the caller's own forward pass with them on."""
    flags = model.opt.disableflags
    model.opt.disableflags = flags | int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
    try:
        yield model
    finally:
        model.opt.disableflags = flags


def reset_state(
    model: mujoco.MjModel, datas, idx: ArmIndex, initial_joint: np.ndarray, fingers=None
) -> OSCState:
    """The controller as robosuite builds it at reset, with the arm at `initial_joint`
    (LIBERO's `init_qpos`) and the fingers at `fingers` ({qpos address: value}), at rest: the
    nullspace rest pose and the orientation goal are that pose's, the gripper's command 0, and
    the first step uses that pose's cached state (`OSCState.reset`); the stored state LIBERO
    sets afterwards changes none of these."""
    b = len(datas)
    probe = mujoco.MjData(model)
    probe.qpos[idx.qpos] = initial_joint
    for adr, v in (fingers or {}).items():
        probe.qpos[adr] = v
    mujoco.mj_forward(model, probe)
    snap = _dynamics(model, [probe], idx)
    snap["ee_pos"], snap["ee_ori"] = site_pose(model, [probe], idx)
    return OSCState(
        goal_pos=np.repeat(snap["ee_pos"], b, 0),
        goal_ori=np.repeat(snap["ee_ori"], b, 0),
        initial_joint=np.repeat(np.asarray(initial_joint, np.float64)[None], b, 0),
        gripper=np.zeros((b, 2)),
        reset=snap,
    )
