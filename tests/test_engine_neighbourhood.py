"""Programs written from the evidence (issue 28 item 4): the diagnosed factor kept where the
failures had it (a box, a distance band, a value band, a category / relation), the rest varied;
recreate pairs that differ only in the diagnosed factor; distinct modes, distinct programs."""

from __future__ import annotations

import math

import pytest

from coda.engine import neighbourhood as N
from coda.engine.edits import changed_factors
from coda.engine.engines import ModeSpec, OfflineEngine
from coda.engine.evidence import neighbourhood_program
from coda.engine.generate import make_validation_batches
from coda.engine.programs import Program, ProgramError, apply, program_to_source
from coda.engine.roles import resolve_role
from coda.engine.seeding import seed_scenes
from coda.engine.task_control import task_control
from coda.sim import assets

ATOL = 1e-6
# a side of the table: every failure had its target here (right half, front)
RIGHT = {"edit": "place_in_region", "boxes": {"target": [[0.34, 0.44], [-0.22, -0.12]]}}


@pytest.fixture(scope="module")
def scenes():
    return {f: seed_scenes(f, 4, seed=11) for f in ("pick_place", "articulated")}


@pytest.fixture(scope="module")
def failures(scenes):
    """Evidence on one side of the table: pick-place scenes with the target moved there."""
    return [apply(RIGHT, s, seed=k) for k, s in enumerate(scenes["pick_place"])]


def _xy(scene, role):
    p = scene.layout[resolve_role(scene, role)]
    return p["x"], p["y"]


def _inside(v, band):
    return band[0] - ATOL <= v <= band[1] + ATOL


def test_engine_writes_a_directional_layout_program_from_the_failures(failures, scenes):
    p = OfflineEngine().program_for(ModeSpec("layout", "grasp", "other"), failures)
    (e,) = p.edits
    assert e["edit"] == "place_in_region" and p.primary_role == "target"
    (x0, x1), (y0, y1) = e["boxes"]["target"]
    assert y1 <= -0.12 + 0.01 + ATOL and y0 >= -0.22 - 0.01 - ATOL  # the failures' side only
    assert x0 >= 0.34 - 0.01 - ATOL and x1 <= 0.44 + 0.01 + ATOL
    for k, base in enumerate(scenes["pick_place"]):  # any base: the target goes to that side
        child = apply(p, base, seed=100 + k)
        assert changed_factors(base, child) == ["layout"]
        x, y = _xy(child, "target")
        assert _inside(x, [x0, x1]) and _inside(y, [y0, y1])
        gx, gy = _xy(child, "goal")
        assert _inside(gx, e["boxes"]["goal"][0]) and _inside(gy, e["boxes"]["goal"][1])
        (_, _, lo, hi) = e["distances"][0]
        assert _inside(math.hypot(x - gx, y - gy), [lo, hi])


def test_attribute_and_task_programs_keep_the_failing_bands_and_categories(failures):
    att = neighbourhood_program("attributes", "lift", "contact_lost", failures)
    bands = att.edits[0]["bands"]
    assert set(bands) == {"target", "goal"} and "mass" in bands["target"]
    task = neighbourhood_program("task", "grasp", "never_grasped", failures)
    cats = task.edits[0]["categories"]
    assert cats["target"] == sorted(
        {s.object(resolve_role(s, "target")).category for s in failures}
    )
    for k, base in enumerate(failures):
        child = apply(att, base, seed=k)
        assert changed_factors(base, child) == ["attributes"]
        for role, fields in bands.items():
            name = resolve_role(child, role)
            cat, a = assets.get_category(child.object(name).category), child.attributes[name]
            for f, band in fields.items():
                v = a[f] if f in ("mass", "friction") else a["dims"].get(f)
                if v is not None:
                    lo, hi = getattr(cat, f) if f in ("mass", "friction") else cat.dims[f]
                    assert _inside(v, [max(band[0], lo), min(band[1], hi)]), (role, f, v, band)
        moved = apply(task, base, seed=k)
        assert changed_factors(base, moved) in (["task"], [])
        assert moved.object(resolve_role(moved, "target")).category in cats["target"]


def test_task_program_chooses_the_relation_where_the_family_has_several(scenes):
    arts = scenes["articulated"]
    opens = [s for s in arts if s.task["params"]["action"] == "open"] or arts[:1]
    p = neighbourhood_program("task", "open", "joint_not_moving", opens)
    want = sorted({s.task["params"]["action"] for s in opens})
    assert p.edits[0]["params"]["action"] == want
    for k, base in enumerate(arts):  # a closing scene is made an opening one (and vice versa)
        assert apply(p, base, seed=k).task["params"]["action"] in want


