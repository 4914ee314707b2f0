"""A LIBERO goal's phases (`coda.libero.phases`) segment real traces: the planner's successful
episodes complete every phase, a gripper that holds still completes none, and the last phase is
ν. Skips where LIBERO's data is not installed."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from coda.critic.episode import episodes_from_rollout, trace_roles
from coda.critic.evidence import Finding, infer_cause
from coda.libero import episodes as E
from coda.libero import phases as LP
from coda.libero import scene as S
from coda.libero import suites
from coda.libero.evaluate import HoldPolicy, num_chunks
from coda.libero.planner import planner_for
from coda.sim.bucket import Bucket
from coda.sim.rollout import NativeBackend
from coda.sim.tasks import phases as ph


@pytest.fixture(scope="module")
def spatial_bucket(libero_data):
    task = suites.tasks("libero_spatial")[0]
    return Bucket(
        [E.compile_episode(E.Episode("libero_spatial", task, i).program) for i in range(4)]
    )


def test_placement_goal_phases_and_their_order(spatial_bucket):
    names = [p.name for p in LP.goal_phases(spatial_bucket.variants[0])]
    assert names == ["reach", "grasp", "lift", "transport", "place"]


def test_planner_completes_every_phase_and_holding_still_none(spatial_bucket):
    c0 = spatial_bucket.variants[0]
    phases = LP.goal_phases(c0)
    chunks = num_chunks("libero_spatial", 10)
    backend, key = NativeBackend(), jax.random.PRNGKey(0)
    done = backend.rollout(spatial_bucket, planner_for(c0, 10), None, key, chunks)
    _, stop = ph.segment(done.states, spatial_bucket.sym, phases)
    won = np.asarray(done.success_any) & np.asarray(done.valid)
    assert won.any()
    assert (np.asarray(stop)[won] == len(phases)).all()
    still = backend.rollout(spatial_bucket, HoldPolicy(10), None, key, 4)
    _, stop = ph.segment(still.states, spatial_bucket.sym, phases)
    assert (np.asarray(stop) == 0).all()  # never reached the bowl


def test_the_critic_segments_a_libero_bucket_with_its_goal_phases(spatial_bucket):
    """`coda.critic.segment_bucket` reads a LIBERO scene's phases through its scene kind
    (`registries.SCENE_KINDS`), as it reads a family's through the family."""
    from coda.critic import segment_bucket

    key = jax.random.PRNGKey(1)
    still = NativeBackend().rollout(spatial_bucket, HoldPolicy(10), None, key, 3)
    names, idx, stop = segment_bucket(spatial_bucket, still.states)
    assert names == ("reach", "grasp", "lift", "transport", "place")
    assert idx.shape[0] == stop.shape[0] >= len(spatial_bucket.variants)
    assert (stop == 0).all()


def test_the_critic_probes_a_libero_failure_through_its_scene_kind(spatial_bucket):
    """`coda.critic.probes.run_probes` on a LIBERO failure (a gripper that held still): its
    probes are LIBERO edits of each factor (`coda.libero.kind`), checked by LIBERO's
    verification and rolled out with the given policy (here the planner, which solves them)."""
    from coda.critic.episode import episodes_from_rollout
    from coda.critic.probes import run_probes

    key = jax.random.PRNGKey(2)
    backend = NativeBackend()
    still = backend.rollout(spatial_bucket, HoldPolicy(10), None, key, 3)
    eps = episodes_from_rollout(spatial_bucket, still, control_steps=False)[:1]
    chunks = num_chunks("libero_spatial", 10)
    (st,) = run_probes(
        eps,
        policy=lambda bucket: planner_for(bucket.variants[0], 10),
        params=None,
        backend=backend,
        key=key,
        num_chunks=chunks,
        n_probes=2,
        n_repeats=1,
        pad_to=1,
    )
    assert {f for f, n in st.n.items() if n} == {"layout", "attributes", "task"}
    assert st.n_repeats == 1 and st.repeat_success == 1  # the planner solves the scene itself
    assert sum(st.success.values()) >= 1 and not st.rejected.get("attributes")


