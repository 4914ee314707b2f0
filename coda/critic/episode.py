"""What a critic reads: one episode (a variant of a rolled-out bucket) with its phase segmentation.

`episodes_from_rollout(bucket, result)` turns a `RolloutResult` into `Episode`s: the chunk-endpoint
states of one variant ([T, ...], T = chunks + 1), replay `qpos` for keyframes, the family's phase
segmentation (`coda.sim.tasks.segment`: phase index per endpoint, where progress stopped), and
per-endpoint trace features (tcp gap to the object, finger contacts, opening, heights,
displacements, distractor contacts, joint fraction). Segmentation and features are pure JAX,
jitted once per bucket structure and computed for the whole bucket in one call; the critics'
rules then read small numpy arrays. Keyframes are rendered lazily (`render_keyframes`), only by
the VLM path.

Which body is "the object" and which "the destination" comes from τ (the terminal relation's
arguments, e.g. on_top(target, goal), joint_fraction(cabinet, ...) -> the cabinet's handle),
not from the family's name.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from coda import lifetime
from coda.critic import replay
from coda.registries import SCENE_KINDS
from coda.sim import geometry as G
from coda.sim import render, tasks
from coda.sim.compile import CompiledScene
from coda.sim.rollout import Bucket, RolloutResult
from coda.sim.scene import Scene
from coda.sim.state import LEFT, N_FIXED_ENTITIES, RIGHT, SimState, SymbolTable
from coda.sim.tasks.phases import between_pads, jaws_around


@dataclasses.dataclass(frozen=True)
class TraceRoles:
    """Tracked-body indices the critic's features read (static for a bucket)."""

    obj: int  # the manipulated body (an articulated object's handle)
    obj_name: str  # its object name in the scene
    dest: int | None  # destination body (None for articulated tasks)
    joint: int | None  # articulated joint index
    distractors: tuple[tuple[int, str], ...]  # (body index, object name) of every other object


def trace_roles(compiled: CompiledScene) -> TraceRoles:
    """The object / destination / joint / distractors of a compiled scene, from τ's terminal
    relation (its first argument is what is manipulated, a second role argument where it goes);
    falls back to the order of τ's roles when the relation has no arguments."""
    task, sym = compiled.scene.task, compiled.sym
    if task.get("family") in SCENE_KINDS:  # another kind of scene names its own roles
        obj, name, dest, joint = SCENE_KINDS[task["family"]].trace_roles(compiled)
        return _with_distractors(compiled, obj, name, dest, joint)
    args = [a for a in task.get("terminal", {}).get("args", []) if isinstance(a, str)]
    roles = [a for a in args if a in task.get("roles", {})] or list(task.get("roles", {}))
    if not roles:
        raise ValueError(f"task {task.get('instruction', '?')!r} has no roles; cannot critique")
    obj_role = roles[0]
    obj_key = f"{obj_role}.handle" if sym.has(f"{obj_role}.handle") else obj_role
    dest_role = roles[1] if len(roles) > 1 else None
    joint = sym.joint(obj_role) if any(k == obj_role for k, _ in sym.joints) else None
    dest = sym.body(dest_role) if dest_role is not None else None
    return _with_distractors(compiled, sym.body(obj_key), task["roles"][obj_role], dest, joint)


def _with_distractors(compiled: CompiledScene, obj, name, dest, joint) -> TraceRoles:
    """TraceRoles with every other object's body as a distractor (not the object's, its part's
    owner's `name`, or the destination's)."""
    used = {obj, compiled.object_bodies.get(name)} | ({dest} if dest is not None else set())
    distractors = tuple(sorted((i, n) for n, i in compiled.object_bodies.items() if i not in used))
    return TraceRoles(obj=obj, obj_name=name, dest=dest, joint=joint, distractors=distractors)


def trace_features(states: SimState, roles: TraceRoles) -> dict[str, jnp.ndarray]:
    """Per-endpoint features of traces (pure JAX). states: leaves [B, T, ...].

    Returns {name: [B, T]} (distractor features [B, T, K]): tcp_gap (m from the tcp to the
    object's bounding box, 0 inside it), left / right (finger pad touches the object), grasped,
    opening (finger gap, m), centred (its centre between the pads' faces,
    `phases.between_pads`), ready (its centre between the open jaws, `phases.jaws_around`),
    obj_local ([B, T, 3]: its centre in the tcp frame), obj_height (object bottom above the
    table), obj_disp (xy distance from its start), dest_dist (xy distance object ->
    destination), over_dest (object centre over the destination's footprint), joint_frac,
    d_touch (a finger touches distractor k), d_disp (distractor k's xy distance from its
    start)."""
    dis = tuple(i for i, _ in roles.distractors)
    return _features(states, roles.obj, roles.dest, roles.joint, dis)


