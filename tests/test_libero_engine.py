"""The engine on LIBERO (`coda.libero.engine`, through `coda.engine.kinds`): a mode's program is a
choice over edits of its factor written from the failures, targeted / control pairs share their
base and differ only in that factor's edit (targeted: one of the program's, control: another the
task allows), every variant verifies, and Ω stores and returns the program. Skips where LIBERO's
data is not installed."""

from __future__ import annotations

import pytest

from coda.engine.engines import ModeSpec
from coda.engine.kinds import FAMILIES, kind_of, kind_of_record
from coda.engine.programs import store_program
from coda.engine.variants import GenerationError
from coda.libero import engine as LE
from coda.libero import episodes as E
from coda.libero import program as P
from coda.libero import scene as S
from coda.memory import MemoryStore

SPATIAL = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"


def _scene(program: str, seed: int = 0):
    return E.compile_episode(program, seed).scene


def _ep(index: int, edits: str = "") -> str:
    return E.Episode("libero_spatial", SPATIAL, index, edits=edits).program


def test_edit_choices_are_checked_text_and_round_trip():
    ch = LE.EditChoice("layout", ("swap(a_1,b_1)", "move(a_1,r_region)"), "why")
    assert LE.EditChoice.from_dict(ch.to_dict()) == ch and ch.roles == ("a_1",)
    assert LE.EditChoice("task", ("goal(on,a_1,plate_1)",)).roles == ("a_1",)
    with pytest.raises(P.EditError, match="changes attributes, not layout"):
        LE.EditChoice("layout", ("inst(a_1,ketchup)",))
    with pytest.raises(P.EditError, match="is not one of"):
        LE.EditChoice("layout", ("swap(a_1,b_1);import os",))
    with pytest.raises(ValueError, match="valid: .'layout'"):
        LE.EditChoice("execution", ("swap(a_1,b_1)",))
    with pytest.raises(ValueError, match="needs 'libero_edits'"):
        LE.EditChoice.from_dict({"factor": "layout", "edits": [{"edit": "shift"}]})


def test_scene_kinds_dispatch_on_the_family(libero_data):
    assert kind_of("pick_place") is FAMILIES and kind_of("libero").name == "libero"
    rec = _scene(_ep(2, "swap(akita_black_bowl_1,plate_1)")).to_dict()
    kind = kind_of_record(rec)
    back = kind.load(rec)
    assert back.program == rec["program"] and back.task["family"] == "libero"
    assert kind.has_potential(back.task) is True and FAMILIES.has_potential({}) is True
    assert kind.has_potential({"family": "libero", "params": {}}) is False


def test_the_program_is_the_failures_edits_else_the_goal_objects(libero_data):
    layout = ModeSpec("layout", "reach", "wrong_place")
    failed = [_scene(_ep(0, "swap(akita_black_bowl_1,plate_1)"))]
    assert LE.program_for(layout, failed).edits == ("swap(akita_black_bowl_1,plate_1)",)
    plain = LE.program_for(layout, [_scene(_ep(0))])  # LIBERO's own state: the goal's object
    assert plain.edits and all("akita_black_bowl_1" in t for t in plain.edits)
    assert set(plain.edits) < set(LE.allowed(("libero_spatial", SPATIAL), "layout"))
    cabinet = "pick_up_the_black_bowl_on_the_wooden_cabinet_and_place_it_on_the_plate"
    on_cabinet = E.Episode("libero_spatial", cabinet, 0).program  # the bowl cannot be moved
    assert LE.goal_objects(S.load_task("libero_spatial", cabinet))[:2] == [
        "akita_black_bowl_1",
        "plate_1",
    ]
    target = LE.program_for(layout, [_scene(on_cabinet)])  # so the plate's layout is the guess
    assert target.edits and all("plate_1" in t for t in target.edits)
    attrs = LE.program_for(ModeSpec("attributes", "grasp", "x"), [_scene(_ep(0))])
    assert all(t.startswith("inst(akita_black_bowl_1,") for t in attrs.edits)
    with pytest.raises(GenerationError, match="names no LIBERO scene factor"):
        LE.program_for(ModeSpec("execution", "grasp", "x"), failed)


