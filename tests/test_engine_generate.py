"""Engine generation: role-bound programs Ω, the offline rule table, targeted generation and
targeted-vs-control validation batches (CPU, verification of small batches only)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coda.engine.edits import HOME_XY, changed_factors, factor_magnitude, scene_to_program
from coda.engine.engines import ModeSpec, make_engine, mode_spec
from coda.engine.generate import (
    CONTROL_FACTOR,
    PAIRINGS,
    control_program,
    generate_targeted,
    make_validation_batches,
    targeted_control_success,
    validate_mode,
)
from coda.engine.neighbourhood import EDIT_NAMES as NEIGHBOURHOOD_EDITS
from coda.engine.programs import (
    EDITS,
    Program,
    ProgramError,
    apply,
    apply_with_magnitude,
    bind,
    load_programs,
    memory_factor,
    program_to_source,
)
from coda.engine.roles import RoleBindingError
from coda.engine.rules import NoProgram, candidate_programs, canonical_cause
from coda.engine.seeding import seed_scenes, verify_scenes
from coda.memory import MemoryStore
from coda.sim.scene import footprint_radius
from coda.sim.sdk import exec_program

OBSTRUCT = {
    "factor": "layout",
    "edit": "place_distractor",
    "role": "distractor_0",
    "relative_to": "target",
    "side": "approach",
    "distance": [0.0, 0.015],
}
WIDER = {"factor": "attributes", "edit": "scale_width", "role": "target", "range": [0.8, 1.22]}
STACK = """
add_object("cube", role="top", instance="cube_red")
add_object("block", role="base", instance="block_wide")
add_object("cube", role="distractor_0", instance="cube_green")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
"""


@pytest.fixture(scope="module")
def parents():
    """Verified fresh scenes per family (pick_place has 1-2 distractors by construction)."""
    out = {f: seed_scenes(f, n, seed=3) for f, n in (("pick_place", 3), ("put_inside", 2))}
    out["articulated"] = seed_scenes("articulated", 1, seed=3)
    out["stack"] = [exec_program(STACK, s, isolation="inprocess") for s in (1, 2)]
    return out


def _rule_program(mode, parents):
    """The rule table's first program that can be made on a parent (the offline engine's choice
    before programs were written from the evidence; these tests exercise the pairings with it)."""
    m = mode_spec(mode)
    for program, _ in candidate_programs(m.factor, m.phase, m.cause):
        for p in parents:
            try:
                apply(program, p, 0)
            except (RoleBindingError, ValueError):
                continue
            return program
    raise AssertionError(mode)


def _view(scene) -> dict[str, str]:
    d = scene.to_dict()
    return {k: json.dumps(d[k], sort_keys=True) for k in d if k not in ("seed", "program")}


# ----------------------------------------------------------------------------- programs


def test_program_is_data_and_fails_clearly():
    p = Program.from_dict(OBSTRUCT)
    assert p.factor == "layout" and p.roles == ("distractor_0", "target")
    assert Program.from_dict(json.loads(p.to_json())) == p  # JSON round trip
    assert Program.from_dict({"edit": "mass"}).edits[0] == {
        "edit": "mass",
        "role": "target",
        "range": [0.85, 1.2],
    }  # defaults filled, factor inferred
    with pytest.raises(ProgramError, match="unknown edit 'teleport'; valid: .*scale_width"):
        Program.from_dict({"edit": "teleport"})
    with pytest.raises(ProgramError, match="a program edits one factor"):
        Program.from_dict({"factor": "layout", "edits": [OBSTRUCT, WIDER]})
    with pytest.raises(ProgramError, match="lo <= hi"):
        Program.from_dict({**WIDER, "range": [1.2, 0.8]})
    with pytest.raises(ValueError, match=r"unknown engine 'gpt'; valid: offline, llm"):
        make_engine("gpt")
    assert memory_factor("layout") == "spatial" and memory_factor("attributes") == "attribute"


def test_bind_by_role_rebinds_into_other_families_and_names_missing_roles(parents):
    pp, pi, st = parents["pick_place"][0], parents["put_inside"][0], parents["stack"][0]
    b = bind(OBSTRUCT, pp)
    assert b.binding == {"target": pp.task["roles"]["target"], "distractor_0": "distractor_0"}
    assert bind(OBSTRUCT, pi).family == "put_inside"  # transfer: same roles, other family
    assert bind(WIDER, st).binding == {"target": "top"}  # alias: the stacked block is the target
    with pytest.raises(RoleBindingError) as e:
        bind(OBSTRUCT, parents["articulated"][0])
    msg = str(e.value)
    assert "does not provide role(s) [" in msg and "available roles: ['cabinet'" in msg
    assert "articulated" in msg and "target" in e.value.missing


def test_every_edit_changes_only_its_factor_and_variants_verify(parents):
    """Each edit on a scene that has its roles: other factors byte-identical in to_dict."""
    pp, st = parents["pick_place"], parents["stack"]
    made = []
    for name, spec in EDITS.items():
        if name in NEIGHBOURHOOD_EDITS:  # need the evidence's bands: test_engine_neighbourhood
            continue
        scenes = st if name in ("scale_width", "friction") else pp  # also exercise aliases
        for k, parent in enumerate(scenes[:2]):
            child, m = apply_with_magnitude({"edit": name}, parent, seed=10 + k)
            a, b = _view(parent), _view(child)
            assert [f for f in a if a[f] != b[f]] == [spec.factor], name
            assert m > 0.0, name
            made.append(child)
    verdicts = [v for _, v in verify_scenes(made)]
    assert np.mean([v.ok for v in verdicts]) >= 0.8, [v.reasons for v in verdicts if not v.ok]


def test_variant_program_rebuilds_the_variant(parents):
    child = apply(OBSTRUCT, parents["pick_place"][0], seed=5)
    again = exec_program(scene_to_program(child), seed=999, isolation="inprocess")
    assert changed_factors(child, again) == []
    assert child.program == scene_to_program(child)


def test_obstruction_transfers_and_lands_on_the_approach_side(parents):
    """A pick-place program re-bound into put-inside and stacking puts the distractor between
    the target and the gripper's home, footprints <= 1.5 cm apart."""
    for parent in (parents["pick_place"][0], parents["put_inside"][0], parents["stack"][0]):
        b = bind(OBSTRUCT, parent).binding
        child = apply(OBSTRUCT, parent, seed=7)
        t, d = child.layout[b["target"]], child.layout[b["distractor_0"]]
        v = np.array([d["x"] - t["x"], d["y"] - t["y"]])
        home = HOME_XY - np.array([t["x"], t["y"]])
        cos = float(v @ home / (np.linalg.norm(v) * np.linalg.norm(home)))
        assert cos >= math.cos(0.35) - 1e-9  # jitter +-0.35 rad around the approach direction
        radii = sum(
            footprint_radius(o.category, child.attributes[o.name], o.instance)
            for o in (child.object(b["target"]), child.object(b["distractor_0"]))
        )
        assert np.linalg.norm(v) == pytest.approx(radii + 0.0075, abs=0.0076)


