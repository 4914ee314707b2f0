"""Issue 28's phase and factor rules on synthetic traces and probe outcomes (fast tier):
a grasp holds the object's centre between the pads' faces (`phases.between_pads`) and is
finished only when the hand goes on to lift (`Phase.moved_on`); a factor's control is the
repeats and the other factors' near probes (`probes.control`); undecided episodes get a second
round of probes (`probes.undecided`, `followup_plan`, `merge`); the relation probe
(`directed.layout_relation`)."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from coda.critic import directed
from coda.critic.probes import (
    ProbeStats,
    attribute,
    control,
    followup_plan,
    isolate_task_probe,
    merge,
    undecided,
)
from coda.sim import robot
from coda.sim.compile import compile_scene
from coda.sim.scene import resample
from coda.sim.sdk import exec_program
from coda.sim.tasks import phases as ph

PICK = """
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


def _state(offset):
    """One body at the origin, the tcp at -offset (so the body sits at +offset in its frame)."""
    return types.SimpleNamespace(
        ee_pos=-np.asarray(offset, np.float32)[None],
        ee_quat=np.array([[1.0, 0, 0, 0]], np.float32),
        body_pos=np.zeros((1, 1, 3), np.float32),
    )


@pytest.mark.parametrize(
    "offset, held",
    [
        ((0.0, 0.0, 0.0), True),  # centred
        ((0.0, 0.02, 0.0), True),  # along the closing axis: the pads' contacts decide that
        ((robot.FINGER_HALF[0] + 0.004, 0.0, 0.0), False),  # beside the pads' faces: an edge
        ((0.0, 0.0, ph.PAD_Z[0] - 0.01), False),  # below the pads: jaws closed above it
        ((0.0, 0.0, 0.03), True),  # higher up the pads
    ],
)
def test_between_pads(offset, held):
    assert bool(np.asarray(ph.between_pads(_state(offset), 0))[0]) is held


def _segment(grasp, lift, hand):
    """stopped_at of phases (grasp, lift [moved_on: hand], end) over one trace of bools."""
    t = len(grasp)
    states = types.SimpleNamespace(ee_pos=np.zeros((1, t, 3)))
    arr = {k: np.asarray([v], bool) for k, v in (("g", grasp), ("l", lift), ("h", hand))}
    phases = (
        ph.Phase("grasp", lambda s, sym: arr["g"]),
        ph.Phase("lift", lambda s, sym: arr["l"], moved_on=lambda s, sym: arr["h"]),
        ph.Phase("end", lambda s, sym: np.zeros_like(arr["g"])),
    )
    idx, stop = ph.segment(states, None, phases)
    return np.asarray(idx)[0].tolist(), int(np.asarray(stop)[0])


def test_grasp_finished_only_when_the_hand_moves_on():
    # held at t=1..4, the hand never rises: a grasp never finished (stuck or still closing)
    assert _segment([0, 1, 1, 1, 1], [0] * 5, [0] * 5)[1] == 0
    # held at t=1 only, the hand rose at t=3 without the object: a failed lift
    idx, stop = _segment([0, 1, 0, 0, 0], [0] * 5, [0, 0, 0, 1, 1])
    assert stop == 1 and idx == [0, 1, 1, 1, 1]
    # lifted with it: both phases done
    assert _segment([0, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 1, 1, 1])[1] == 2
    assert ph.later(np.array([[0, 1, 0, 0]], bool)).tolist() == [[True, True, False, False]]


def _stats(rows, repeats=(0, 1)):
    st = ProbeStats()
    for f, kind, ok in rows:
        st.count(f, kind)
        st.count(f, kind, ok)
    st.repeat_success, st.n_repeats = repeats
    return st