def test_pairs_share_their_base_and_differ_in_the_factor_edit_only(libero_data):
    mode = ModeSpec("layout", "reach", "wrong_place")
    evidence = [_scene(_ep(0, "inst(plate_1,basket);swap(akita_black_bowl_1,plate_1)"))]
    bases = [_scene(_ep(i)) for i in range(3)] + evidence
    vb = LE.validation_batches(mode, bases, 4, 7, evidence=evidence)
    assert vb.pairing == "recreate" and vb.factor == vb.control_factor == "layout"
    assert vb.program.edits == ("swap(akita_black_bowl_1,plate_1)",)
    assert len(vb.targeted) == len(vb.control) == 4 and vb.magnitude_gap == 0.0
    for t, c in zip(vb.targeted, vb.control, strict=True):
        assert t.verdict.ok and c.verdict.ok and t.parent == c.parent and t.seed == c.seed
        te, ce = E.parse(t.scene.program), E.parse(c.scene.program)
        assert (te.suite, te.task, te.index, te.say) == (ce.suite, ce.task, ce.index, ce.say)
        tl = [e.text for e in P.edits_of(te) if e.factor == "layout"]
        cl = [e.text for e in P.edits_of(ce) if e.factor == "layout"]
        assert tl == ["swap(akita_black_bowl_1,plate_1)"] and len(cl) == 1
        assert cl[0] not in vb.program.edits
        assert cl[0] in LE.allowed(LE.strip(ce, "layout").task_ref, "layout")
        other = [[e.text for e in P.edits_of(x) if e.factor != "layout"] for x in (te, ce)]
        assert other[0] == other[1]  # the base's other edits (the evidence's inst) kept
    again = LE.validation_batches(mode, bases, 4, 7, evidence=evidence)
    assert [v.scene.program for v in again.control] == [v.scene.program for v in vb.control]


def test_omega_stores_the_choice_and_targeted_variants_use_it(libero_data):
    store = MemoryStore(":memory:")
    mode_id = store.add_diagnosis(
        round=0, factor="spatial", phase="reach", cause="wrong_place", critic="offline"
    ).mode_id
    mode = store.get_mode(mode_id)
    ch = LE.EditChoice("layout", ("swap(akita_black_bowl_1,plate_1)",), "the failures' edits")
    assert LE.stored_program(store, mode_id) is None
    store_program(store, ch, round=1, mode_id=mode_id, variants=[{"seed": 0}])
    assert LE.stored_program(store, mode_id) == ch
    g = LE.generate_targeted(mode, [_scene(_ep(i)) for i in range(2)], 3, 5, memory=store)
    assert g.program == ch and len(g.variants) == 3 and g.attempted >= 3
    for v in g.variants:
        assert v.verdict.ok and v.factor == "layout"
        assert E.parse(v.scene.program).edits == "swap(akita_black_bowl_1,plate_1)"


def test_the_loops_engine_steps_run_on_libero_through_the_scene_kind(libero_data, monkeypatch):
    """Step 4's control experiment and step 2's targeted generation on LIBERO, the loop's own
    code (`coda.loop.steps`), with a planted flaw in place of rollouts: the policy fails exactly
    where the bowl and the plate trade places. The layout mode written from such a failure is
    validated (targeted 0/4, control 4/4), Ω holds its edit choice, and the mode's targeted
    scenes recreate the swap on pool episodes."""
    import importlib.util
    import os
    from types import SimpleNamespace

    import jax
    import numpy as np

    from coda import runconfig
    from coda.loop.steps import critique
    from coda.loop.steps import generate as G

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("lib_cfg", f"{root}/configs/libero_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke")
    cfg.strategy = "coda"
    runconfig.validate(cfg)
    flaw = "swap(akita_black_bowl_1,plate_1)"

    def success_of(backend, variants, agents, key, nc, size, split):
        ok = [flaw not in E.parse(c.scene.program).edits for c in variants]
        return np.array(ok), 100

    monkeypatch.setattr(critique.collect, "success_of", success_of)
    memory = MemoryStore(":memory:")
    mode_id = memory.add_diagnosis(
        round=1, factor="spatial", phase="reach", cause="wrong_place", critic="offline"
    ).mode_id
    failure = _scene(_ep(1, flaw)).to_dict()
    pool = [E.compile_episode(_ep(i)) for i in range(2)]
    svc = SimpleNamespace(config=cfg, memory=memory, backend=None, agents=None, engine=None)
    svc.pool = pool
    state = SimpleNamespace(mode_parents={mode_id: [failure]})
    out = critique.validate(svc, state, 1, jax.random.PRNGKey(0))
    (test,) = out.row["validated"]
    assert (test["mode"], test["targeted"], test["control"], test["n"]) == (mode_id, 0, 4, 4)
    assert memory.get_mode(mode_id).status == "validated" and out.spend.env_steps == 200
    assert LE.stored_program(memory, mode_id) == LE.EditChoice(
        "layout", (flaw,), "the failures' edits"
    )
    gens, tried = G._targeted(svc, state, mode_id, 3, np.random.default_rng(0))
    assert len(gens) == 3 and tried >= 3
    for g in gens:
        assert g.kind == "targeted" and g.factor == "layout" and g.mode_id == mode_id
        assert E.parse(g.compiled.scene.program).edits == flaw