def test_wider_targets_are_wider(parents):
    for parent in parents["pick_place"] + parents["stack"]:
        child = apply(WIDER, parent, seed=1)
        n = bind(WIDER, parent).binding["target"]
        (key,) = [k for k in ("half", "radius") if k in child.attributes[n]["dims"]]
        from coda.sim import assets

        lo, hi = assets.get_category(child.object(n).category).dims[key]
        assert child.attributes[n]["dims"][key] >= lo + 0.8 * (hi - lo) - 1e-9


# ----------------------------------------------------------------------------- rule table


@pytest.mark.parametrize(
    "factor, phase, cause, edit",
    [
        ("layout", "grasp", "collision_with_distractor", "place_distractor"),
        ("spatial", "reach", "obstructed by a block", "place_distractor"),  # memory + free text
        ("attributes", "grasp", "object_too_wide", "scale_width"),
        ("attribute", "grasp", "too-wide", "scale_width"),
        ("attributes", "lift", "contact_lost", "friction"),
        ("attributes", "lift", "slip", "friction"),
        ("attributes", "lift", "object_too_heavy", "mass"),
        ("attributes", "grasp", "no_finger_contact", "scale_width"),
        ("task", "place", "misplaced", "rebind_goal"),
        ("task", "grasp", "other", "rebind_target"),
        ("layout", "reach", "beyond_reach", "toward_workspace_edge"),
        ("layout", "transport", "destination_not_reached", "toward_workspace_edge"),
        ("spatial", "grasp", "object_pushed_away", "toward_workspace_edge"),
        ("layout", "lift", "contact_lost", "toward_workspace_edge"),
        ("layout", "transport", "contact_lost", "resample_layout"),  # no rule for this phase
        ("layout", "grasp", "other", "resample_layout"),  # no direction known: fallback
    ],
)
def test_offline_rule_table(factor, phase, cause, edit):
    (program, why), *_ = candidate_programs(factor, phase, cause)
    assert program.edits[0]["edit"] == edit and why


