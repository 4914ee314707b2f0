"""The failure critic's schema, cause rules, probes, selection and the offline critic end to end.

Cause rules run on hand-built `SimState` traces (exact, cheap); the offline critic runs once on a
real native rollout of a scripted planner with a planted flaw (its gripper never opens wider than
4 cm; the pads' position servos are soft, so cubes up to ~4.4 cm still pass, wider ones stay
wedged between the fingers), and once with `RandomPolicy`.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from typing import Any

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from coda.critic import (
    CAUSES,
    CRITICS,
    DIAGNOSIS_SCHEMA,
    Diagnosis,
    DiagnosisError,
    Evidence,
    OfflineCritic,
    PhaseError,
    ProbeStats,
    attribute,
    episodes_from_rollout,
    grip_capacity,
    infer_cause,
    isolate_task_probe,
    keyframe_indices,
    make_critic,
    make_episode,
    select_failures,
    validate_diagnosis,
)
from coda.memory import MemoryStore
from coda.sim import robot
from coda.sim.compile import compile_scene
from coda.sim.planner import RandomPolicy, narrow_grip
from coda.sim.rollout import make_buckets
from coda.sim.scene import resample
from coda.sim.sdk import exec_program
from coda.sim.state import LEFT, N_FIXED_ENTITIES, RIGHT, SimState

PHASES = ("reach", "grasp", "lift", "transport", "place")


def _valid() -> dict[str, Any]:
    return {
        "factor": "attributes",
        "phase": "grasp",
        "cause": "object_too_wide",
        "cause_text": "the cube is wider than the fingers opened",
        "evidence": {
            "chunks": [3],
            "keyframes": [0, 3, 5],
            "numbers": [{"name": "object_width_m", "value": 0.047}],
        },
    }


# ----------------------------------------------------------------------------- schema


def test_valid_diagnosis_round_trips():
    d = validate_diagnosis(_valid(), PHASES, num_endpoints=6, critic="vlm", model="m")
    assert (d.factor, d.phase, d.cause, d.critic, d.model) == (
        "attributes",
        "grasp",
        "object_too_wide",
        "vlm",
        "m",
    )
    assert d.evidence.chunks == (3,) and d.evidence.keyframes == (0, 3, 5)
    assert d.evidence.numbers["object_width_m"] == pytest.approx(0.047, abs=1e-12)
    assert validate_diagnosis(d.to_json(), PHASES) == dataclasses.replace(d, critic="", model="")
    assert d.memory_cause().startswith("object_too_wide: ")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda v: v.update(cause="gripper_is_sad"), "is not one of"),
        (lambda v: v.update(factor="lighting"), "is not one of"),
        (lambda v: v.pop("evidence"), "missing required property 'evidence'"),
        (lambda v: v.update(extra=1), "unexpected property 'extra'"),
        (lambda v: v["evidence"].update(chunks=[-1]), "minimum"),
        (lambda v: v["evidence"].update(chunks=[9]), r"indices \[9\] past .* endpoint 5"),
        (
            lambda v: v["evidence"]["numbers"].append({"name": "object_width_m", "value": 1}),
            "duplicate names",
        ),
    ],
)
def test_invalid_diagnoses_are_rejected(edit, match):
    v = _valid()
    edit(v)
    with pytest.raises(DiagnosisError, match=match):
        validate_diagnosis(v, PHASES, num_endpoints=6)


def test_a_phase_the_family_lacks_is_rejected_with_the_valid_names():
    v = _valid()
    v["phase"] = "pour"
    with pytest.raises(PhaseError, match=r"'pour' is not a phase of family 'pick_place'.*'reach'"):
        validate_diagnosis(v, PHASES, family="pick_place")


def test_schema_is_strict_mode_compatible_and_lists_the_vocabularies():
    """OpenAI strict structured output: every object closed and every property required."""

    def walk(s):
        if s.get("type") == "object":
            assert s["additionalProperties"] is False
            assert sorted(s["required"]) == sorted(s["properties"])
            for sub in s["properties"].values():
                walk(sub)
        if s.get("type") == "array":
            walk(s["items"])

    walk(DIAGNOSIS_SCHEMA)
    assert DIAGNOSIS_SCHEMA["properties"]["cause"]["enum"] == list(CAUSES)
    assert DIAGNOSIS_SCHEMA["properties"]["factor"]["enum"] == [
        "task",
        "layout",
        "attributes",
        "execution",
    ]


def test_registry_names_the_valid_critics():
    assert sorted(CRITICS) == ["offline", "vlm"]
    with pytest.raises(KeyError, match=r"unknown critic 'oracle'; valid: offline, vlm"):
        make_critic("oracle")
    c = make_critic("offline", policy=RandomPolicy(), params=None, backend=None, num_chunks=2)
    assert isinstance(c, OfflineCritic) and c.name == "offline"


# ----------------------------------------------------------------------------- hand-built traces

PICK = """
add_object("cube", role="target", instance="cube_red")
set_attributes("target", dims={"half": 0.024})
add_object("plate", role="goal", instance="plate_white")
add_object("ball", role="distractor_0", instance="ball_red")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
DRAWER = """
add_object("cabinet_drawer", role="cabinet", instance="drawer_white")
set_task("articulated", cabinet="cabinet", action="open")
sample_layout()
"""
T = 6  # chunk endpoints of the hand-built traces


