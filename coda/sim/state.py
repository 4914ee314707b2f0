"""One simulator-state layout for both physics backends.

Both backends fill MuJoCo's `sensordata` with the same sensors (added at compile time): the tcp
frame, finger joints, the frame of every tracked body (object bodies, articulated parts,
handles), articulated joint positions, every tracked body's linear and angular velocity (world
frame; ν needs "at rest", e.g. an object released inside a container, not still falling through
it), and geom-pair contact counts. `decode` turns a sensordata
array into a `SimState` pytree, so ν, the geometry helpers and potentials are the same jnp
functions whether `mujoco.rollout` (native) or MJX produced the numbers.

Contacts are an entity matrix: entity 0 = floor, 1 = left finger, 2 = right finger,
3 + i = tracked body i. Note MuJoCo computes sensors inside `mj_step` before integration, so a
state decoded from step t's sensordata is the state at the start of step t (one physics step,
5 ms, behind the integrated qpos); this lag is identical on both backends.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from flax import struct

FLOOR, LEFT, RIGHT = 0, 1, 2
N_FIXED_ENTITIES = 3


@struct.dataclass
class SimState:
    """A batch of simulator states. Leading dims are free ([...] = e.g. [B] or [B, T])."""

    ee_pos: jnp.ndarray  # [..., 3] tcp position (world)
    ee_quat: jnp.ndarray  # [..., 4] tcp orientation (w, x, y, z)
    finger: jnp.ndarray  # [..., 2] left/right opening half-widths (m)
    body_pos: jnp.ndarray  # [..., NB, 3]
    body_quat: jnp.ndarray  # [..., NB, 4]
    joint_pos: jnp.ndarray  # [..., NJ] articulated joints
    contact: jnp.ndarray  # [..., NE, NE] contact counts between entities (symmetric)
    body_half: jnp.ndarray  # [..., NB, 3] bbox half extents (per variant, constant in time)
    inner: jnp.ndarray  # [..., NB, 4] container interior half extents xyz + floor z offset
    joint_range: jnp.ndarray  # [..., NJ, 2]
    # Commanded wrist pose (x, y, z, yaw, pitch, roll): the servo setpoint the actions so far
    # integrated into. Proprioception, as on a real arm; without it the state is not Markov for
    # a delta-action policy (the tcp lags its setpoint while moving or pressing on something).
    ee_cmd: jnp.ndarray | None = None  # [..., 6]
    # Tracked bodies' velocities (world frame; linear at the body origin). Optional so states
    # built by hand stay valid; helpers that need them (`geometry.at_rest`) say so when absent.
    body_linvel: jnp.ndarray | None = None  # [..., NB, 3] m/s
    body_angvel: jnp.ndarray | None = None  # [..., NB, 3] rad/s


@dataclasses.dataclass(frozen=True)
class StateLayout:
    """Static description of the sensordata vector of one bucket (hashable, jit-static).

    Order: tcp pos (3), tcp quat (4), fingers (2), body frames (7 NB: pos, quat), articulated
    joints (NJ), body velocities (6 NB: linvel, angvel), contact sensors (one per pair).
    """

    body_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    contact_pairs: tuple[tuple[int, int], ...]  # entity pair per contact sensor
    nsensordata: int

    @property
    def n_bodies(self) -> int:
        return len(self.body_names)

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def n_entities(self) -> int:
        return N_FIXED_ENTITIES + self.n_bodies

    @property
    def expected_nsensordata(self) -> int:
        """Length of the sensordata vector this layout decodes."""
        return 9 + 7 * self.n_bodies + self.n_joints + 6 * self.n_bodies + len(self.contact_pairs)

    @property
    def state_dim(self) -> int:
        """Length of `flat_observation` (the policy's proprio + object state vector)."""
        return 3 + 4 + 2 + 6 + 7 * self.n_bodies + self.n_joints


def decode(
    sensordata: jnp.ndarray, layout: StateLayout, consts: dict, cmd: jnp.ndarray
) -> SimState:
    """sensordata [..., S] + per-variant constants + commanded wrist pose [..., 6] -> SimState
    (pure jnp, jittable). The backends own the servo setpoint, so they pass it in."""
    s = sensordata
    if s.shape[-1] != layout.expected_nsensordata:
        raise ValueError(
            f"sensordata has {s.shape[-1]} values but the StateLayout decodes "
            f"{layout.expected_nsensordata} (bodies {layout.n_bodies}, joints {layout.n_joints}, "
            f"contact pairs {len(layout.contact_pairs)}): compiled by another layout?"
        )
    nb, nj = layout.n_bodies, layout.n_joints
    lead = s.shape[:-1]
    o = 0
    ee_pos, ee_quat, finger = s[..., 0:3], s[..., 3:7], s[..., 7:9]
    o = 9
    frames = s[..., o : o + 7 * nb].reshape(lead + (nb, 7))
    o += 7 * nb
    joint_pos = s[..., o : o + nj]
    o += nj
    vel = s[..., o : o + 6 * nb].reshape(lead + (nb, 6))  # [..., NB, 6] linvel, angvel
    o += 6 * nb
    found = s[..., o : o + len(layout.contact_pairs)]
    ne = layout.n_entities
    if layout.contact_pairs:
        pairs = np.asarray(layout.contact_pairs)
        onehot = np.zeros((len(pairs), ne * ne), np.float32)
        onehot[np.arange(len(pairs)), pairs[:, 0] * ne + pairs[:, 1]] = 1.0
        onehot[np.arange(len(pairs)), pairs[:, 1] * ne + pairs[:, 0]] = 1.0
        contact = (found @ jnp.asarray(onehot)).reshape(lead + (ne, ne))
    else:
        contact = jnp.zeros(lead + (ne, ne), s.dtype)

    def bc(x):
        return _broadcast_const(jnp.asarray(x, s.dtype), lead)

    return SimState(
        ee_pos=ee_pos,
        ee_quat=ee_quat,
        finger=finger,
        body_pos=frames[..., 0:3],
        body_quat=frames[..., 3:7],
        joint_pos=joint_pos,
        contact=contact,
        body_half=bc(consts["body_half"]),
        inner=bc(consts["inner"]),
        joint_range=bc(consts["joint_range"]),
        ee_cmd=jnp.broadcast_to(jnp.asarray(cmd, s.dtype), lead + (6,)),
        body_linvel=vel[..., 0:3],
        body_angvel=vel[..., 3:6],
    )


def _broadcast_const(x: jnp.ndarray, lead: tuple[int, ...]) -> jnp.ndarray:
    """Per-variant constants are [*batch, ...]: broadcast over the time dims after the batch."""
    base = x.ndim - 2  # NB/NJ and feature dims are always the last two
    batch = x.shape[:base]
    extra = lead[len(batch) :]
    x = x.reshape(batch + (1,) * len(extra) + x.shape[base:])
    return jnp.broadcast_to(x, lead + x.shape[-2:])


def flat_observation(state: SimState) -> jnp.ndarray:
    """The state-only policy observation: [..., state_dim] (tcp, fingers, commanded wrist pose,
    body frames, joints)."""
    if state.ee_cmd is None:
        raise ValueError("flat_observation needs SimState.ee_cmd (states from decode have it)")
    lead = state.ee_pos.shape[:-1]
    frames = jnp.concatenate([state.body_pos, state.body_quat], -1).reshape(lead + (-1,))
    parts = [state.ee_pos, state.ee_quat, state.finger, state.ee_cmd, frames, state.joint_pos]
    return jnp.concatenate(parts, -1)


@dataclasses.dataclass(frozen=True)
class SymbolTable:
    """Roles -> indices into `SimState` arrays (static: one table per bucket).

    `bodies` maps a role (or "role.part", e.g. "cabinet.handle", "cabinet.drawer") to a tracked
    body index; `joints` maps a role to its articulated joint index; `sites` maps a role to a
    box fixed to a tracked body (or to the world: body -1) as (body, pos (3), quat (4, wxyz),
    half size (3)) in that body's frame, e.g. a LIBERO goal region. Entities for the contact
    matrix are body index + 3 (see module docstring).
    """

    bodies: tuple[tuple[str, int], ...]
    joints: tuple[tuple[str, int], ...] = ()
    sites: tuple[tuple[str, tuple], ...] = ()

    def body(self, role: str) -> int:
        for k, v in self.bodies:
            if k == role:
                return v
        raise KeyError(f"unknown role {role!r}; roles: {[k for k, _ in self.bodies]}")

    def joint(self, role: str) -> int:
        for k, v in self.joints:
            if k == role:
                return v
        raise KeyError(f"role {role!r} has no joint; joints: {[k for k, _ in self.joints]}")

    def site(self, role: str) -> tuple:
        for k, v in self.sites:
            if k == role:
                return v
        raise KeyError(f"role {role!r} has no site; sites: {[k for k, _ in self.sites]}")

    def entity(self, role: str) -> int:
        return N_FIXED_ENTITIES + self.body(role)

    def has(self, role: str) -> bool:
        return any(k == role for k, _ in self.bodies)

    @property
    def roles(self) -> list[str]:
        return [k for k, _ in self.bodies]

    def to_dict(self) -> dict:
        out = {"bodies": dict(self.bodies), "joints": dict(self.joints)}
        if self.sites:
            out["sites"] = {k: list(v) for k, v in self.sites}
        return out
