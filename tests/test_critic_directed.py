"""Directed counterfactual probes (`coda.critic.directed`) and the control-aware attribution."""

from __future__ import annotations

import pytest

from coda.critic import directed
from coda.critic.probes import ProbeStats, attribute, probe_plan
from coda.sim import assets
from coda.sim.compile import compile_scene
from coda.sim.scene import TABLE_REGION
from coda.sim.sdk import exec_program
from coda.sim.verify import verify

PICK = """
add_object("ball", role="target", instance="ball_red")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
STACK = """
add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", top="top", base="base", mode="stack")
sample_layout()
"""


@pytest.fixture(scope="module")
def pick():
    return exec_program(PICK, seed=1, isolation="inprocess")


def _width(scene, name):
    c = compile_scene(scene)
    return 2 * c.consts["body_half"][c.object_bodies[name]][:2].min()


def test_recategorized_task_probe_changes_the_category_only(pick):
    probe = directed.recategorized(pick, 0)
    old, new = pick.object("target"), probe.object("target")
    assert new.category != old.category and assets.get_category(new.category).graspable
    assert probe.task["roles"] == pick.task["roles"]
    assert probe.task["instruction"] != pick.task["instruction"]
    assert probe.layout == pick.layout  # in place
    a, b = pick.attributes["target"], probe.attributes["target"]
    assert (b["mass"], b["friction"]) == (a["mass"], a["friction"])
    assert _width(probe, "target") == pytest.approx(_width(pick, "target"), abs=1e-4)
    (v,) = verify([compile_scene(probe)])
    assert [r.check for r in v.reasons if r.check != "scale"] == []
    # another seed may draw another category; never the old one
    cats = {directed.recategorized(pick, s).object("target").category for s in range(6)}
    assert old.category not in cats


def test_recategorized_respects_the_family():
    stack = exec_program(STACK, seed=0, isolation="inprocess")
    probe = directed.recategorized(stack, 0)
    assert probe.object("top").category == "block"  # stacking takes cubes or blocks only


def test_layout_away_and_near(pick):
    p = pick.layout["target"]
    away = directed.layout_away(pick, 0)
    q = away.layout["target"]
    (x0, x1), (y0, y1) = TABLE_REGION
    for a, b, lo, hi in ((p["x"], q["x"], x0, x1), (p["y"], q["y"], y0, y1)):
        if b != a:  # a moved axis crosses the region's midline
            assert (a - 0.5 * (lo + hi)) * (b - 0.5 * (lo + hi)) < 0
    assert abs(q["y"] - p["y"]) + abs(q["x"] - p["x"]) > 0.1
    near = directed.layout_near(pick, 0).layout["target"]
    d = ((near["x"] - p["x"]) ** 2 + (near["y"] - p["y"]) ** 2) ** 0.5
    assert d == pytest.approx(directed.NEAR_SHIFT, abs=1e-4)
    assert {k: v for k, v in away.layout.items() if k != "target"} == {
        k: v for k, v in pick.layout.items() if k != "target"
    }


def test_attributes_away_and_near(pick):
    cat = assets.get_category("ball")
    a = pick.attributes["target"]
    b = directed.attributes_away(pick).attributes["target"]
    for v, w, (lo, hi) in (
        (a["mass"], b["mass"], cat.mass),
        (a["friction"], b["friction"], cat.friction),
        (a["dims"]["radius"], b["dims"]["radius"], cat.dims["radius"]),
    ):
        assert w in (lo, hi) and abs(w - v) >= 0.5 * (hi - lo) - 1e-9  # the other end
    c = directed.attributes_near(pick, 0).attributes["target"]
    for v, w in ((a["mass"], c["mass"]), (a["friction"], c["friction"])):
        assert abs(w / v - 1) == pytest.approx(directed.NEAR_SCALE, abs=1e-3)


def test_probe_plan_and_controls():
    assert probe_plan("task", 2) == ["recategorized", "redraw"]
    assert probe_plan("layout", 2) == ["away", "redraw", "near"]
    st = ProbeStats()
    for f, kind, ok in [
        ("layout", "away", 1),
        ("layout", "redraw", 0),
        ("layout", "near", 0),
        ("attributes", "away", 1),
        ("attributes", "redraw", 0),
        ("attributes", "near", 1),  # a small change of it flips it too: near the range's edge
    ]:
        st.count(f, kind)
        st.count(f, kind, ok)
    st.n_repeats = 1
    f, num = attribute(st)
    # attributes' own near flip is evidence for it; it is layout's control (fragility)
    assert f == "attributes" and num["execution_evidence"] == 0.0
    assert num["margin_attributes"] == pytest.approx(0.5, abs=1e-9)
    assert num["margin_layout"] == pytest.approx(-0.5, abs=1e-9)
    assert num["n_probes_layout"] == 3.0 and num["flip_rate_near_attributes"] == 1.0
    st.count("layout", "near", 1)  # small changes of either flip it: fragile, not a factor
    f, num = attribute(st)
    assert f == "execution" and num["execution_evidence"] == 3.0
    st.repeat_success = 1
    assert attribute(st)[1]["execution_evidence"] == 1.0


def test_recategorized_flips_do_not_count_when_attributes_explain():
    st = ProbeStats()
    for f, kind, ok in [
        ("task", "recategorized", 1),  # a ball of the cube's width: shape, confounded with size
        ("task", "redraw", 0),
        ("attributes", "away", 1),
        ("attributes", "redraw", 0),
        ("attributes", "near", 0),
    ]:
        st.count(f, kind)
        st.count(f, kind, ok)
    f, num = attribute(st)
    assert f == "attributes" and num["task_recategorized_confounded"] == 1.0
    assert num["flip_rate_task"] == 0.0