@pytest.fixture(scope="module")
def pick():
    return compile_scene(exec_program(PICK, seed=0, isolation="inprocess"))


@pytest.fixture(scope="module")
def drawer():
    return compile_scene(exec_program(DRAWER, seed=0, isolation="inprocess"))


class Trace:
    """A hand-built trace of T chunk endpoints over a compiled scene's tracked bodies."""

    def __init__(self, c):
        self.c = c
        d = mujoco.MjData(c.model)
        d.qpos[:] = c.init_qpos
        mujoco.mj_forward(c.model, d)
        ids = [c.model.body(n).id for n in c.layout.body_names]
        nj, ne = c.layout.n_joints, c.layout.n_entities
        self.ee = np.tile(robot.HOME[:3] - [0, 0, robot.TCP_OFFSET], (T, 1))  # [T, 3]
        self.finger = np.full((T, 2), robot.FINGER_OPEN)  # [T, 2]
        self.body_pos = np.tile(d.xpos[ids], (T, 1, 1))  # [T, NB, 3]
        self.body_quat = np.tile(d.xquat[ids], (T, 1, 1))  # [T, NB, 4]
        self.joint = np.zeros((T, nj))  # [T, NJ]
        self.contact = np.zeros((T, ne, ne))  # [T, NE, NE]

    def touch(self, ts, a: int, b: int) -> None:
        for t in ts:
            self.contact[t, a, b] = self.contact[t, b, a] = 1.0

    def states(self) -> SimState:
        c = self.c
        nb = c.layout.n_bodies
        return SimState(
            ee_pos=self.ee,
            ee_quat=np.tile([1.0, 0, 0, 0], (T, 1)),
            finger=self.finger,
            body_pos=self.body_pos,
            body_quat=self.body_quat,
            joint_pos=self.joint,
            contact=self.contact,
            body_half=np.tile(c.consts["body_half"], (T, 1, 1)),
            inner=np.tile(c.consts["inner"], (T, 1, 1)),
            joint_range=np.tile(c.consts["joint_range"], (T, 1, 1)),
            ee_cmd=np.zeros((T, 6)),
            body_linvel=np.zeros((T, nb, 3)),
            body_angvel=np.zeros((T, nb, 3)),
        )

    def episode(self, **kw):
        return make_episode(self.c, jax.tree_util.tree_map(jnp.asarray, self.states()), **kw)


def _at_target(tr: Trace, start: int = 1) -> int:
    i = tr.c.sym.body("target")
    tr.ee[start:] = tr.body_pos[start:, i]
    return N_FIXED_ENTITIES + i


