"""Batched scene verification (§3.1): metric scale, collision-free placement, static stability.

Every failure is a structured `Reason(check, object, magnitude, detail)` so that the engine can
send it back to the scene-program writer for repair and count reasons per check:
  scale        an attribute outside its category's metric range (magnitude: the value)
  penetration  two bodies interpenetrate at t = 0 (magnitude: depth in m)
  unsupported  an object falls during the passive settle (magnitude: drop in m)
  unstable     an object slides, rolls or tips, or a joint drifts (magnitude: m or rad)
The settle is one batched `mujoco.rollout` per same-structure bucket with the gripper held at
home; it is cheap on CPU (hundreds of variants per second) and needs no accelerator.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Sequence

import mujoco
import numpy as np

from coda.sim import assets, robot
from coda.sim.compile import CompiledScene, group_buckets

PENETRATION_TOL = 0.003  # m
SETTLE_SECONDS = 0.6
DROP_TOL = 0.01  # m of vertical drop
SLIDE_TOL = 0.015  # m of horizontal motion
TIP_TOL = 0.25  # rad of tilt change
JOINT_TOL = 0.05  # fraction of the joint range
CHECKS = ("scale", "penetration", "unsupported", "unstable")


@dataclasses.dataclass
class Reason:
    check: str
    object: str
    magnitude: float
    detail: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Verdict:
    ok: bool
    reasons: list[Reason]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reasons": [r.to_dict() for r in self.reasons]}


def _owner(model: mujoco.MjModel, geom: int, objects: set[str]) -> str:
    """Scene object (or 'floor' / 'gripper') that a geom belongs to."""
    name = model.geom(geom).name
    if name == "floor":
        return "floor"
    root = name.split("/")[0]
    return root if root in objects else "gripper"


def check_scale(c: CompiledScene) -> list[Reason]:
    out = []
    for o in c.scene.objects:
        for field, value in assets.get_category(o.category).scale_problems(
            c.scene.attributes[o.name]
        ):
            rng = assets.get_category(o.category)
            lo_hi = (
                rng.dims.get(field.split(".")[-1])
                if field.startswith("dims.")
                else getattr(rng, field)
            )
            out.append(Reason("scale", o.name, value, f"{field}={value:.4g} outside {lo_hi}"))
    return out


def check_penetration(c: CompiledScene) -> list[Reason]:
    m = c.model
    d = mujoco.MjData(m)
    d.qpos[:] = c.init_qpos
    mujoco.mj_forward(m, d)
    objects = {o.name for o in c.scene.objects}
    worst: dict[tuple[str, str], float] = {}
    for i in range(d.ncon):
        con = d.contact[i]
        if con.dist >= -PENETRATION_TOL:
            continue
        a, b = _owner(m, con.geom1, objects), _owner(m, con.geom2, objects)
        if a == b:
            continue
        key = tuple(sorted((a, b)))
        worst[key] = max(worst.get(key, 0.0), -float(con.dist))
    out = []
    for (a, b), depth in sorted(worst.items()):
        obj = a if a in objects else b
        other = b if obj == a else a
        out.append(Reason("penetration", obj, depth, f"{obj} and {other} overlap by {depth:.4f} m"))
    return out


def check_stability(
    group: Sequence[CompiledScene], nthread: int | None = None
) -> list[list[Reason]]:
    """Passive settle of one same-structure group, batched through mujoco.rollout."""
    from mujoco import rollout as mjrollout

    models = [c.model for c in group]
    m0 = models[0]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    nstate = mujoco.mj_stateSize(m0, spec)
    state0 = np.empty((len(group), nstate))
    for i, c in enumerate(group):
        d = mujoco.MjData(c.model)
        d.qpos[:] = c.init_qpos
        d.ctrl[:] = c.init_ctrl
        mujoco.mj_forward(c.model, d)
        mujoco.mj_getState(c.model, d, state0[i], spec)
    nstep = int(SETTLE_SECONDS / robot.TIMESTEP)
    ctrl = np.repeat(np.stack([c.init_ctrl for c in group])[:, None, :], nstep, 1).astype(float)
    nthread = nthread or max(1, min(len(group), os.cpu_count() or 1))
    datas = [mujoco.MjData(m0) for _ in range(nthread)]
    states, _ = mjrollout.rollout(models, datas, state0, ctrl, persistent_pool=True)
    final = states[:, -1]
    out = []
    for i, c in enumerate(group):
        m = c.model
        reasons = []
        q0, q1 = state0[i, 1 : 1 + m.nq], final[i, 1 : 1 + m.nq]
        if not np.isfinite(q1).all():
            reasons.append(Reason("unstable", "scene", float("inf"), "simulation diverged"))
            out.append(reasons)
            continue
        for o in c.scene.objects:
            if assets.get_category(o.category).kind != assets.MOVABLE:
                continue
            adr = m.jnt_qposadr[m.joint(f"{o.name}/free").id]
            p0, p1 = q0[adr : adr + 3], q1[adr : adr + 3]
            drop = p0[2] - p1[2]
            slide = float(np.linalg.norm(p1[:2] - p0[:2]))
            tilt = _tilt_change(q0[adr + 3 : adr + 7], q1[adr + 3 : adr + 7])
            if drop > DROP_TOL:
                reasons.append(
                    Reason(
                        "unsupported",
                        o.name,
                        float(drop),
                        f"{o.name} fell {drop:.3f} m when released",
                    )
                )
            elif slide > SLIDE_TOL or tilt > TIP_TOL:
                mag = slide if slide > SLIDE_TOL else tilt
                reasons.append(
                    Reason(
                        "unstable",
                        o.name,
                        float(mag),
                        f"{o.name} moved {slide:.3f} m / tilted {tilt:.2f} rad",
                    )
                )
        for jname, (lo, hi) in zip(c.layout.joint_names, c.consts["joint_range"], strict=True):
            adr = m.jnt_qposadr[m.joint(jname).id]
            drift = abs(q1[adr] - q0[adr]) / max(hi - lo, 1e-9)
            if drift > JOINT_TOL:
                reasons.append(
                    Reason(
                        "unstable",
                        jname.split("/")[0],
                        float(drift),
                        f"joint {jname} drifted {drift:.2f} of its range",
                    )
                )
        out.append(reasons)
    return out


def _tilt_change(qa: np.ndarray, qb: np.ndarray) -> float:
    """Angle between the body z axes of two orientations (yaw changes do not count)."""
    za, zb = np.zeros(9), np.zeros(9)
    mujoco.mju_quat2Mat(za, qa)
    mujoco.mju_quat2Mat(zb, qb)
    dot = float(np.clip(za.reshape(3, 3)[:, 2] @ zb.reshape(3, 3)[:, 2], -1, 1))
    return float(np.arccos(dot))


def verify(compiled: Sequence[CompiledScene]) -> list[Verdict]:
    """Verifies a batch of compiled scenes; returns one Verdict per scene, in order."""
    reasons: dict[int, list[Reason]] = {
        id(c): check_scale(c) + check_penetration(c) for c in compiled
    }
    for group in group_buckets(compiled):
        for c, rs in zip(group, check_stability(group), strict=True):
            reasons[id(c)] += rs
    return [Verdict(not reasons[id(c)], reasons[id(c)]) for c in compiled]


def summarize(verdicts: Sequence[Verdict]) -> dict:
    """pass_rate and counts of failing scenes per check (for summary.json)."""
    counts = Counter()
    for v in verdicts:
        for check in {r.check for r in v.reasons}:
            counts[check] += 1
    n = max(len(verdicts), 1)
    return {
        "n": len(verdicts),
        "pass_rate": sum(v.ok for v in verdicts) / n,
        "reasons": {k: counts.get(k, 0) for k in CHECKS},
    }