def test_rule_table_details_and_critic_vocabulary():
    slip = candidate_programs("attributes", "lift", "contact_lost")[0][0]
    assert [e["edit"] for e in slip.edits] == ["friction", "mass"]
    assert slip.edits[0]["range"][0] < 0.0  # lower friction ...
    assert slip.edits[1]["range"][1] > 1.0  # ... and heavier
    obstruct = candidate_programs("layout", "grasp", "collision_with_distractor")[0][0]
    assert obstruct.edits[0]["side"] == "approach"
    goal = candidate_programs("layout", "transport", "misplaced")[0][0]
    assert goal.edits[0]["role"] == "goal"
    with pytest.raises(NoProgram, match="execution"):
        candidate_programs("execution", "grasp", "other")
    from coda.critic.types import CAUSES

    for c in CAUSES:  # every critic label is understood as itself
        assert canonical_cause(c, CAUSES) == c
        assert canonical_cause(f"{c}: free text", CAUSES) == c


def test_offline_engine_skips_rules_whose_roles_no_parent_has(parents):
    eng = make_engine("offline")
    m = ModeSpec("layout", "grasp", "collision_with_distractor")
    # evidence first: the parents' region, then the rule's obstruction beside the focus role
    near = eng.program_for(m, parents["pick_place"])
    assert [e["edit"] for e in near.edits] == ["place_in_region", "place_distractor"]
    # an articulated scene has no target: its region is the cabinet's
    assert eng.program_for(m, parents["articulated"]).primary_role == "cabinet"
    # parents with no task role in common give no evidence program: the rule table, the first
    # rule that binds to a parent
    mixed = [parents["articulated"][0], parents["pick_place"][0]]
    assert eng.program_for(m, mixed).edits[0]["edit"] == "place_distractor"
    task = ModeSpec("task", "place", "misplaced")
    assert eng.program_for(task, [mixed[0], parents["stack"][0]]).edits[0]["edit"] == (
        "rebind_goal"
    )


# ----------------------------------------------------------------------------- generation


def test_generate_targeted_makes_B_verified_variants_with_eps_novel(parents):
    mode = ModeSpec("attributes", "grasp", "object_too_wide")
    g = generate_targeted(mode, None, parents["pick_place"], B=6, seed=0, eps=1 / 3)
    kinds = [v.kind for v in g.variants]
    assert kinds == ["targeted"] * 4 + ["novel"] * 2
    assert all(v.verdict is None or v.verdict.ok for v in g.variants)
    pp = parents["pick_place"]
    for v in g.variants[:4]:
        assert changed_factors(pp[v.parent], v.scene) == ["attributes"]
        assert v.magnitude == pytest.approx(
            factor_magnitude(pp[v.parent], v.scene, "attributes"), abs=1e-12
        )
    assert 0.0 < g.pass_rate <= 1.0 and g.attempted >= 4
    assert len({v.scene.to_json() for v in g.variants}) == 6  # all distinct
    with pytest.raises(ValueError, match="edit only the responsible factor"):
        generate_targeted(mode, Program.from_dict(OBSTRUCT), pp, B=2, seed=0)


