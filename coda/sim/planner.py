"""The scripted, phase-based waypoint planner (phases and waypoints from the family), batched
in JAX.

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

from coda.sim import robot
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks import get_family
from coda.sim.tasks.waypoints import CLOSE, OPEN, Waypoint, wrap

__all__ = [
    "CLOSE",
    "OPEN",
    "Perturbed",
    "PlannerCarry",
    "RandomPolicy",
    "ScriptedPlanner",
    "Waypoint",
    "planner_for",
    "servo_chunk",
]


@struct.dataclass
class PlannerCarry:
    phase: jnp.ndarray  # [B] int32
    count: jnp.ndarray  # [B] int32 control steps spent at the phase's waypoint


def advance_phase(
    c: PlannerCarry, reached: jnp.ndarray, settle: jnp.ndarray, n: int
) -> PlannerCarry:
    """One control step of the phase machine: a phase ends once its waypoint has been held
    for more than `settle[phase]` steps (`reached` [B]); the last phase never ends."""
    k = c.phase
    count = jnp.where(reached, c.count + 1, 0)
    done = reached & (count > settle[k])
    nxt = jnp.where(done & (k < n - 1), k + 1, k)
    return PlannerCarry(nxt, jnp.where(nxt != k, 0, count))


def scan_chunk(step, carry: PlannerCarry, state: SimState, horizon: int):
    """`step` over one chunk from the executed setpoint (whoever chose the last actions):
    -> actions [B, H, 7], carry, {"phase": [B, H]}."""
    (carry, _), (actions, phase) = jax.lax.scan(
        step, (carry, state.ee_cmd.astype(jnp.float32)), None, length=horizon
    )
    return jnp.moveaxis(actions, 0, 1), carry, {"phase": jnp.moveaxis(phase, 0, 1)}


def servo_chunk(waypoints, phases: tuple[Waypoint, ...], state: SimState, carry, horizon: int):
    """One chunk of servoing to the phases' waypoints (every scripted planner's stepping): each
    control step moves the setpoint towards the current phase's waypoint (at most the phase's
    speed, the servo's per-step limits), and the phase advances once the setpoint is there
    (`advance_phase`). `waypoints(state, cmd)` -> tcp xyz [B, P, 3], yaw [B, P], path still to
    go [B, P]; the hand is held level and each phase's grip is its own. Or -> those and pitch
    [B, P] and grip command [B, P]: the hand tilted by the pitch about the tcp (a tilted hand
    reaches a handle under another one), the pitch part of being there.
    -> actions [B, H, 7], carry, {"phase": [B, H]}."""
    if state.ee_cmd is None:
        raise ValueError("the planner needs SimState.ee_cmd (states from decode have it)")
    grip = jnp.array([p.grip for p in phases])
    speed = jnp.array([p.speed for p in phases])
    tol = jnp.array([p.tol for p in phases])
    settle = jnp.array([p.settle for p in phases])
    n = len(phases)
    scale = jnp.array([robot.MAX_DPOS] * 3 + [robot.MAX_DROT] * 3)
    lo, hi = jnp.asarray(robot.TARGET_LOW), jnp.asarray(robot.TARGET_HIGH)

    def step(ct, _):
        c, cmd = ct  # PlannerCarry, setpoint [B, 6] integrated along the chunk
        xyz, yaw, togo, *pitched = waypoints(state, cmd)  # [B, P, 3], [B, P] x 2 (+ 2)
        k = c.phase
        wp = jnp.take_along_axis(xyz, k[:, None, None], 1)[:, 0]  # [B, 3]
        wy = jnp.take_along_axis(yaw, k[:, None], 1)[:, 0]  # [B]
        if pitched:
            pitch, grips = pitched
            wpi = jnp.take_along_axis(pitch, k[:, None], 1)[:, 0]  # [B]
            # wrist = tcp + Rz(yaw) Ry(pitch) (0, 0, TCP_OFFSET)
            sp_, cp_ = jnp.sin(wpi), jnp.cos(wpi)
            off = robot.TCP_OFFSET * jnp.stack(
                [sp_ * jnp.cos(wy), sp_ * jnp.sin(wy), cp_], -1
            )  # [B, 3]
            wrist = wp + off
        else:
            wrist = wp + jnp.array([0.0, 0.0, robot.TCP_OFFSET])
        sp = speed[k][:, None]
        d_pos = jnp.clip((wrist - cmd[:, :3]) / robot.MAX_DPOS, -sp, sp)
        d_yaw = jnp.clip(wrap(wy - cmd[:, 3]) / robot.MAX_DROT, -1.0, 1.0)
        if pitched:
            d_pitch = jnp.clip((wpi - cmd[:, 4]) / robot.MAX_DROT, -1.0, 1.0)
        else:
            d_pitch = jnp.clip(-cmd[:, 4] / robot.MAX_DROT, -1.0, 1.0)
        d_roll = jnp.clip(-cmd[:, 5] / robot.MAX_DROT, -1.0, 1.0)
        g = jnp.take_along_axis(grips, k[:, None], 1)[:, 0] if pitched else grip[k]  # [B]
        action = jnp.concatenate(
            [d_pos, d_roll[:, None], d_pitch[:, None], d_yaw[:, None], g[:, None]], -1
        )
        joint_delta = (
            jnp.concatenate([d_pos, d_yaw[:, None], d_pitch[:, None], d_roll[:, None]], -1) * scale
        )
        target = jnp.clip(cmd + joint_delta, lo, hi)
        err = jnp.linalg.norm(wrist - target[:, :3], axis=-1)
        err = err + jnp.take_along_axis(togo, k[:, None], 1)[:, 0]
        rot_err = jnp.abs(wrap(wy - target[:, 3]))
        if pitched:
            rot_err = rot_err + jnp.abs(wpi - target[:, 4])
        reached = (err < tol[k]) & (rot_err < 0.05)
        return (advance_phase(c, reached, settle, n), target), (action, k)

    return scan_chunk(step, carry, state, horizon)


@dataclasses.dataclass(frozen=True)
class ScriptedPlanner:
    """Phase-based planner for one task family / task mode (hashable: a jit-static policy).

    Generic: the phases (`TaskFamily.planner_phases`) and their waypoints
    (`TaskFamily.waypoints`, pure JAX) come from the family registered as `family`."""

    family: str
    params: tuple[tuple[str, Any], ...]
    sym: SymbolTable
    horizon: int = 10

    # ---------------------------------------------------------------- phases
    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return get_family(self.family).planner_phases(dict(self.params))

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases)

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        """All phases' tcp xyz [B, P, 3], yaw [B, P] and the path still to go beyond the
        waypoint [B, P] (non-zero only when a phase follows a path, e.g. a door's arc)."""
        return get_family(self.family).waypoints(dict(self.params), self.sym, s, target)

    # ---------------------------------------------------------------- policy API
    def init(self, batch: int, rng: jax.Array) -> PlannerCarry:
        del rng
        return PlannerCarry(
            phase=jnp.zeros(batch, jnp.int32),
            count=jnp.zeros(batch, jnp.int32),
        )

    def act(self, params: Any, state: SimState, carry: PlannerCarry, rng: jax.Array):
        del params, rng
        return servo_chunk(self._waypoints, self.phases, state, carry, self.horizon)


def planner_for(bucket, horizon: int = 10) -> ScriptedPlanner:
    """The scripted planner for a bucket's task (all variants share family and params)."""
    task = bucket.scene_task
    params = tuple(sorted((k, v) for k, v in task.get("params", {}).items()))
    return ScriptedPlanner(task["family"], params, bucket.sym, horizon)


class _Wraps:
    """A policy wrapper (a dataclass with a `base` field): horizon and carry are `base`'s."""

    @property
    def horizon(self) -> int:
        return int(self.base.horizon)

    def init(self, batch: int, rng: jax.Array):
        return self.base.init(batch, rng)


@dataclasses.dataclass(frozen=True)
class Perturbed(_Wraps):
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

    def act(self, params: Any, state: SimState, carry, rng: jax.Array):
        k_base, k_noise = jax.random.split(rng)
        clean, carry, info = self.base.act(params, state, carry, k_base)  # [B, H, 7]
        noise = self.sigma * jax.random.normal(k_noise, clean.shape, clean.dtype)
        noise = noise * (jnp.arange(clean.shape[-1]) < self.arm_dims)
        executed = jnp.clip(clean + noise, -1.0, 1.0)
        return executed, carry, {**info, "label": clean}


@dataclasses.dataclass(frozen=True)
class ExpertLabels:
    """Executes `learner`'s chunks and records `expert`'s chunk for the same state (DAgger).

    The learner's own state distribution, labelled by the expert (Ross et al., 2011): rows built
    from `info["label"]` (`coda.train.awr.demo_batch`, `only_success=False`) teach the learner
    what the expert would have done where the learner actually went. The expert runs in lock
    step on the executed states (the scripted planner is closed-loop on `ee_cmd`; its phase
    carry advances on its own plan, so a learner that drifts far can leave it a phase ahead or
    behind — a known limit of DAgger with a stateful scripted expert). `params` go to the
    learner; the expert takes none.
    """

    learner: Any
    expert: Any

    @property
    def horizon(self) -> int:
        return int(self.learner.horizon)

    def init(self, batch: int, rng: jax.Array):
        k_l, k_e = jax.random.split(rng)
        return (self.learner.init(batch, k_l), self.expert.init(batch, k_e))

    def act(self, params: Any, state: SimState, carry, rng: jax.Array):
        k_l, k_e = jax.random.split(rng)
        actions, c_l, info = self.learner.act(params, state, carry[0], k_l)  # [B, H, 7]
        label, c_e, _ = self.expert.act(None, state, carry[1], k_e)  # [B, H, 7]
        return actions, (c_l, c_e), {**info, "label": label}


@dataclasses.dataclass(frozen=True)
class NarrowGrip(_Wraps):
    """A policy with a planted flaw: its gripper never opens wider than 2·max_half.

    The finger servos are soft, so objects up to ~4.4 cm still pass a 4 cm cap; wider boxes get
    wedged between the fingers and can never be released. A known difficulty (δ = attributes,
    the object's width) for testing and benchmarking the critic and the engine.
    """

    base: Any
    max_half: float = 0.02

    def act(self, params: Any, state: SimState, carry, rng: jax.Array):
        a, carry, info = self.base.act(params, state, carry, rng)  # [B, H, 7]
        g_min = 2 * (1 - self.max_half / robot.FINGER_OPEN) - 1
        return a.at[..., 6].set(jnp.maximum(a[..., 6], g_min)), carry, info


def narrow_grip(bucket, horizon: int = 10) -> NarrowGrip:
    """The scripted planner of `bucket` with the `NarrowGrip` flaw (a bucket -> policy factory)."""
    return NarrowGrip(planner_for(bucket, horizon))


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