def test_rules_reach_phase(pick):
    tr = Trace(pick)
    ep = tr.episode()
    assert (ep.stopped_phase, infer_cause(ep).cause) == ("reach", "did_not_approach")
    k = pick.sym.body("distractor_0")
    tr.touch([2], LEFT, N_FIXED_ENTITIES + k)
    tr.body_pos[3:, k, 0] += 0.03
    f = infer_cause(tr.episode())
    assert f.cause == "collision_with_distractor" and "distractor_0" in f.text
    assert f.chunks == (2,)
    assert f.numbers["distractor_disp_m"] == pytest.approx(0.03, abs=1e-6)
    far = Trace(pick)
    far.body_pos[:, pick.sym.body("target"), 0] = 1.1  # beyond x = 0.9 of the reach box
    f = infer_cause(far.episode())
    assert f.cause == "beyond_reach" and f.numbers["reach_excess_m"] > 0.1


def test_rules_grasp_phase(pick):
    tr = Trace(pick)
    _at_target(tr)
    ep = tr.episode()
    assert ep.stopped_phase == "grasp" and ep.entered_stopped_phase() == 1
    assert infer_cause(ep).cause == "no_finger_contact"
    # the fingers never opened beyond 4 cm (measured) around a 4.8 cm cube
    tr.finger[1:] = 0.02
    f = infer_cause(tr.episode())
    assert f.cause == "object_too_wide"
    assert f.numbers["object_width_m"] == pytest.approx(0.048, abs=1e-6)
    assert f.numbers["max_opening_m"] == pytest.approx(0.04, abs=1e-6)
    # the same from the commanded gripper opening in the actions (a[6] -> 4.4 cm gap)
    wide = Trace(pick)
    _at_target(wide)
    actions = np.zeros((T - 1, 4, 7))  # [C, H, 7]
    actions[..., 6] = 2 * (1 - 0.022 / robot.FINGER_OPEN) - 1
    f = infer_cause(wide.episode(actions=actions))
    assert f.cause == "object_too_wide"
    assert f.numbers["max_opening_m"] == pytest.approx(0.044, abs=1e-6)
    one = Trace(pick)
    e = _at_target(one)
    one.touch(range(2, T), LEFT, e)
    assert infer_cause(one.episode()).cause == "one_finger_contact"
    late = Trace(pick)
    _at_target(late, start=T - 2)  # reached only at the second-to-last endpoint
    assert infer_cause(late.episode()).cause == "ran_out_of_time"


def test_rules_lift_phase_slip_and_weight(pick):
    tr = Trace(pick)
    e = _at_target(tr)
    tr.touch([2, 3], LEFT, e)
    tr.touch([2, 3], RIGHT, e)
    tr.ee[4:, 2] += 0.05  # the hand rises without it: the grasp was finished, the lift failed
    ep = tr.episode()
    assert ep.stopped_phase == "lift" and ep.phase_index.tolist() == [0, 1, 2, 2, 2, 2]
    f = infer_cause(ep)
    assert f.cause == "contact_lost" and f.chunks == (2, 4)
    cap, mu, force = grip_capacity(ep)
    assert (mu, force) == pytest.approx((1.5, 15.0), abs=1e-6)  # pad friction, finger force
    assert cap == pytest.approx(2 * 1.5 * 15.0 / 9.81, abs=1e-9)
    scene = copy.deepcopy(ep.scene)
    scene.attributes["target"]["mass"] = 10.0
    heavy = dataclasses.replace(ep, compiled=dataclasses.replace(ep.compiled, scene=scene))
    f = infer_cause(heavy)
    assert f.cause == "object_too_heavy"
    assert f.numbers["mass_kg"] == pytest.approx(10.0, abs=1e-9)