def test_own_near_flip_is_evidence_for_the_factor():
    # a distance near its threshold: the near layout probe flips as the changes do
    st = _stats(
        [("layout", "away", 1), ("layout", "redraw", 1), ("layout", "near", 1)]
        + [("attributes", "away", 0), ("attributes", "near", 0)]
    )
    assert control(st, "layout") == pytest.approx(0.0, abs=0.0)
    assert control(st, "attributes") == pytest.approx(1.0, abs=0.0)
    assert attribute(st)[0] == "layout" and undecided(st) == ()


def test_undecided_episodes_get_a_second_round():
    nothing = _stats([("layout", "away", 0), ("attributes", "away", 0), ("task", "redraw", 0)])
    assert attribute(nothing)[1]["execution_evidence"] == 2.0
    assert undecided(nothing) == ("task", "layout", "attributes")
    tie = _stats([("layout", "away", 1), ("attributes", "away", 1), ("task", "redraw", 0)])
    assert undecided(tie) == ("layout", "attributes")
    assert undecided(_stats([("layout", "away", 0)], repeats=(1, 1))) == ()  # inconsistent
    assert followup_plan("layout", 2) == ["relation", "redraw"]
    assert followup_plan("attributes", 2) == ["redraw", "redraw"]
    more = _stats(
        [("layout", "relation", 1), ("layout", "redraw", 1), ("attributes", "redraw", 0)],
        repeats=(0, 0),
    )
    both = merge(tie, more)
    assert both.n["layout"] == 3 and both.success["layout"] == 3 and both.n_repeats == 1
    assert both.kinds["layout/relation"] == [1, 1]
    assert attribute(both)[0] == "layout" and undecided(both) == ()


def test_layout_relation_moves_the_distance_to_the_other_end():
    scene = exec_program(PICK, seed=3, isolation="inprocess")

    def dist(s):
        p, q = s.layout["target"], s.layout["goal"]
        return math.hypot(p["x"] - q["x"], p["y"] - q["y"])

    far = scene
    far.layout["target"] = {**far.layout["target"], "x": 0.34, "y": -0.2}
    far.layout["goal"] = {**far.layout["goal"], "x": 0.58, "y": 0.18}
    for k in list(far.layout):
        if k not in ("target", "goal"):
            far.layout[k] = {**far.layout[k], "x": 0.6, "y": -0.2}
    near = directed.layout_relation(far, 0)
    assert near is not None and dist(near) < 0.5 * dist(far)
    back = directed.layout_relation(near, 1)
    assert back is not None and dist(back) > 2 * dist(near)
    assert near.layout["goal"] == far.layout["goal"]  # only the focus object moves


TWO_CUBES = """
add_object("cube", role="target", instance="cube_red")
add_object("cube", instance="cube_blue")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


def test_task_probe_holds_the_roles_place():
    scene = exec_program(TWO_CUBES, seed=2, isolation="inprocess")
    probe = resample(scene, "task", 0)
    old, new = scene.task["roles"]["target"], probe.task["roles"]["target"]
    assert old != new
    out = isolate_task_probe(compile_scene(scene), probe)
    assert out.layout[new] == scene.layout[old] and out.layout[old] == scene.layout[new]


def test_layout_away_tries_other_far_spots_when_blocked():
    scene = exec_program(PICK, seed=3, isolation="inprocess")
    scene.layout["target"] = {**scene.layout["target"], "x": 0.36, "y": -0.2}
    far = directed.layout_away(scene, 0)
    fx, fy = far.layout["target"]["x"], far.layout["target"]["y"]
    # block that spot with the plate: the probe still lands on the far side of both axes
    scene.layout["goal"] = {**scene.layout["goal"], "x": fx, "y": fy}
    for k in scene.layout:
        if k not in ("target", "goal"):
            scene.layout[k] = {**scene.layout[k], "x": 0.34, "y": 0.0}
    moved = directed.layout_away(scene, 0).layout["target"]
    assert moved["x"] > 0.47 and moved["y"] > 0.0
    assert math.hypot(moved["x"] - fx, moved["y"] - fy) > 0.05