def test_the_critic_reads_the_goals_roles_where_obj_of_interest_names_a_region(libero_data):
    """libero_goal's 'open the middle drawer' lists only a region in `:obj_of_interest` (so τ
    has no roles): the critic's object is the drawer the goal's first atom opens, with its
    joint, and the cabinet is no distractor; a placement keeps object -> support. A held-still
    rollout of the drawer task becomes episodes (the study's coda cells crashed here)."""
    names = suites.tasks("libero_goal")
    drawer = next(n for n in names if n == "open_the_middle_drawer_of_the_cabinet")
    c = S.compile_task("libero_goal", drawer, 0, settle=False)
    assert c.scene.task["roles"] == {}
    r = trace_roles(c)
    middle = c.sym.joint("wooden_cabinet_1_middle_level")
    assert (r.obj, r.joint, r.dest) == (c.sym.body("goal0.part"), middle, None)
    assert r.obj_name == "wooden_cabinet_1"
    assert c.object_bodies["wooden_cabinet_1"] not in {i for i, _ in r.distractors}
    plate = S.compile_task("libero_goal", "put_the_bowl_on_the_plate", 0, settle=False)
    rp = trace_roles(plate)
    assert (rp.obj_name, rp.dest) == ("akita_black_bowl_1", plate.object_bodies["plate_1"])
    bucket = Bucket(
        [E.compile_episode(E.Episode("libero_goal", drawer, i).program) for i in (0, 1)]
    )
    still = NativeBackend().rollout(bucket, HoldPolicy(10), None, jax.random.PRNGKey(3), 3)
    eps = episodes_from_rollout(bucket, still, control_steps=False)
    assert len(eps) == 2 and all(e.roles.joint == r.joint for e in eps)
    assert all(np.isfinite(e.features["joint_frac"]).all() for e in eps)


@pytest.mark.parametrize(
    "suite, key",
    [
        ("libero_goal", "open_the_middle_drawer"),
        ("libero_goal", "put_the_bowl_on_the_plate"),
        ("libero_goal", "turn_on_the_stove"),
        ("libero_object", "alphabet_soup"),
        ("libero_10", "moka_pots"),
    ],
)
def test_every_rule_set_of_the_offline_critic_reads_a_libero_episode(libero_data, suite, key):
    """The offline critic's rules for a failure stopped in each phase (and after all of them)
    run on LIBERO episodes: they read what a LIBERO scene has (its attributes name a
    category, not a mass: the lift rules crashed on libero_goal in the fifth study run)."""
    task = next(n for n in suites.tasks(suite) if key in n)
    bucket = Bucket([E.compile_episode(E.Episode(suite, task, 0).program)])
    still = NativeBackend().rollout(bucket, HoldPolicy(10), None, jax.random.PRNGKey(4), 3)
    (ep,) = episodes_from_rollout(bucket, still, control_steps=False)
    for k in range(len(ep.phase_names) + 1):
        finding = infer_cause(dataclasses.replace(ep, stopped_at=k))
        assert isinstance(finding, Finding) and finding.cause and finding.text


@pytest.mark.slow
def test_the_offline_critic_names_a_planted_attribute_flaw_on_libero(spatial_bucket):
    """A policy that fails exactly when the goal's object is a black bowl (the planner
    otherwise): layout probes keep the bowl, task probes keep it too (a new goal for the same
    object), only attribute probes replace it, so the offline critic should name attributes,
    at the reach phase (the gripper never moves)."""
    from coda.critic.episode import episodes_from_rollout
    from coda.critic.offline import OfflineCritic

    def bowl_blind(bucket):
        c = bucket.variants[0]
        obj = next(a[1] for a in c.scene.task["terminal"]["goal"] if len(a) == 3)
        cat = next(o.category for o in c.scene.objects if o.name == obj)
        return HoldPolicy(10) if cat == "libero:akita_black_bowl" else planner_for(c, 10)

    key, backend = jax.random.PRNGKey(3), NativeBackend()
    chunks = num_chunks("libero_spatial", 10)
    res = backend.rollout(spatial_bucket, bowl_blind(spatial_bucket), None, key, chunks)
    eps = episodes_from_rollout(spatial_bucket, res, control_steps=False)[:2]
    assert eps
    critic = OfflineCritic(
        policy=bowl_blind, params=None, backend=backend, num_chunks=chunks, n_probes=3,
        n_repeats=1, pad_to=1,
    )  # fmt: skip
    for c in critic.diagnose(eps, key):
        assert c.diagnosis.factor == "attributes", c.diagnosis.cause_text
        assert c.diagnosis.phase == "reach"