def test_rules_articulated_joint(drawer):
    tr = Trace(drawer)
    h = drawer.sym.body("cabinet.handle")
    tr.ee[1:] = tr.body_pos[1:, h]
    tr.touch(range(2, T), LEFT, N_FIXED_ENTITIES + h)
    tr.touch(range(2, T), RIGHT, N_FIXED_ENTITIES + h)
    ep = tr.episode()
    assert ep.phase_names == ("reach", "grasp", "open") and ep.stopped_phase == "open"
    assert infer_cause(ep).cause == "joint_not_moving"
    lo, hi = drawer.consts["joint_range"][0]
    tr.joint[3:, 0] = lo + 0.3 * (hi - lo)
    f = infer_cause(tr.episode())
    assert f.cause == "joint_short_of_goal"
    assert f.numbers["joint_moved_frac"] == pytest.approx(0.3, abs=1e-5)


def test_diverged_variant_and_keyframes(pick):
    tr = Trace(pick)
    _at_target(tr)
    ep = tr.episode(sim_failed=True)
    assert infer_cause(ep).cause == "simulation_unstable"
    assert keyframe_indices(ep) == [0, 1, T - 1]  # start, reach done (grasp entered), end
    assert keyframe_indices(ep, extra=[3, 4], max_frames=4) in ([0, 1, 3, 5], [0, 1, 4, 5])


# ----------------------------------------------------------------------------- attribution


def _stats(rates: dict[str, tuple[int, int]], repeat=(0, 2)) -> ProbeStats:
    return ProbeStats(
        success={f: s for f, (s, _) in rates.items()},
        n={f: n for f, (_, n) in rates.items()},
        repeat_success=repeat[0],
        n_repeats=repeat[1],
    )


def test_attribution_by_flip_rate():
    f, num = attribute(_stats({"task": (0, 4), "layout": (1, 4), "attributes": (3, 4)}))
    assert f == "attributes"
    assert num["flip_rate_attributes"] == pytest.approx(0.75, abs=1e-12)
    assert num["flip_rate_layout"] == pytest.approx(0.25, abs=1e-12)
    assert attribute(_stats({"task": (0, 4), "layout": (0, 4), "attributes": (0, 4)}))[0] == (
        "execution"
    )
    # the unchanged scene succeeds as often as the best probe: the policy is just unreliable
    st = _stats({"layout": (2, 4), "attributes": (1, 4)}, repeat=(1, 2))
    assert attribute(st)[0] == "execution"
    tie = _stats({"task": (2, 4), "layout": (2, 4), "attributes": (0, 4)})
    assert attribute(tie)[0] == "layout"  # fixed order attributes, layout, task
    assert attribute(tie, hint="task")[0] == "task"  # the cause's factor breaks the tie


