"""`loop.memory_from` (memory transfer across backbones): what is copied from a finished run's
final memory snapshot and what is not, provenance, resume safety, the config checks, and that the
transferred modes drive round 1's allocation and generation (fast: a hand-built source run)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sqlite3
from types import SimpleNamespace

import pytest

from coda import runconfig
from coda.engine.edits import changed_factors
from coda.engine.programs import Program, load_programs, store_program
from coda.engine.seeding import seed_scenes
from coda.loop import checkpoint as ckpt
from coda.loop import transfer
from coda.loop.sources import FamilySource
from coda.loop.state import RunState
from coda.loop.steps.generate import generate
from coda.loop.strategies import get_strategy
from coda.memory import MemoryStore
from coda.memory.transfer import recorded_transfer, transfer_modes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDER = {"factor": "attributes", "edit": "scale_width", "role": "target", "range": [0.8, 1.22]}
PHI = "# Φ source of the source run (a marker: the loop compiles it per bucket)"


def smoke_config(strategy: str = "coda"):
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("coda_cfg_transfer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config("smoke", strategy=strategy)


@pytest.fixture(scope="module")
def parents():
    return {"pick_place": seed_scenes("pick_place", 2, seed=3)}


def _source_memory(path: str) -> dict[str, int]:
    """A finished run's memory: validated A (pick-place parents, Ω, accepted + rejected Φ,
    statistics), candidate B, refuted C, validated D (articulated parents only), episodic rows."""
    st = MemoryStore(path)
    ids = {}
    for name, factor, cause in (
        ("A", "attribute", "object_too_wide: the target is wider than the open jaws"),
        ("B", "spatial", "collision_with_distractor near the target"),
        ("C", "task", "misplaced on the wrong goal"),
        ("D", "spatial", "handle_out_of_reach of the gripper"),
    ):
        sp = st.add_scene_program(f"# scene of {name}", round=1)
        dep = st.add_deployment(round=1, scene_program_id=sp, n_rollouts=4, n_success=1)
        a = st.add_diagnosis(
            round=1,
            factor=factor,
            phase="grasp",
            cause=cause,
            critic="offline",
            scene_program_id=sp,
            deployment_id=dep,
        )
        ids[name] = a.mode_id
    for name in ("A", "D"):
        st.set_mode_status(ids[name], "validated", round=1)
    st.set_mode_status(ids["C"], "refuted", round=1)
    st.record_mode_outcome(ids["A"], round=2, n_success=3, n_trials=8)
    st.record_learning_progress(ids["A"], round=2, before=0.5, after=0.375)
    store_program(
        st, Program.from_dict(WIDER), round=1, mode_id=ids["A"], variants=[{"k": 1}, {"k": 2}]
    )
    store_program(
        st,
        Program.from_dict({"factor": "layout", "edit": "place_distractor"}),
        round=1,
        mode_id=ids["D"],
    )
    for accepted in (False, True):
        tp = st.add_training_program(
            round=1,
            mode_id=ids["A"],
            phase="grasp",
            subgoals=["reach", "grasp"],
            potential_source=PHI if accepted else "bad",
            tools={"grasp": "shaped"},
            roles={"target": "obj"},
            meta={"accepted": accepted},
        )
    st.record_training_evidence(tp, round=2, before=0.2, after=0.4)
    st.close()
    return ids


def make_source(tmp_path, parents, strategy: str = "coda", finished: bool = True) -> tuple:
    """A run folder as `coda.loop.run` leaves it: config.json, summary.json, checkpoints with a
    memory snapshot (SQLite backup) and state.json (parents per mode, Φ per mode, counters)."""
    src = tmp_path / "src"
    d = ckpt.round_dir(str(src), 2)
    os.makedirs(d)
    live = str(tmp_path / "live.sqlite")
    ids = _source_memory(live)
    with sqlite3.connect(live) as a, sqlite3.connect(os.path.join(d, "memory.sqlite")) as b:
        a.backup(b)
    pp = [s.to_dict() for s in parents["pick_place"]]
    other = {**pp[0], "task": {**pp[0]["task"], "family": "articulated"}}  # not in smoke's families
    state = RunState(
        round=2,
        mode_parents={ids["A"]: pp, ids["B"]: pp, ids["D"]: [other]},
        mode_potentials={ids["A"]: PHI},
        times_allocated={ids["A"]: 5, ids["D"]: 2},
        program_success={"prog": 0.5},
    )
    (open(os.path.join(d, "state.json"), "w")).write(state.to_json())
    (open(os.path.join(d, ckpt.MARKER), "w")).write("ok\n")
    cfg = smoke_config(strategy)
    cfg.policy.name = "small"
    (src / "config.json").write_text(cfg.to_json_best_effort())
    if finished:
        (src / "summary.json").write_text("{}")
    return str(src), ids


def target(tmp_path, src: str, strategy: str = "coda", budget: int = 6):
    cfg = smoke_config(strategy)
    cfg.policy.name = "oft"
    cfg.loop.memory_from = src
    cfg.loop.budget = budget
    work = tmp_path / "dst"
    work.mkdir(exist_ok=True)
    memory = MemoryStore(str(work / "memory.sqlite"))
    ctx = SimpleNamespace(
        config=cfg,
        strategy=get_strategy(strategy),
        memory=memory,
        engine=NoEngine(),
        pool=[],
        source=FamilySource(cfg),
    )
    state = RunState(round=0, history=[{"round": 0}])
    return ctx, state, str(work)


class NoEngine:
    """An engine that must not be asked: the transferred Ω program is what generation uses."""

    def program_for(self, *a, **k):
        raise AssertionError("the engine was asked for a program; Ω from memory should serve")


def test_copies_validated_modes_omega_phi_parents_with_provenance_and_reset_statistics(
    tmp_path, parents
):
    src, ids = make_source(tmp_path, parents)
    ctx, state, work = target(tmp_path, src)
    state, rec = transfer.seed_run(ctx, state, work)
    dst = ctx.memory
    assert rec["created"] and rec["validated_in_source"] == 2
    assert set(rec["mode_map"]) == {str(ids["A"])}  # B candidate, C refuted: not validated
    assert str(ids["D"]) in rec["skipped"] and "pick_place" in rec["skipped"][str(ids["D"])]
    new = rec["mode_map"][str(ids["A"])]
    (m,) = dst.modes()
    assert (m.id, m.status, m.factor, m.phase) == (new, "validated", "attribute", "grasp")
    assert m.label.startswith("object_too_wide") and m.created_round == 0
    # success statistics belong to the source's policy: reset, kept as provenance
    assert (m.hardness, m.n_trials, m.n_successes, m.n_progress, m.n_diagnoses) == (
        None,
        0,
        0,
        0,
        0,
    )
    ev = dst._conn.execute("SELECT kind, payload FROM mode_events WHERE mode_id=?", (new,))
    ((kind, payload),) = ev.fetchall()
    payload = json.loads(payload)
    assert kind == "transferred" and payload["from_mode"] == ids["A"]
    assert payload["run"] == os.path.abspath(src) and payload["round"] == 2
    assert (payload["strategy"], payload["policy"], payload["seed"]) == ("coda", "small", 0)
    assert payload["statistics"]["n_trials"] == 8
    assert payload["statistics"]["hardness"] == pytest.approx(3 / 8, abs=1e-9)
    # Ω: the program itself, with provenance
    ((gp, program),) = load_programs(dst, mode_id=new)
    assert program == Program.from_dict(WIDER) and gp.variants == [{"k": 1}, {"k": 2}]
    assert gp.meta["transfer"]["run"] == os.path.abspath(src) and gp.round == 0
    # Φ: the accepted program only; its improvement evidence (the other policy's) kept aside
    (tp,) = dst.training_programs(mode_id=new)
    assert tp.potential_source == PHI and tp.evidence == [] and tp.improved is None
    assert tp.meta["transfer"]["improved"] is True and tp.meta["transfer"]["evidence"]
    # nothing episodic
    counts = dst.counts()
    for table in ("diagnoses", "deployments", "mode_members", "scene_programs", "verifiers"):
        assert counts[table] == 0, table
    assert counts["mode_events"] == 1 and counts["generation_programs"] == 1
    # the loop's tables: parents and Φ source of the mode; counters and pool success reset
    assert state.mode_parents == {new: [s.to_dict() for s in parents["pick_place"]]}
    assert state.mode_potentials == {new: PHI}
    assert state.times_allocated == {} and state.program_success == {}
    assert state.history[0]["memory_transfer"]["mode_map"] == {str(ids["A"]): new}
    assert recorded_transfer(dst).mode_map == {ids["A"]: new}
    # a new diagnosis of the same failure joins the transferred mode (centroid + corpus copied)
    a = dst.add_diagnosis(
        round=1, factor="attribute", phase="grasp", cause="object_too_wide: target wider than jaws"
    )
    assert a.mode_id == new and not a.created


def test_phi_source_only_between_strategies_with_the_same_potential(tmp_path, parents):
    src, ids = make_source(tmp_path, parents)
    ctx, state, work = target(tmp_path, src, strategy="taskdesc_potential")
    state, rec = transfer.seed_run(ctx, state, work)
    assert len(rec["mode_map"]) == 1 and state.mode_potentials == {}  # recompiled there
    assert rec["counts"]["training_programs"] == 1  # memory still holds the source's Φ


def test_rerunning_round_0_never_duplicates(tmp_path, parents):
    src, _ = make_source(tmp_path, parents)
    ctx, state, work = target(tmp_path, src)
    before = str(tmp_path / "before.sqlite")
    ckpt.backup_sqlite(ctx.memory, before)  # the round-0 checkpoint as first saved
    state, first = transfer.seed_run(ctx, state, work)
    after = ctx.memory.counts()
    _, again = transfer.seed_run(ctx, state, work)  # the same process, or a resume after re-save
    assert not again["created"] and again["mode_map"] == first["mode_map"]
    assert ctx.memory.counts() == after
    # killed before round 0 was saved again: resume restores the first snapshot, copies again
    ckpt.restore_sqlite(before, ctx.memory)
    state2 = RunState(round=0, history=[{"round": 0}])
    state2, third = transfer.seed_run(ctx, state2, work)
    assert third["created"] and third["mode_map"] == first["mode_map"]  # same ids
    assert ctx.memory.counts() == after and state2.mode_parents == state.mode_parents


def test_a_copy_killed_halfway_leaves_nothing(tmp_path, parents, monkeypatch):
    src, _ = make_source(tmp_path, parents)
    ctx, state, work = target(tmp_path, src)
    empty = ctx.memory.counts()
    real = MemoryStore._insert

    def boom(self, table, row):
        if table == "training_programs":
            raise RuntimeError("killed")
        return real(self, table, row)

    monkeypatch.setattr(MemoryStore, "_insert", boom)
    with pytest.raises(RuntimeError, match="killed"):
        transfer.seed_run(ctx, state, work)
    monkeypatch.setattr(MemoryStore, "_insert", real)
    assert ctx.memory.counts() == empty and recorded_transfer(ctx.memory) is None
    assert transfer.seed_run(ctx, state, work)[1]["created"]


def test_transferred_modes_drive_round_1_allocation_and_generation(tmp_path, parents):
    src, ids = make_source(tmp_path, parents)
    ctx, state, work = target(tmp_path, src, budget=6)
    state, rec = transfer.seed_run(ctx, state, work)
    new = rec["mode_map"][str(ids["A"])]
    plan = ctx.strategy.allocator.plan(ctx, state, 1)
    targeted = [r for r in plan.requests if r[0] == "targeted"]
    n_novel = sum(n for k, _, n in plan.requests if k == "novel")
    assert targeted and all(m == new for _, m, _ in targeted)
    assert sum(n for *_, n in targeted) + n_novel == 6 and sum(n for *_, n in targeted) >= 4
    assert plan.times_allocated == {new: 1}
    # round 1 generates variants of the validated difficulty with its transferred Ω program
    made = generate(ctx, state, 1, dataclasses.replace(plan, requests=tuple(targeted)))
    gens = made.scenes
    assert len(gens) == sum(n for *_, n in targeted) and made.accepted >= len(gens)
    pp = parents["pick_place"]
    for g in gens:
        assert (g.kind, g.mode_id, g.phase) == ("targeted", new, "grasp")
        assert any(changed_factors(p, g.compiled.scene) == ["attributes"] for p in pp)
    # the same run from scratch: no mode, the whole budget goes to novel seeds
    (tmp_path / "s").mkdir()
    blank = SimpleNamespace(
        config=ctx.config,
        strategy=ctx.strategy,
        memory=MemoryStore(str(tmp_path / "s" / "m.sqlite")),
        engine=NoEngine(),
        pool=[],
    )
    plan = ctx.strategy.allocator.plan(blank, RunState(round=0), 1)
    assert plan.requests == (("novel", None, 6),)


def test_config_checks_name_the_problem(tmp_path, parents):
    cfg = smoke_config()
    cfg.loop.memory_from = str(tmp_path / "nowhere")
    assert any("no such run folder" in p for p in runconfig.problems(cfg))
    src, _ = make_source(tmp_path, parents, finished=False)
    cfg.loop.memory_from = src
    (bad,) = runconfig.problems(cfg)
    assert "not a finished run (no summary.json" in bad
    with pytest.raises(runconfig.ConfigError, match="not a finished run"):
        runconfig.validate(cfg)
    open(os.path.join(src, "summary.json"), "w").write("{}")
    assert runconfig.problems(cfg) == []
    cfg.strategy = "sft"  # allocates no modes: the memory would drive nothing
    (bad,) = runconfig.problems(cfg)
    assert "strategy 'sft'" in bad and "strategies that can: coda" in bad
    cfg.strategy = "coda"
    os.remove(os.path.join(ckpt.round_dir(src, 2), ckpt.MARKER))
    assert "no complete checkpoint with a memory snapshot" in runconfig.problems(cfg)[0]
    assert "loop.memory_from=3 must be a finished run folder path ('' = none)" in (
        runconfig.problems({"loop": {"memory_from": 3}})
    )
    with pytest.raises(TypeError, match="memory_from"):  # the config file types the field
        cfg.loop.memory_from = 3


def test_a_source_without_a_full_memory_is_refused(tmp_path, parents):
    src, _ = make_source(tmp_path, parents, strategy="no_memory")
    cfg = smoke_config()
    cfg.loop.memory_from = src
    (bad,) = runconfig.problems(cfg)
    assert "its strategy 'no_memory' kept no full memory" in bad
    ctx, state, work = target(tmp_path, src)
    with pytest.raises(runconfig.ConfigError, match="kept no full memory"):
        transfer.seed_run(ctx, state, work)
    with pytest.raises(runconfig.ConfigError, match="own folder"):
        ctx.config.loop.memory_from = work
        os.makedirs(ckpt.round_dir(work, 0))
        for f in ("memory.sqlite", "state.json", ckpt.MARKER):
            open(os.path.join(ckpt.round_dir(work, 0), f), "w").close()
        open(os.path.join(work, "config.json"), "w").write(smoke_config().to_json_best_effort())
        open(os.path.join(work, "summary.json"), "w").write("{}")
        transfer.seed_run(ctx, state, work)


def test_memory_level_copy_refuses_mixed_memories(tmp_path):
    from coda.memory import SingleStoreMemory

    a, b = MemoryStore(":memory:"), SingleStoreMemory(":memory:")
    with pytest.raises(ValueError, match="full memories"):
        transfer_modes(a, b, round=0, source={})
    c = MemoryStore(":memory:")
    m = a.add_diagnosis(round=0, factor="task", phase="place", cause="misplaced").mode_id
    with pytest.raises(ValueError, match=r"not validated \(validated: \[\]\)"):
        transfer_modes(a, c, round=0, source={}, mode_ids=[m])
    assert recorded_transfer(c) is None


# 72 s (the run 67 s) on the 2-core machine at load ~8: an oft smoke run (1 round) seeded from the
# hand-built run; round 1 gave the transferred mode 4 of B = 6 scenes (4 targeted variants)
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_oft_run_seeded_with_the_memory_targets_its_modes_in_round_1(tmp_path, parents):
    """The loop end to end: `policy.name=oft` + `loop.memory_from` -> round 0 checkpoint holds the
    transferred mode, round 1 allocates to it and generates its variants, the mode gets this
    policy's own p̂; re-running the command resumes without copying anything again."""
    import time

    from coda import loop

    src, ids = make_source(tmp_path, parents)
    cfg = smoke_config()
    cfg.policy.name = "oft"
    cfg.loop.rounds = 1
    cfg.loop.memory_from = src
    work = str(tmp_path / "oft")
    t0 = time.perf_counter()
    loop.run(cfg, work)
    took = time.perf_counter() - t0
    with open(os.path.join(ckpt.round_dir(work, 1), "state.json")) as f:
        state = RunState.from_json(f.read())
    row0, row1 = state.history
    new = row0["memory_transfer"]["mode_map"][str(ids["A"])]
    assert row0["memory_transfer"]["created"] and new in state.mode_parents
    assert row1["allocation"][str(new)] >= 4, row1["allocation"]
    assert row1["kinds"].get("targeted", 0) >= 1, row1["kinds"]
    r0 = sqlite3.connect(os.path.join(ckpt.round_dir(work, 0), "memory.sqlite"))
    assert r0.execute("SELECT id, status FROM modes").fetchall() == [(new, "validated")]
    r0.close()
    memory = MemoryStore(os.path.join(work, "memory.sqlite"))
    m = memory.get_mode(new)
    assert m.hardness_round == 1 and m.n_trials > 0  # the oft policy's own success rate
    before = memory.counts()
    memory.close()
    loop.run(cfg, work)  # finished: resumes after round 1 and stops, nothing copied again
    memory = MemoryStore(os.path.join(work, "memory.sqlite"))
    assert memory.counts() == before
    memory.close()
    print(f"oft run seeded with a transferred memory: {took:.0f} s")
