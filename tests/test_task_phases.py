"""Task phases: every family's ordered phases, the segmentation of traces, and its tie to the
scripted planner's own phase labels."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.sim import tasks
from coda.sim.planner import planner_for
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks.phases import REACH_MARGIN, segment

NUM_CHUNKS = 14  # = conftest.PLANNER_DEMO_CHUNKS, the length of the shared demos

# Planner phase (by name) -> (min, max) task phases completed at a chunk endpoint reached while
# the planner was in it. Pick-like families: task phases reach, grasp, lift, transport, ν.
PICK_LINK = {
    "approach": (0, 1),
    "descend": (0, 1),
    "grasp": (0, 2),
    "lift": (2, 3),
    "transport": (3, 4),
    "lower": (3, 4),
    "release": (4, 5),
    "retreat": (4, 5),
}
# Articulated: task phases reach, grasp, ν (open / close).
ARTICULATED_LINK = {
    "approach": (0, 1),
    "descend": (0, 1),
    "grasp": (0, 2),
    "pull": (2, 3),
    "release": (3, 3),
    "retreat": (3, 3),
}


def _segment(bucket, r):
    """(phases, index [B, T], stopped [B]) of a rollout's valid variants, by its family."""
    task = bucket.scene_task
    phases = tasks.task_phases(task)
    fam = tasks.get_family(task["family"])
    index, stopped = jax.jit(lambda s: fam.segment(s, bucket.sym, task))(r.states)
    n = len(bucket.variants)
    return phases, np.asarray(index)[:n], np.asarray(stopped)[:n]


@pytest.fixture(scope="module")
def planner_traces(planner_demos):
    """{family: [(bucket, rollout, phases, index [B, T], stopped [B])]} for planner demos."""
    return {
        family: [(b, r, *_segment(b, r)) for b, r in demos]
        for family, demos in planner_demos.items()
    }


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_planner_demos_complete_every_phase_in_order(family, planner_traces):
    for bucket, r, phases, index, stopped in planner_traces[family]:
        n = len(bucket.variants)
        assert index.shape == (n, NUM_CHUNKS + 1)
        assert (index[:, 0] == 0).all(), index
        assert (np.diff(index, axis=1) >= 0).all(), f"segmentation not monotone: {index}"
        np.testing.assert_array_equal(stopped, index[:, -1])
        ok = np.asarray(r.success_any)[:n]
        assert ok.mean() >= 0.9, f"{family}: planner demos failed: {ok}"
        # a successful demo completes every phase; ν is the last phase
        assert (stopped[ok] == len(phases)).all(), (family, stopped, ok)
        # each phase is first completed at some endpoint (several may complete in one chunk)
        for k in range(len(phases)):
            assert (index[ok] > k).any(axis=1).all(), f"{family}: phase {phases[k].name} skipped"


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_task_phases_follow_planner_labels(family, planner_traces):
    link = ARTICULATED_LINK if family == "articulated" else PICK_LINK
    for bucket, r, phases, index, _ in planner_traces[family]:
        planner = planner_for(bucket)
        assert tuple(link) == planner.phase_names
        assert max(h for _, h in link.values()) == len(phases)
        n = len(bucket.variants)
        # the planner's label of the last control step of chunk c belongs to endpoint c + 1
        labels = np.asarray(r.info["phase"])[:n, :, -1]  # [B, C]
        assert (np.diff(labels, axis=1) >= 0).all(), f"planner labels not monotone: {labels}"
        lo = np.array([link[name][0] for name in planner.phase_names])[labels]  # [B, C]
        hi = np.array([link[name][1] for name in planner.phase_names])[labels]
        task = index[:, 1:]  # [B, C]
        assert ((task >= lo) & (task <= hi)).all(), (family, labels, task)
        # task phase index is monotone in the planner label (both advance along a demo)
        order = np.lexsort((task.ravel(), labels.ravel()))
        assert (np.diff(task.ravel()[order]) >= 0).all()


def test_random_policy_stops_early(random_demos):
    stops = []
    for family in sorted(random_demos):
        _, index, stopped = _segment(*random_demos[family])
        assert (np.diff(index, axis=1) >= 0).all()
        stops.extend(stopped.tolist())
    assert np.mean(np.asarray(stops) <= 1) >= 0.75, stops


# ----------------------------------------------------------------------------- hand-built


def _trace(ee_pos, target_pos, grasped):
    """A [1, T] pick-place trace: body 0 target cube (2 cm half), body 1 goal plate at x=0.7."""
    t = len(ee_pos)
    contact = np.zeros((t, 5, 5), np.float32)
    for k, g in enumerate(grasped):
        if g:
            contact[k, 1, 3] = contact[k, 3, 1] = contact[k, 2, 3] = contact[k, 3, 2] = 1
    body_pos = np.stack([np.asarray(target_pos), np.tile([0.7, 0.0, 0.006], (t, 1))], 1)
    s = SimState(
        ee_pos=jnp.asarray(ee_pos, jnp.float32),
        ee_quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (t, 1)),
        finger=jnp.full((t, 2), 0.02),
        body_pos=jnp.asarray(body_pos, jnp.float32),
        body_quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (t, 2, 1)),
        joint_pos=jnp.zeros((t, 0)),
        contact=jnp.asarray(contact),
        body_half=jnp.tile(jnp.array([[0.02, 0.02, 0.02], [0.08, 0.08, 0.006]]), (t, 1, 1)),
        inner=jnp.zeros((t, 2, 4)),
        joint_range=jnp.zeros((t, 0, 2)),
        body_linvel=jnp.zeros((t, 2, 3)),
        body_angvel=jnp.zeros((t, 2, 3)),
    )
    return jax.tree_util.tree_map(lambda x: x[None], s)  # leaves [1, T, ...]


