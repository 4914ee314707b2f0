"""Scripted, phase-based waypoint planners (one per family), batched in JAX.

The planner is a `ChunkPolicy`: from the chunk-start state it plans H control steps open-loop
from the observed servo setpoint (`SimState.ee_cmd`, integrated as `robot.apply_actions` does),
advancing phases when the target reaches the phase's waypoint and the servos had time to settle.
It is closed-loop across chunks, exactly like a learned chunking policy, so it runs unchanged
on both backends and recovers when what was executed is not what it planned (`Perturbed`).
Per-step phase labels come out in `info["phase"]` ([B, H]) for demos D_t.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from coda.sim import geometry as G
from coda.sim import robot
from coda.sim.state import SimState, SymbolTable

OPEN, CLOSE = -1.0, 1.0


@struct.dataclass
class PlannerCarry:
    phase: jnp.ndarray  # [B] int32
    count: jnp.ndarray  # [B] int32 control steps spent at the phase's waypoint


def _wrap(a, period=2 * jnp.pi):
    return (a + period / 2) % period - period / 2


def _grasp_yaw(q):
    """Object heading folded to [-π/2, π/2): parallel jaws are symmetric under a half turn."""
    return _wrap(G.yaw_of(q), jnp.pi)


@dataclasses.dataclass(frozen=True)
class Waypoint:
    """One phase: tcp position, yaw, gripper command, speed, tolerance, settle time."""

    name: str
    grip: float
    speed: float = 1.0  # fraction of the max per-step motion
    tol: float = 0.006  # m
    settle: int = 0  # control steps to hold once the target reached the waypoint (servo lag)


@dataclasses.dataclass(frozen=True)
class ScriptedPlanner:
    """Phase-based planner for one task family / task mode (hashable: a jit-static policy)."""

    family: str
    params: tuple[tuple[str, Any], ...]
    sym: SymbolTable
    horizon: int = 10

    # ---------------------------------------------------------------- phases
    @property
    def phases(self) -> tuple[Waypoint, ...]:
        if self.family == "articulated":
            return (
                Waypoint("approach", OPEN, tol=0.01),
                Waypoint("descend", OPEN, speed=0.6, settle=4),
                Waypoint("grasp", CLOSE, settle=7),
                Waypoint("pull", CLOSE, speed=0.35, tol=0.008, settle=3),
                Waypoint("release", OPEN, settle=5),
                Waypoint("retreat", OPEN, tol=0.01),
            )
        return (
            Waypoint("approach", OPEN, tol=0.01),
            Waypoint("descend", OPEN, speed=0.6, tol=0.004, settle=4),
            Waypoint("grasp", CLOSE, settle=7),
            Waypoint("lift", CLOSE, speed=0.7, tol=0.01),
            Waypoint("transport", CLOSE, speed=0.7, tol=0.008, settle=2),
            Waypoint("lower", CLOSE, speed=0.4, tol=0.004, settle=4),
            Waypoint("release", OPEN, settle=6),
            Waypoint("retreat", OPEN, tol=0.01),
        )

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases)

    def _p(self, k: str, default=None):
        return dict(self.params).get(k, default)

    def _roles(self) -> tuple[str, str]:
        if self.family == "pick_place":
            return "target", "goal"
        if self.family == "put_inside":
            return "target", "container"
        if self._p("mode") == "insert":
            return "peg", "hole"
        return "top", "base"

    # ---------------------------------------------------------------- waypoints
    def _waypoints(self, s: SimState, target: jnp.ndarray):
        """All phases' tcp xyz [B, P, 3], yaw [B, P] and the path still to go beyond the
        waypoint [B, P] (non-zero only when a phase follows a path, e.g. a door's arc)."""
        if self.family == "articulated":
            return self._articulated(s, target)
        obj_role, dest_role = self._roles()
        o, d = self.sym.body(obj_role), self.sym.body(dest_role)
        op, dp = G.pos(s, o), G.pos(s, d)
        ohz = G.half(s, o)[..., 2]
        gyaw = _grasp_yaw(s.body_quat[..., o, :])
        grasp_z = jnp.maximum(op[..., 2], 0.012)
        above_obj = jnp.stack([op[..., 0], op[..., 1], G.top(s, o) + 0.07], -1)
        at_obj = jnp.stack([op[..., 0], op[..., 1], grasp_z], -1)
        offset = jnp.clip(s.ee_pos[..., 2] - op[..., 2], -0.02, 0.04)  # tcp above obj centre
        ee_yaw = G.yaw_of(s.ee_quat)
        if self.family == "put_inside":
            floor = dp[..., 2] + s.inner[..., d, 3]
            place_z = floor + ohz + offset + 0.012
        elif self._p("mode") == "insert":
            place_z = G.TABLE_Z + ohz + offset + 0.004
        else:
            place_z = G.top(s, d) + ohz + offset + 0.008
        carry_z = jnp.maximum(G.top(s, d) + 2 * ohz + 0.05, 0.14)
        # keep the grasp heading while carrying; for insertion, turn the peg to the hole's
        # heading (square section: a quarter-turn symmetry)
        if self._p("mode") == "insert":
            dyaw = _wrap(
                G.yaw_of(s.body_quat[..., d, :]) - G.yaw_of(s.body_quat[..., o, :]), jnp.pi / 2
            )
            carry_yaw = ee_yaw + dyaw
        else:
            carry_yaw = ee_yaw
        lift = jnp.stack([target[..., 0], target[..., 1], carry_z], -1)
        over_dest = jnp.stack([dp[..., 0], dp[..., 1], carry_z], -1)
        lower = jnp.stack([dp[..., 0], dp[..., 1], place_z], -1)
        retreat = jnp.stack([dp[..., 0], dp[..., 1], carry_z + 0.05], -1)
        hold = target[..., :3] - jnp.array([0.0, 0.0, robot.TCP_OFFSET])
        xyz = jnp.stack([above_obj, at_obj, hold, lift, over_dest, lower, hold, retreat], -2)
        yaw = jnp.stack(
            [
                gyaw,
                gyaw,
                target[..., 3],
                target[..., 3],
                carry_yaw,
                carry_yaw,
                target[..., 3],
                target[..., 3],
            ],
            -1,
        )
        return xyz, yaw, jnp.zeros_like(yaw)

    def _articulated(self, s: SimState, target: jnp.ndarray):
        c, h = self.sym.body("cabinet"), self.sym.body("cabinet.handle")
        j = self.sym.joint("cabinet")
        hp = G.pos(s, h)
        q = s.joint_pos[..., j]
        lo, hi = s.joint_range[..., j, 0], s.joint_range[..., j, 1]
        opening = self._p("action") == "open"
        q_goal = jnp.where(opening, lo + 0.8 * (hi - lo), lo) * jnp.ones_like(q)
        cab_yaw = G.yaw_of(s.body_quat[..., c, :])
        hold = target[..., :3] - jnp.array([0.0, 0.0, robot.TCP_OFFSET])
        if self._p("part") == "door":
            hinge = G.pos(s, self.sym.body("cabinet.door"))
            rel = hp[..., :2] - hinge[..., :2]
            r = jnp.linalg.norm(rel, axis=-1)
            phi_h = jnp.arctan2(rel[..., 1], rel[..., 0])
            part_yaw = cab_yaw + q
            tgt_rel = target[..., :2] - hinge[..., :2]
            phi_t = jnp.arctan2(tgt_rel[..., 1], tgt_rel[..., 0])
            phi_goal = phi_h + (q_goal - q)
            step = 0.045  # rad per control step along the arc
            phi_next = phi_t + jnp.clip(_wrap(phi_goal - phi_t), -step, step)
            pull_xy = hinge[..., :2] + r[..., None] * jnp.stack(
                [jnp.cos(phi_next), jnp.sin(phi_next)], -1
            )
            pull = jnp.concatenate([pull_xy, hp[..., 2:3]], -1)
            pull_yaw = part_yaw + _wrap(phi_next - phi_h)
            togo = r * jnp.abs(_wrap(phi_goal - phi_next))
        else:
            axis = jnp.stack([-jnp.cos(cab_yaw), -jnp.sin(cab_yaw), jnp.zeros_like(q)], -1)
            pull = hp + axis * (q_goal - q)[..., None]
            part_yaw = cab_yaw
            pull_yaw = cab_yaw
            togo = jnp.zeros_like(q)
        out_dir = jnp.stack([-jnp.cos(pull_yaw), -jnp.sin(pull_yaw), jnp.zeros_like(q)], -1)
        # come in above the cabinet (an open door must not be swept), then straight down
        above = jnp.concatenate([hp[..., :2], (G.top(s, c) + 0.05)[..., None]], -1)
        at = hp
        retreat = hp + 0.06 * out_dir + jnp.array([0.0, 0.0, 0.1])
        xyz = jnp.stack([above, at, hold, pull, hold, retreat], -2)
        yaw = jnp.stack(
            [part_yaw, part_yaw, target[..., 3], pull_yaw, target[..., 3], target[..., 3]], -1
        )
        zero = jnp.zeros_like(q)
        return xyz, yaw, jnp.stack([zero, zero, zero, togo, zero, zero], -1)

    # ---------------------------------------------------------------- policy API
    def init(self, batch: int, rng: jax.Array) -> PlannerCarry:
        del rng
        return PlannerCarry(
            phase=jnp.zeros(batch, jnp.int32),
            count=jnp.zeros(batch, jnp.int32),
        )

    def act(self, params: Any, state: SimState, carry: PlannerCarry, rng: jax.Array):
        del params, rng
        if state.ee_cmd is None:
            raise ValueError("the planner needs SimState.ee_cmd (states from decode have it)")
        phases = self.phases
        grip = jnp.array([p.grip for p in phases])
        speed = jnp.array([p.speed for p in phases])
        tol = jnp.array([p.tol for p in phases])
        settle = jnp.array([p.settle for p in phases])
        n = len(phases)
        scale = jnp.array([robot.MAX_DPOS] * 3 + [robot.MAX_DROT] * 3)
        lo, hi = jnp.asarray(robot.TARGET_LOW), jnp.asarray(robot.TARGET_HIGH)

        def step(ct, _):
            c, cmd = ct  # PlannerCarry, setpoint [B, 6] integrated along the chunk
            xyz, yaw, togo = self._waypoints(state, cmd)  # [B, P, 3], [B, P], [B, P]
            k = c.phase
            wp = jnp.take_along_axis(xyz, k[:, None, None], 1)[:, 0]
            wy = jnp.take_along_axis(yaw, k[:, None], 1)[:, 0]
            wrist = wp + jnp.array([0.0, 0.0, robot.TCP_OFFSET])
            sp = speed[k][:, None]
            d_pos = jnp.clip((wrist - cmd[:, :3]) / robot.MAX_DPOS, -sp, sp)
            d_yaw = jnp.clip(_wrap(wy - cmd[:, 3]) / robot.MAX_DROT, -1.0, 1.0)
            d_pitch = jnp.clip(-cmd[:, 4] / robot.MAX_DROT, -1.0, 1.0)
            d_roll = jnp.clip(-cmd[:, 5] / robot.MAX_DROT, -1.0, 1.0)
            g = grip[k]
            action = jnp.concatenate(
                [d_pos, d_roll[:, None], d_pitch[:, None], d_yaw[:, None], g[:, None]], -1
            )
            joint_delta = (
                jnp.concatenate([d_pos, d_yaw[:, None], d_pitch[:, None], d_roll[:, None]], -1)
                * scale
            )
            target = jnp.clip(cmd + joint_delta, lo, hi)
            err = jnp.linalg.norm(wrist - target[:, :3], axis=-1)
            err = err + jnp.take_along_axis(togo, k[:, None], 1)[:, 0]
            yaw_err = jnp.abs(_wrap(wy - target[:, 3]))
            reached = (err < tol[k]) & (yaw_err < 0.05)
            count = jnp.where(reached, c.count + 1, 0)
            done = reached & (count > settle[k])
            nxt = jnp.where(done & (k < n - 1), k + 1, k)
            count = jnp.where(nxt != k, 0, count)
            return (PlannerCarry(nxt, count), target), (action, k)

        # starts from the executed setpoint, whoever chose the last actions
        (carry, _), (actions, phase) = jax.lax.scan(
            step, (carry, state.ee_cmd.astype(jnp.float32)), None, length=self.horizon
        )
        actions = jnp.moveaxis(actions, 0, 1)  # [B, H, 7]
        phase = jnp.moveaxis(phase, 0, 1)  # [B, H]
        return actions, carry, {"phase": phase}


def planner_for(bucket, horizon: int = 10) -> ScriptedPlanner:
    """The scripted planner for a bucket's task (all variants share family and params)."""
    task = bucket.scene_task
    params = tuple(sorted((k, v) for k, v in task.get("params", {}).items()))
    return ScriptedPlanner(task["family"], params, bucket.sym, horizon)


@dataclasses.dataclass(frozen=True)
class Perturbed:
    """Executes a policy's chunks with Gaussian noise; the clean chunk is the label (DART).

    Behaviour cloning from noise-free demos only ever sees the expert's own narrow tube of
    states, so a learned policy's small errors compound into states no demo covers. Injecting
    noise at collection time (Laskey et al., 2017, "DART") makes the expert demonstrate how to
    recover: the executed actions are perturbed, the recorded label `info["label"]` ([B, H, 7])
    is what the expert commanded from the state actually reached. Noise is i.i.d. per control
    step on the arm dims (`sigma` in normalised action units); the gripper is left alone.
    """

    base: Any
    sigma: float = 0.2
    arm_dims: int = 6

    @property
    def horizon(self) -> int:
        return int(self.base.horizon)

    def init(self, batch: int, rng: jax.Array):
        return self.base.init(batch, rng)

    def act(self, params: Any, state: SimState, carry, rng: jax.Array):
        k_base, k_noise = jax.random.split(rng)
        clean, carry, info = self.base.act(params, state, carry, k_base)  # [B, H, 7]
        noise = self.sigma * jax.random.normal(k_noise, clean.shape, clean.dtype)
        noise = noise * (jnp.arange(clean.shape[-1]) < self.arm_dims)
        executed = jnp.clip(clean + noise, -1.0, 1.0)
        return executed, carry, {**info, "label": clean}


@dataclasses.dataclass(frozen=True)
class RandomPolicy:
    """Uniform random actions: the floor every method must beat."""

    horizon: int = 10

    def init(self, batch: int, rng: jax.Array):
        return jnp.zeros(batch, jnp.int32)

    def act(self, params, state: SimState, carry, rng):
        b = state.ee_pos.shape[0]
        a = jax.random.uniform(rng, (b, self.horizon, robot.ACTION_DIM), minval=-1.0, maxval=1.0)
        return a, carry + 1, {"phase": jnp.zeros((b, self.horizon), jnp.int32)}