def test_nested_pairs_differ_by_the_programs_edit_on_top_of_the_control(libero_data):
    """``pairing="nested"``: control = the base with an edit of the control factor (layout ->
    attributes), targeted = that control plus one of the program's edits; ``sibling``: the
    program's edit vs an edit of the control factor, each on the base."""
    mode = ModeSpec("layout", "reach", "wrong_place")
    flaw = "swap(akita_black_bowl_1,plate_1)"
    evidence = [_scene(_ep(0, flaw))]
    bases = [_scene(_ep(i)) for i in range(3)]
    vb = LE.validation_batches(mode, bases, 3, 1, evidence=evidence, pairing="nested")
    assert (vb.pairing, vb.factor, vb.control_factor) == ("nested", "layout", "attributes")
    for t, c in zip(vb.targeted, vb.control, strict=True):
        te, ce = P.edits_of(E.parse(t.scene.program)), P.edits_of(E.parse(c.scene.program))
        assert [e.factor for e in ce] == ["attributes"] and te == (*ce, *P.parse_edits(flaw))
    sib = LE.validation_batches(mode, bases, 2, 1, evidence=evidence, pairing="sibling")
    for t, c in zip(sib.targeted, sib.control, strict=True):
        assert E.parse(t.scene.program).edits == flaw
        assert [e.factor for e in P.edits_of(E.parse(c.scene.program))] == ["attributes"]
    with pytest.raises(ValueError, match="valid: .'recreate', 'nested', 'sibling'"):
        LE.validation_batches(mode, bases, 2, 1, evidence=evidence, pairing="twins")


def test_step_5_compiles_a_libero_mode_s_potential(libero_data, native_backend):
    """Step 5 (`coda.loop.steps.potentials`) on a validated LIBERO mode: the offline compiler's
    program for the parent's goal, checked on the planner's demo of it (read up to success, as
    the LIBERO kind asks), is accepted at the full decomposition and stored in memory Φ."""
    import importlib.util
    import os
    from types import SimpleNamespace

    import jax

    from coda.loop.sources import LiberoSource
    from coda.loop.steps.potentials import compile_potentials

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("lib_cfg2", f"{root}/configs/libero_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke")
    cfg.sim.num_chunks = 20  # the planner's demo of the spatial task ends in success
    memory = MemoryStore(":memory:")
    mode_id = memory.add_diagnosis(
        round=1, factor="spatial", phase="grasp", cause="slip", critic="offline"
    ).mode_id
    memory.set_mode_status(mode_id, "validated", round=1)
    parent = _scene(_ep(0)).to_dict()
    svc = SimpleNamespace(
        config=cfg,
        memory=memory,
        backend=native_backend,
        source=LiberoSource(cfg, "libero_spatial"),
        llm=None,
    )
    state = SimpleNamespace(mode_parents={mode_id: [parent]}, mode_potentials={})
    pot = compile_potentials(
        svc, state, 1, jax.random.PRNGKey(0), task_description=False, max_rounds=3
    )
    (rec,) = pot.compiled
    assert rec == {"mode": mode_id, "accepted": True, "attempts": 1}, rec
    src = pot.programs[mode_id]
    assert "sym.body(OBJ)" in src and '"goal0.support"' in src
    (row,) = memory.training_programs()
    assert row.potential_source == src and row.phase == "grasp"


def test_stripping_a_factor_drops_the_edits_that_held_only_after_it(libero_data):
    """A goal edit makes the plate movable, then a stand-in only a moved object allows
    replaces it; stripping the task factor leaves a program that loads (without that
    stand-in), where it used to raise `EditError` in `allowed`."""
    from coda.libero import goals as G

    task = S.load_task("libero_spatial", SPATIAL)
    goal = P.format_edits([P.goal_edit([("on", "plate_1", G.free_regions(task)[0])])])
    moved = S.load_task(*E.Episode("libero_spatial", SPATIAL, 0, edits=goal).task_ref)
    only_moved = set(P.instance_candidates(moved, "plate_1"))
    cat = sorted(only_moved - set(P.instance_candidates(task, "plate_1")))[0]
    swap = "swap(akita_black_bowl_1,cookies_1)"
    ep = E.parse(_ep(0, f"{swap};{goal};inst(plate_1,{cat})"))
    stripped = LE.strip(ep, "task")
    assert stripped.edits == swap  # the swap kept, the stand-in dropped with the goal
    assert LE.allowed(stripped.task_ref, "layout")
    other = P.instance_candidates(task, "akita_black_bowl_2")[0]  # applies without the goal
    whole = f"{swap};inst(akita_black_bowl_2,{other})"
    assert LE.strip(E.parse(_ep(0, f"{whole};{goal}")), "task").edits == whole