PAIR = """
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
add_object("{cat}", role="distractor_0", instance="{inst}")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


def test_task_probe_holds_the_roles_attributes():
    c = compile_scene(
        exec_program(PAIR.format(cat="cube", inst="cube_blue"), seed=3, isolation="inprocess")
    )
    probe = isolate_task_probe(c, resample(c.scene, "task", 0))
    assert probe.task["roles"]["target"] == "distractor_0"
    old, new = c.scene.attributes["target"], probe.attributes["distractor_0"]
    assert (new["mass"], new["friction"]) == (old["mass"], old["friction"])
    pc = compile_scene(probe)
    w_old = 2 * c.consts["body_half"][c.object_bodies["target"]][:2].min()
    w_new = 2 * pc.consts["body_half"][pc.object_bodies["distractor_0"]][:2].min()
    assert w_new == pytest.approx(w_old, abs=1e-4)
    ball = compile_scene(
        exec_program(PAIR.format(cat="ball", inst="ball_red"), seed=3, isolation="inprocess")
    )
    assert isolate_task_probe(ball, resample(ball.scene, "task", 0)) is None  # shape differs


# ----------------------------------------------------------------------------- selection


def _ep(mode, key, phase, success=False):
    return types.SimpleNamespace(
        mode_id=mode, structure_key=key, stopped_phase=phase, success=success
    )


def test_select_failures_caps_per_mode_stratified_and_deterministic():
    eps = [_ep(1, "a", "grasp") for _ in range(6)] + [_ep(1, "a", "lift"), _ep(1, "b", "grasp")]
    eps += [_ep(2, "a", "reach") for _ in range(3)] + [_ep(2, "a", "reach", success=True)]
    eps += [_ep(None, "c", "place")]
    pick1 = select_failures(eps, 3, jax.random.PRNGKey(0))
    assert pick1 == select_failures(eps, 3, jax.random.PRNGKey(0))
    by_mode = {m: [e for e in pick1 if e.mode_id == m] for m in (1, 2, None)}
    assert [len(by_mode[m]) for m in (1, 2, None)] == [3, 3, 1]
    # mode 1 has three strata: one pick from each before a second from any
    assert {(e.structure_key, e.stopped_phase) for e in by_mode[1]} == {
        ("a", "grasp"),
        ("a", "lift"),
        ("b", "grasp"),
    }
    assert not any(e.success for e in pick1)
    picks = {tuple(map(id, select_failures(eps, 1, jax.random.PRNGKey(k)))) for k in range(8)}
    assert len(picks) > 1  # the key matters
    assert select_failures(eps, 0, jax.random.PRNGKey(0)) == []


# ----------------------------------------------------------------------------- real rollouts

SIZED = """
add_object("cube", role="target", instance="cube_red")
set_attributes("target", dims={{"half": {half}}})
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
NUM_CHUNKS = 12  # the planner places a cube by endpoint ~9
BATCH = 16  # the probes of two episodes fit one such bucket: one policy compile serves all


@pytest.fixture(scope="module")
def sized_bucket():
    """Two narrow (3.6 cm) and two wide (4.7 cm) cubes; the flaw traps the wide ones."""
    scenes = [
        exec_program(SIZED.format(half=half), seed=seed, isolation="inprocess")
        for half in (0.018, 0.0235)
        for seed in (0, 1)
    ]
    (bucket,) = make_buckets([compile_scene(s) for s in scenes], batch_size=BATCH)
    return bucket


def test_offline_critic_names_the_planted_flaw(sized_bucket, native_backend):
    b = sized_bucket
    r = native_backend.rollout(b, narrow_grip(b), None, jax.random.PRNGKey(0), NUM_CHUNKS)
    assert np.asarray(r.success)[:4].tolist() == [True, True, False, False]
    eps = episodes_from_rollout(b, r)
    assert [e.variant for e in eps] == [2, 3]
    memory = MemoryStore(":memory:")
    critic = OfflineCritic(
        policy=narrow_grip,
        params=None,
        backend=native_backend,
        num_chunks=NUM_CHUNKS,
        n_probes=3,
        n_repeats=1,
        pad_to=BATCH,
        memory=memory,
    )
    out = critic.diagnose(eps, jax.random.PRNGKey(1), round=2)
    for c in out:
        d = c.diagnosis
        assert (d.factor, d.phase, d.cause) == ("attributes", "place", "object_too_wide"), d
        n = d.evidence.numbers
        assert n["flip_rate_attributes"] > 0.3  # resampled sizes: most cubes fit
        assert n["flip_rate_layout"] == pytest.approx(0.0, abs=1e-12)
        assert n["repeat_success_rate"] == pytest.approx(0.0, abs=1e-12)
        # no other cube to bind: the task probes give the role to another category, same width
        assert n["probes_task_recategorized"] >= 1.0
        # (a ball of the cube's width is gripped above its equator by the narrow jaws, so a
        # recategorized probe may flip it: shape is part of the task; the size factor still
        # wins, by its flip rate or the cause's hint)
        assert n["n_near_attributes"] == pytest.approx(1.0, abs=1e-12)
        assert "probes flipped" in d.cause_text
        assert n["object_width_m"] > n["max_opening_m"] == pytest.approx(0.04, abs=1e-6)
        assert d.critic == "offline" and c.assignment is not None and c.seconds > 0
    modes = memory.modes()
    assert [(m.factor, m.phase, m.n_diagnoses) for m in modes] == [("attribute", "place", 2)]
    (diag,) = memory.diagnoses_for_mode(modes[0].id, limit=1)
    assert diag.round == 2 and diag.evidence["scene_factor"] == "attributes"