@functools.partial(jax.jit, static_argnames=("o", "dest", "joint", "dis"))
def _features(
    states: SimState, o: int, dest: int | None, joint: int | None, dis: tuple[int, ...]
) -> dict[str, jnp.ndarray]:
    """`trace_features` jitted on body indices only (object names do not recompile it)."""
    e = N_FIXED_ENTITIES + o
    local = G.to_local(states, o, states.ee_pos)  # [B, T, 3]
    gap = jnp.linalg.norm(jnp.maximum(jnp.abs(local) - G.half(states, o), 0.0), axis=-1)
    p = G.pos(states, o)  # [B, T, 3]
    out = {
        "tcp_gap": gap,
        "left": G.in_contact(states, LEFT, e),
        "right": G.in_contact(states, RIGHT, e),
        "grasped": G.grasped(states, o),
        "opening": G.gripper_opening(states),
        "centred": between_pads(states, o),
        "ready": jaws_around(states, o),  # its centre between the open jaws (carry reach)
        # its centre in the tcp frame: along the pads' face (x), closing axis (y), up (z)
        "obj_local": jnp.einsum(
            "...ji,...j->...i", G.quat_to_mat(states.ee_quat), G.pos(states, o) - states.ee_pos
        ),
        "obj_height": G.height(states, o),
        "obj_disp": G.xy_distance(p, p[:, :1]),
    }
    b, t = gap.shape
    if dest is not None:
        out["dest_dist"] = G.xy_distance(p, G.pos(states, dest))
        out["over_dest"] = G.within_footprint(states, p, dest)
    if joint is not None:
        out["joint_frac"] = G.joint_fraction(states, joint)
    touch, disp = [], []
    for i in dis:
        ed = N_FIXED_ENTITIES + i
        touch.append(G.in_contact(states, LEFT, ed) | G.in_contact(states, RIGHT, ed))
        q = G.pos(states, i)
        disp.append(G.xy_distance(q, q[:, :1]))
    out["d_touch"] = jnp.stack(touch, -1) if touch else jnp.zeros((b, t, 0), bool)
    out["d_disp"] = jnp.stack(disp, -1) if disp else jnp.zeros((b, t, 0), gap.dtype)
    return out


# one jitted segmenter per task structure; bounded, emptied when a run ends (coda.lifetime)
_SEGMENTERS = lifetime.RunCache("critic.segmenters", maxsize=128)


def _segmenter(task: dict, sym: SymbolTable, compiled: CompiledScene | None = None):
    """`tasks.segment` for one task structure, jitted once (its phases are closures made per
    call of `task_phases`, so they cannot be jit-static arguments themselves). A scene of
    another kind (`registries.SCENE_KINDS`, e.g. LIBERO) takes its phases from its compiled
    scene, one segmenter per `segment_key`."""
    kind = SCENE_KINDS[task["family"]] if task["family"] in SCENE_KINDS else None
    if kind is not None and compiled is None:
        raise ValueError(f"a {task['family']} scene is segmented from its compiled scene")
    key = (
        task["family"],
        json.dumps(task.get("params", {}), sort_keys=True),
        json.dumps(task.get("roles", {}), sort_keys=True),
        sym,
        None if kind is None else kind.segment_key(compiled),
    )

    def make():
        phases = tasks.task_phases(task) if kind is None else kind.phases(compiled)
        names = tuple(p.name for p in phases)
        return names, jax.jit(lambda states: tasks.segment(states, sym, phases))

    return _SEGMENTERS.get(key, make)