def test_validation_batches_equal_size_and_differ_only_in_the_intended_factor(parents):
    pp = parents["pick_place"]
    for mode in (
        ModeSpec("layout", "grasp", "collision_with_distractor"),
        ModeSpec("attributes", "grasp", "object_too_wide"),
        ModeSpec("task", "place", "misplaced"),
    ):
        vb = make_validation_batches(mode, pp, N=5, seed=1, program=_rule_program(mode, pp))
        assert len(vb.targeted) == len(vb.control) == 5
        assert vb.control_factor == CONTROL_FACTOR[mode.factor] != mode.factor
        for t, c in zip(vb.targeted, vb.control, strict=True):
            assert t.parent == c.parent
            assert changed_factors(pp[t.parent], t.scene) == [mode.factor]
            assert changed_factors(pp[c.parent], c.scene) in ([vb.control_factor], [])
            assert t.verdict.ok and c.verdict.ok
        # magnitudes matched in normalised units (exact unless blocked or clipped)
        assert vb.magnitude_gap <= 0.05, [
            (t.magnitude, c.magnitude) for t, c in zip(vb.targeted, vb.control, strict=True)
        ]


def test_resample_control_redraws_the_other_factor_and_unknown_kinds_fail(parents):
    """control="resample": the control factor drawn again from the family's distribution (not
    moved by a matched amount); the targeted side is the same program either way."""
    pp = parents["pick_place"]
    mode = ModeSpec("attributes", "grasp", "object_too_wide")
    vb = make_validation_batches(mode, pp, N=4, seed=3, control="resample")
    assert len(vb.targeted) == len(vb.control) == 4
    assert vb.control_factor == "layout"
    for t, c in zip(vb.targeted, vb.control, strict=True):
        assert changed_factors(pp[t.parent], t.scene) == ["attributes"]
        assert changed_factors(pp[c.parent], c.scene) in (["layout"], [])
        assert t.verdict.ok and c.verdict.ok
    assert control_program("layout", "target", 0.3, "resample").edits[0]["edit"] == (
        "resample_layout"
    )
    with pytest.raises(ValueError, match="unknown control kind 'random'; valid"):
        make_validation_batches(mode, pp, N=2, seed=3, control="random")


@pytest.mark.parametrize("control", ["resample", "matched"])
def test_nested_pairs_differ_only_in_the_diagnosed_factor(parents, control):
    """pairing="nested": control i is parent i with the control edit, and targeted i is control
    i with the mode's edit (the same program and seed as the sibling pair's targeted variant), so
    the i-th pair shares the base scene and every factor but the diagnosed one. "sibling" (both
    edited from the base, the loop's rule before "nested") pairs differ in two factors: the
    diagnosed and the control one."""
    for fam in ("pick_place", "put_inside", "stack"):
        pp = parents[fam]
        for mode in (
            ModeSpec("layout", "grasp", "collision_with_distractor"),
            ModeSpec("attributes", "grasp", "object_too_wide"),
            ModeSpec("task", "place", "misplaced"),
        ):
            kw = {"control": control, "program": _rule_program(mode, pp)}
            nest = make_validation_batches(mode, pp, 4, 7, pairing="nested", **kw)
            sib = make_validation_batches(mode, pp, 4, 7, pairing="sibling", **kw)
            assert (nest.pairing, sib.pairing) == ("nested", "sibling")
            assert len(nest.targeted) == len(nest.control) == 4
            cf = nest.control_factor
            for t, c in zip(nest.targeted, nest.control, strict=True):
                base = pp[t.parent]
                assert t.parent == c.parent and t.verdict.ok and c.verdict.ok
                assert changed_factors(c.scene, t.scene) == [mode.factor], (fam, mode)
                assert changed_factors(base, c.scene) in ([cf], [])
                assert set(changed_factors(base, t.scene)) <= {mode.factor, cf}
                assert t.control_seed == c.seed and t.record()["control_seed"] == c.seed
                assert t.magnitude == pytest.approx(
                    factor_magnitude(c.scene, t.scene, mode.factor), abs=1e-12
                )
            for t, c in zip(sib.targeted, sib.control, strict=True):
                assert t.parent == c.parent and t.control_seed is None
                assert "control_seed" not in t.record()
                assert changed_factors(pp[t.parent], t.scene) == [mode.factor]
                if changed_factors(pp[c.parent], c.scene):  # the control edit moved something
                    assert sorted(changed_factors(c.scene, t.scene)) == sorted([mode.factor, cf])
            # the same edit, made on the control scene (nested) or on the base (sibling)
            for vb in (nest, sib):
                for t, c in zip(vb.targeted, vb.control, strict=True):
                    on = c.scene if vb is nest else pp[t.parent]
                    assert apply(vb.program, on, seed=t.seed).to_json() == t.scene.to_json()
    assert PAIRINGS == ("recreate", "nested", "sibling")
    with pytest.raises(ValueError, match="unknown pairing 'twin'; valid"):
        make_validation_batches(mode, parents["pick_place"], 2, 0, pairing="twin")