SYM = SymbolTable(bodies=(("target", 0), ("goal", 1)))
PICK_PHASES = tasks.get_family("pick_place").task_phases({"family": "pick_place"})


def test_hovering_without_grasp_stops_at_grasp():
    cube = [0.5, 0.0, 0.02]
    around = [0.5, 0.0, 0.02]  # the cube between the open jaws (4 cm apart), fingers off
    s = _trace([[0.3, 0.0, 0.3], around, around], [cube] * 3, [False] * 3)
    index, stopped = segment(s, SYM, PICK_PHASES)
    np.testing.assert_array_equal(np.asarray(index), [[0, 1, 1]])
    assert int(stopped[0]) == 1 and PICK_PHASES[1].name == "grasp"


def test_hovering_above_or_beside_is_not_reached():
    """Reached = the object between the open jaws (`phases.jaws_around`), not the tcp within a
    few cm of it: above it (pads over its top), beside it along the closing axis, or in front
    of the pads' faces, closing the jaws would not hold it."""
    cube = [0.5, 0.0, 0.02]
    for tcp in (
        [0.5, 0.0, 0.04 + 0.5 * REACH_MARGIN],  # 3 cm above its centre: inside the grown box
        [0.5, 0.03, 0.02],  # its centre 3 cm to the side, outside the 4 cm opening
        [0.515, 0.0, 0.02],  # 1.5 cm along the pads' face (pad half-length 8 mm)
    ):
        s = _trace([[0.3, 0.0, 0.3], tcp, tcp], [cube] * 3, [False] * 3)
        index, stopped = segment(s, SYM, PICK_PHASES)
        np.testing.assert_array_equal(np.asarray(index), [[0, 0, 0]], err_msg=str(tcp))
        assert int(stopped[0]) == 0


def test_a_phase_counts_once_reached_and_only_in_order():
    cube, up = [0.5, 0.0, 0.02], [0.5, 0.0, 0.08]
    over_goal = [0.7, 0.0, 0.04]  # centre over the plate, bottom above its top
    # t0 far; t1 at the cube and grasped, lifted at once; t2 dropped back: lift still counts
    s = _trace([[0.3, 0, 0.3], up, cube], [cube, up, cube], [False, True, False])
    index, stopped = segment(s, SYM, PICK_PHASES)
    np.testing.assert_array_equal(np.asarray(index), [[0, 3, 3]])
    assert PICK_PHASES[int(stopped[0])].name == "transport"
    # the target over the goal, never reached nor grasped: transport does not count
    s2 = _trace([[0.3, 0, 0.3]] * 2, [over_goal] * 2, [False] * 2)
    assert bool(PICK_PHASES[3].done(s2, SYM).all())
    index2, stopped2 = jax.jit(lambda st: segment(st, SYM, PICK_PHASES))(s2)
    np.testing.assert_array_equal(np.asarray(index2), [[0, 0]])
    assert int(stopped2[0]) == 0


def test_a_phase_must_hold_until_the_next_one_starts():
    """Transport (the target at the goal) counts only if it still holds when the target leaves
    the jaws (ν's start), or at the end if it never does: carried across the goal and let go
    beside it is not transport; lowered onto the goal and let go there is."""
    cube, up = [0.5, 0.0, 0.02], [0.5, 0.0, 0.08]
    over, beside = [0.7, 0.0, 0.08], [0.7, 0.3, 0.08]
    far = [0.3, 0.0, 0.3]
    # t1 grasped and lifted, t2 over the goal, t3 carried beside it, t4 let go there
    targets = [cube, up, over, beside, [0.7, 0.3, 0.02]]
    s = _trace([far, *targets[1:]], targets, [False, True, True, True, False])
    index, stopped = jax.jit(lambda st: segment(st, SYM, PICK_PHASES))(s)
    np.testing.assert_array_equal(np.asarray(index), [[0, 3, 3, 3, 3]])
    assert PICK_PHASES[int(stopped[0])].name == "transport"
    # still held beside the goal at the end: not transport either
    index, _ = segment(
        _trace([far, *targets[1:4]], targets[:4], [False] + [True] * 3), SYM, PICK_PHASES
    )
    np.testing.assert_array_equal(np.asarray(index), [[0, 3, 3, 3]])
    # t3 lowered onto the goal, t4 let go there: transport from t2 (ν needs a support contact)
    on = [0.7, 0.0, 0.033]
    targets = [cube, up, over, on, on]
    s = _trace([far, *targets[1:]], targets, [False, True, True, True, False])
    index, stopped = segment(s, SYM, PICK_PHASES)
    np.testing.assert_array_equal(np.asarray(index), [[0, 3, 4, 4, 4]])
    assert PICK_PHASES[int(stopped[0])].name == "place"
    # held over the goal to the end (never let go): transport holds, ν not reached
    index, _ = segment(
        _trace([far, *targets[1:3]], targets[:3], [False, True, True]), SYM, PICK_PHASES
    )
    np.testing.assert_array_equal(np.asarray(index), [[0, 3, 4]])


def test_segment_rejects_bad_input():
    s = _trace([[0.3, 0, 0.3]], [[0.5, 0, 0.02]], [False])
    with pytest.raises(ValueError, match="at least one phase"):
        segment(s, SYM, ())
    flat = jax.tree_util.tree_map(lambda x: x[0], s)  # leaves [T, ...]
    with pytest.raises(ValueError, match="ee_pos"):
        segment(flat, SYM, PICK_PHASES)