def segment_states(
    task: dict, sym: SymbolTable, states: SimState, compiled: CompiledScene | None = None
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(phase names, phase_index [B, T], stopped_at [B]) of traces (leaves [B, T, ...]);
    `compiled`: one of the traces' scenes (needed for scene kinds other than our families)."""
    names, fn = _segmenter(task, sym, compiled)
    idx, stop = fn(states)
    return names, np.asarray(idx), np.asarray(stop)


def segment_bucket(
    bucket: Bucket, states: SimState
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(phase names, phase_index [B, T], stopped_at [B]) of a bucket's traces."""
    return segment_states(bucket.scene_task, bucket.sym, states, bucket.variants[0])


@dataclasses.dataclass
class Episode:
    """One rolled-out variant, as the critics read it. Arrays are numpy, time-major."""

    compiled: CompiledScene
    states: SimState  # leaves [T, ...]: t=0 and every chunk endpoint
    qpos: np.ndarray  # [T, nq] for replay / keyframes
    phase_names: tuple[str, ...]
    phase_index: np.ndarray  # [T] phases completed in order by endpoint t
    stopped_at: int  # first phase never completed (len(phase_names) when all were)
    success: bool
    sim_failed: bool
    roles: TraceRoles
    features: dict[str, np.ndarray]  # [T] (distractor features [T, K])
    actions: np.ndarray | None = None  # [C, H, 7] the executed action chunks
    variant: int = 0  # index in its bucket
    structure_key: str = ""
    scene_program_id: int | None = None
    deployment_id: int | None = None
    mode_id: int | None = None  # the memory mode this scene was generated for (None: novel)
    # states the phase segmentation read: every control step of a replay (C * H + 1) or the
    # chunk endpoints (T) when there was none or it did not match the recording
    phase_steps: int = 0

    @property
    def scene(self) -> Scene:
        return self.compiled.scene

    @property
    def family(self) -> str:
        return self.scene.task["family"]

    @property
    def instruction(self) -> str:
        return self.scene.task.get("instruction", "")

    @property
    def num_endpoints(self) -> int:
        return int(self.phase_index.shape[0])

    @property
    def stopped_phase(self) -> str:
        """The phase where progress stopped (the last phase when all completed but ν failed)."""
        return self.phase_names[min(self.stopped_at, len(self.phase_names) - 1)]

    def entered_stopped_phase(self) -> int:
        """First endpoint at which every phase before the stopped one had completed."""
        hit = np.nonzero(self.phase_index >= min(self.stopped_at, len(self.phase_names)))[0]
        return int(hit[0]) if hit.size else self.num_endpoints - 1


def episodes_from_rollout(
    bucket: Bucket,
    result: RolloutResult,
    *,
    failed_only: bool = True,
    scene_program_ids: Sequence[int | None] | None = None,
    deployment_ids: Sequence[int | None] | None = None,
    mode_ids: Sequence[int | None] | None = None,
    control_steps: bool = True,
) -> list[Episode]:
    """Episodes of a bucket's valid variants (only the failed ones by default); provenance ids
    are per valid variant, in bucket order. control_steps: the phases are segmented on each
    episode's control-step replay (`coda.critic.replay`) where it matches the recording, else
    (and with False) on the chunk endpoints."""
    names, idx, stop = segment_bucket(bucket, result.states)
    roles = trace_roles(bucket.variants[0])
    feats = jax.tree_util.tree_map(np.asarray, trace_features(result.states, roles))
    success = np.asarray(result.success)
    failed = np.asarray(result.failed)
    steps = np.zeros(len(idx), int)  # states the segmentation read per variant
    if control_steps:
        rows = [i for i in range(len(bucket.variants)) if not failed[i]]
        rows = [i for i in rows if not (failed_only and success[i])]
        idx, stop, steps = _control_step_phases(bucket, result, rows, idx, stop)
    qpos = np.asarray(result.qpos)
    actions = np.asarray(result.actions)
    out = []
    for i, c in enumerate(bucket.variants):
        if failed_only and success[i]:
            continue
        out.append(
            Episode(
                compiled=c,
                states=jax.tree_util.tree_map(lambda x, i=i: np.asarray(x[i]), result.states),
                qpos=qpos[i],
                phase_names=names,
                phase_index=idx[i],
                stopped_at=int(stop[i]),
                success=bool(success[i]),
                sim_failed=bool(failed[i]),
                roles=roles,
                features={k: v[i] for k, v in feats.items()},
                actions=actions[i],
                phase_steps=int(steps[i]) or int(idx.shape[1]),
                variant=i,
                structure_key=c.structure_key,
                scene_program_id=None if scene_program_ids is None else scene_program_ids[i],
                deployment_id=None if deployment_ids is None else deployment_ids[i],
                mode_id=None if mode_ids is None else mode_ids[i],
            )
        )
    return out


def _control_step_phases(bucket, result, rows, idx, stop):
    """(phase_index [B, T], stopped_at [B], states read [B]) with the `rows` whose control-step
    replay matches the recording segmented on it (the index sampled at each chunk endpoint)."""
    steps = np.zeros(len(idx), int)
    if not rows:
        return idx, stop, steps
    fine, ok = replay.control_step_states(bucket, result, np.asarray(rows))
    n = len(rows)
    pad = 1 << (n - 1).bit_length()  # a few batch shapes, so the segmenter compiles a few times
    fine = jax.tree_util.tree_map(
        lambda x: jnp.concatenate([x, jnp.repeat(x[:1], pad - n, 0)]) if pad > n else x, fine
    )
    _, fidx, fstop = segment_bucket(bucket, fine)
    horizon = (fidx.shape[1] - 1) // (idx.shape[1] - 1)
    idx, stop = idx.copy(), stop.copy()
    for r, i in enumerate(rows):
        if ok[r]:
            idx[i], stop[i], steps[i] = fidx[r, ::horizon], fstop[r], fidx.shape[1]
    return idx, stop, steps


def make_episode(
    compiled: CompiledScene,
    states: SimState,
    *,
    qpos: np.ndarray | None = None,
    actions: np.ndarray | None = None,
    success: bool = False,
    sim_failed: bool = False,
) -> Episode:
    """An episode from one trace of `compiled` (states: leaves [T, ...]; e.g. hand-built, or a
    trace recorded elsewhere); qpos [T, nq] defaults to the initial pose at every endpoint."""
    batched = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], states)  # [1, T, ...]
    names, idx, stop = segment_states(compiled.scene.task, compiled.sym, batched, compiled)
    roles = trace_roles(compiled)
    feats = {k: np.asarray(v[0]) for k, v in trace_features(batched, roles).items()}
    t = int(idx.shape[1])
    return Episode(
        compiled=compiled,
        states=jax.tree_util.tree_map(np.asarray, states),
        qpos=np.tile(compiled.init_qpos, (t, 1)) if qpos is None else np.asarray(qpos),
        phase_names=names,
        phase_index=idx[0],
        stopped_at=int(stop[0]),
        success=success,
        sim_failed=sim_failed,
        roles=roles,
        features=feats,
        actions=None if actions is None else np.asarray(actions),
        structure_key=compiled.structure_key,
    )