@pytest.mark.parametrize("factor", ["layout", "attributes", "task"])
def test_recreate_pairs_differ_only_in_the_diagnosed_factor(failures, factor):
    """Targeted and control share their base and differ in the diagnosed factor only (a task
    control also swaps the focus object's kind in place: objects and its sizes)."""
    mode = ModeSpec(factor, "grasp", "other")
    allowed = {factor} | ({"objects", "attributes"} if factor == "task" else set())
    for control, rest in (("outside", "keep"), ("resample", "keep"), ("outside", "resample")):
        vb = make_validation_batches(
            mode, failures, 3, 5, control=control, pairing="recreate", rest=rest
        )
        assert vb.control_factor == factor and vb.pairing == "recreate" and vb.rest == rest
        for t, c in zip(vb.targeted, vb.control, strict=True):
            assert t.parent == c.parent and t.verdict.ok and c.verdict.ok
            assert set(changed_factors(c.scene, t.scene)) <= allowed, control
            if rest == "keep":
                assert changed_factors(failures[t.parent], t.scene) in ([factor], [])
            else:
                assert t.rest_seed == c.rest_seed and t.record()["rest_seed"] == t.rest_seed
    with pytest.raises(ValueError, match="control 'matched' does not go with pairing 'recreate'"):
        make_validation_batches(mode, failures, 2, 0, pairing="recreate", control="matched")
    with pytest.raises(ValueError, match="unknown rest 'some'; valid"):
        make_validation_batches(mode, failures, 2, 0, pairing="recreate", rest="some")


def test_distinct_modes_give_distinct_programs(failures, scenes):
    eng = OfflineEngine()
    modes = [
        ModeSpec("layout", "grasp", "other"),
        ModeSpec("layout", "transport", "other"),
        ModeSpec("attributes", "lift", "other"),
        ModeSpec("task", "grasp", "other"),
    ]
    progs = [eng.program_for(m, failures).to_json() for m in modes]
    assert len(set(progs)) == len(progs)
    # the same mode on other failures: another program (the evidence differs)
    other = eng.program_for(modes[0], scenes["pick_place"]).to_json()
    assert other != progs[0]


def test_programs_round_trip_as_json_and_sdk_source(failures):
    base = failures[0]
    for f in ("layout", "attributes", "task"):
        p = neighbourhood_program(f, "grasp", "other", failures)
        assert Program.from_dict(p.to_dict()) == p
        src = Program(p.factor, source=program_to_source(p))
        assert set(src.roles) == set(p.roles)
        a = apply(p, base, seed=3)
        b = apply(src, base, seed=3, isolation="inprocess")
        assert a.to_json() == b.to_json()


def test_bad_neighbourhood_parameters_fail_with_one_line_naming_what_is_valid():
    with pytest.raises(ProgramError, match=r"boxes must be a non-empty \{role"):
        Program.from_dict({"edit": "place_in_region"})
    with pytest.raises(ProgramError, match=r"rest must be one of \['resample', 'keep'\]"):
        Program.from_dict({"edit": "set_in_bands", "bands": {"target": {"mass": [0.1, 0.2]}},
                           "rest": "all"})  # fmt: skip
    with pytest.raises(ProgramError, match=r"target.mass must be \[lo, hi\]"):
        Program.from_dict({"edit": "set_in_bands", "bands": {"target": {"mass": [0.3, 0.2]}}})
    assert N.EDIT_NAMES == ("place_in_region", "set_in_bands", "choose_task")


def test_outside_controls_leave_the_neighbourhood_and_hold_the_rest(failures, scenes):
    """control="outside": a banded / boxed value drawn outside its interval where the range
    leaves room (the failures' side of the table -> the other side); a task control gives the
    focus role another kind of object in place (pose, mass, friction held) or another
    relation."""
    lay = neighbourhood_program("layout", "grasp", "other", failures)
    vb = make_validation_batches(
        ModeSpec("layout", "grasp", "other"), failures, 3, 2, program=lay, control="outside",
        pairing="recreate",
    )  # fmt: skip
    (_, _), (y0, y1) = lay.edits[0]["boxes"]["target"]
    for t, c in zip(vb.targeted, vb.control, strict=True):
        assert changed_factors(c.scene, t.scene) in (["layout"], [])
        assert _inside(_xy(t.scene, "target")[1], [y0, y1])
        assert not _inside(_xy(c.scene, "target")[1], [y0, y1])
    task = neighbourhood_program("task", "grasp", "other", failures[:1])
    (e,) = task.edits
    base = failures[0]
    out = task_control(base, e, seed=4)
    name = resolve_role(base, "target")
    assert out.object(name).category not in e["categories"]["target"]
    assert out.layout[name] == base.layout[name]
    for k in ("mass", "friction"):
        assert out.attributes[name][k] == pytest.approx(base.attributes[name][k], abs=ATOL)
    art = scenes["articulated"][0]
    rel = neighbourhood_program("task", "open", "other", [art])
    flipped = task_control(art, rel.edits[0], seed=0)
    assert flipped.task["params"]["action"] not in rel.edits[0]["params"]["action"]
    assert flipped.layout == art.layout  # in place (the cabinet may also change its kind)
    cab = resolve_role(art, "cabinet")
    for k in ("mass", "friction"):
        assert flipped.attributes[cab][k] == pytest.approx(art.attributes[cab][k], abs=ATOL)


def test_task_control_moves_another_role_where_the_focus_has_no_other_kind(scenes):
    """A put-down phase's focus is the goal; where the goal has no other kind to become (or
    as a fixture becomes another container), the control still leaves the neighbourhood: some
    task role's object is another category, in place."""
    base = seed_scenes("put_inside", 1, seed=5)[0]
    p = neighbourhood_program("task", "place", "other", [base])
    (e,) = p.edits
    assert e["focus"] == "goal"
    for seed in range(3):
        out = task_control(base, e, seed=seed)
        moved = [
            r
            for r, cats in e["categories"].items()
            if out.object(resolve_role(out, r)).category not in cats
        ]
        assert moved, seed
        for r in moved:
            name = resolve_role(out, r)
            assert out.layout[name] == base.layout[name]