@pytest.mark.slow  # ~10 s: another policy compile; `attribute` covers the rule in the default suite
def test_offline_critic_blames_execution_for_a_random_policy(sized_bucket, native_backend):
    b = sized_bucket
    policy = RandomPolicy()
    r = native_backend.rollout(b, policy, None, jax.random.PRNGKey(0), 4)
    eps = episodes_from_rollout(b, r)[:1]
    critic = OfflineCritic(
        policy=policy, params=None, backend=native_backend, num_chunks=4, n_probes=2, pad_to=BATCH
    )
    (c,) = critic.diagnose(eps, jax.random.PRNGKey(2))
    assert c.diagnosis.factor == "execution"
    assert c.diagnosis.phase in eps[0].phase_names and c.diagnosis.cause in CAUSES
    # first round: away + one redraw + the near control; nothing flipped and the repeat
    # failed, so layout was undecided and got a second round (`probes.followup_plan`: the
    # relation probe + one redraw)
    n = c.diagnosis.evidence.numbers
    assert n["repeat_success_rate"] == pytest.approx(0.0, abs=1e-12)
    assert n["n_probes_layout"] == pytest.approx(3.0 + 2.0, abs=1e-12)
    assert "execution:" in c.diagnosis.cause_text
    assert isinstance(c.diagnosis, Diagnosis) and isinstance(c.diagnosis.evidence, Evidence)


@pytest.mark.slow  # probe rollouts twice (split and whole)
def test_probe_rollouts_split_over_hosts_match_one_host(sized_bucket, native_backend):
    """`run_probes(..., split=(i, 2, gather))`: two hosts each roll out every other probe bucket
    and both get the one-host outcomes (simulated in one process: each host's share captured,
    then both run again with the gathered shares)."""
    from coda.critic import run_probes
    from tests import two_hosts

    b = sized_bucket
    r = native_backend.rollout(b, narrow_grip(b), None, jax.random.PRNGKey(0), NUM_CHUNKS)
    eps = episodes_from_rollout(b, r)[:1]
    # a second structure (a distractor added): its probes are another bucket
    other = SIZED.replace(
        "sample_layout()", 'add_object("ball", role="distractor_0")\nsample_layout()'
    )
    (b2,) = make_buckets(
        [compile_scene(exec_program(other.format(half=0.0235), seed=0, isolation="inprocess"))]
    )
    r2 = native_backend.rollout(b2, narrow_grip(b2), None, jax.random.PRNGKey(0), NUM_CHUNKS)
    eps += episodes_from_rollout(b2, r2, failed_only=False)
    kw = dict(policy=narrow_grip, params=None, backend=native_backend, num_chunks=NUM_CHUNKS)
    kw.update(key=jax.random.PRNGKey(3), n_probes=2, n_repeats=1, pad_to=4)
    one = run_probes(eps, **kw)
    assert sum(s.repeat_success + sum(s.n.values()) for s in one) > 0

    shares = two_hosts.shares(lambda split: run_probes(eps, split=split, **kw))
    assert shares[0] and shares[1]  # both hosts rolled out probe buckets
    for h in (0, 1):
        got = run_probes(eps, split=(h, 2, lambda v: list(shares)), **kw)
        assert [dataclasses.asdict(s) for s in got] == [dataclasses.asdict(s) for s in one]
    with pytest.raises(RuntimeError, match="hosts returned probe buckets"):
        run_probes(eps, split=(0, 2, lambda v: [v, []]), **kw)