def keyframe_indices(ep: Episode, extra: Sequence[int] = (), max_frames: int = 6) -> list[int]:
    """Chunk endpoints worth showing: t=0, the first endpoint of every phase segment, `extra`
    (e.g. the evidence's chunks) and the last endpoint; at most `max_frames`, keeping the first,
    the last and the stopped phase's entry."""
    t_last = ep.num_endpoints - 1
    changes = [int(t) for t in np.nonzero(np.diff(ep.phase_index) > 0)[0] + 1]
    must = sorted({0, t_last, ep.entered_stopped_phase()})
    rest = sorted({*changes, *(int(t) for t in extra if 0 <= t <= t_last)} - set(must))
    room = max(max_frames - len(must), 0)
    if len(rest) > room:  # spread the remaining picks evenly
        pick = np.linspace(0, len(rest) - 1, room).round().astype(int) if room else []
        rest = [rest[k] for k in sorted(set(pick))]
    return sorted(set(must) | set(rest))


def keyframe_label(ep: Episode, t: int) -> str:
    k = int(ep.phase_index[t])
    where = "all phases done" if k >= len(ep.phase_names) else f"in phase {ep.phase_names[k]!r}"
    return f"chunk endpoint {t} ({where})"


def render_keyframes(
    ep: Episode, indices: Sequence[int], width: int = 224, height: int = 224
) -> np.ndarray:  # [K, H, W, 3] uint8
    """Frames of the episode at the given chunk endpoints (headless GL; `RenderUnavailable`
    when none works; GL is set up on the first render, not on import)."""
    return render.render_states(
        ep.compiled.model, ep.qpos[np.asarray(indices, int)], width=width, height=height
    )