def _width_quantile(scene) -> float:
    from coda.sim import assets

    n = scene.task["roles"]["target"]
    cat = assets.get_category(scene.object(n).category)
    key = next(k for k in ("half", "radius") if k in cat.dims)
    lo, hi = cat.dims[key]
    return (scene.attributes[n]["dims"][key] - lo) / (hi - lo)


class _WidthFlawBackend:
    """Test double of a rollout backend: the 'policy' fails every target in the top 30 % of its
    category's width range (a planted attribute flaw), so validation's wiring is checked
    without physics."""

    name = "width-flaw"

    def rollout(self, bucket, policy, params, key, num_chunks):
        from types import SimpleNamespace

        ok = [_width_quantile(v.scene) <= 0.7 for v in bucket.padded]
        return SimpleNamespace(success=np.array(ok))


def test_validate_mode_stores_omega_only_when_validated(parents):
    import jax

    narrow = {"edit": "scale_width", "range": [0.3, 0.3]}  # parents the flaw does not hit
    pp = [apply(narrow, p, seed=0) for p in parents["pick_place"]]
    assert all(_width_quantile(p) == pytest.approx(0.3, abs=1e-3) for p in pp)
    store = MemoryStore(":memory:")
    true_mode = store.add_diagnosis(
        round=0, factor="attribute", phase="grasp", cause="object_too_wide", critic="offline"
    ).mode_id
    false_mode = store.add_diagnosis(
        round=0, factor="spatial", phase="grasp", cause="collision_with_distractor", critic="vlm"
    ).mode_id
    backend, key = _WidthFlawBackend(), jax.random.PRNGKey(0)

    def policy(bucket):
        return None  # the test backend ignores the policy

    wider = _rule_program(store.get_mode(true_mode), pp)  # the rule: wider targets
    out = validate_mode(
        store, store.get_mode(true_mode), pp, policy, None, backend, key, 1, N=8, seed=2,
        program=wider,
    )  # fmt: skip
    assert out.result.accepted and store.get_mode(true_mode).status == "validated"
    assert out.targeted_success.tolist() == [False] * 8
    assert out.control_success.tolist() == [True] * 8
    ((gp, program),) = load_programs(store, mode_id=true_mode)
    assert program == out.batches.program and gp.id == out.program_id
    assert gp.factor == "attribute" and gp.role_signature == "target" and len(gp.variants) == 8
    assert gp.meta["validation"]["targeted_n"] == 8
    out2 = validate_mode(
        store, store.get_mode(false_mode), pp, policy, None, backend, key, 1, N=8, seed=3
    )
    assert out2.targeted_success.all()  # moving a distractor does not hit the width flaw
    assert not out2.result.accepted and store.get_mode(false_mode).status == "refuted"
    assert out2.program_id is None and load_programs(store, mode_id=false_mode) == []
    # the one-call form the planted-difficulty test uses
    t, c = targeted_control_success(
        ModeSpec("attributes", "grasp", "object_too_wide"), pp, policy, None, backend, key, 1, N=4,
        program=wider,
    )  # fmt: skip
    assert t.tolist() == [False] * 4 and c.tolist() == [True] * 4


def test_program_to_source_is_the_same_program(parents):
    parent = parents["pick_place"][0]
    for d in (OBSTRUCT, WIDER, {"edit": "rebind_goal"}):
        src = Program(Program.from_dict(d).factor, source=program_to_source(d))
        assert set(src.roles) == set(Program.from_dict(d).roles)
        a = apply(src, parent, seed=4, isolation="inprocess")
        assert changed_factors(parent, a) == [src.factor]
