"""The loop seeded from a LIBERO suite (`sim.source=libero:<suite>`, configs/libero_loop.py):
episode programs, the source's pool and suites, the config checks, and the smoke loop run then
resumed (one module fixture; slow tier)."""

from __future__ import annotations

import importlib.util
import json
import math
import os

import numpy as np
import pytest

from coda import runconfig
from coda.libero import episodes as E
from coda.libero import program as P
from coda.libero import suites as LS
from coda.loop.sources import task_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPATIAL = LS.tasks("libero_spatial")


def _config(arg="smoke", **kw):
    path = os.path.join(ROOT, "configs", "libero_loop.py")
    spec = importlib.util.spec_from_file_location("libero_loop_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg, **kw)


# ----------------------------------------------------------------------------- episodes


def test_episode_programs_name_task_state_and_shift():
    ep = E.Episode("libero_spatial", SPATIAL[3], 7, 2)
    assert E.parse(ep.program) == ep
    assert E.parse(E.Episode("libero_10_task", "t", 0).program).level == 0
    assert E.is_libero(ep.program) and not E.is_libero("scene = ...") and not E.is_libero(None)
    for bad in ("libero:libero_spatial/task", "libero:x/t@1#layout", "pick_place"):
        with pytest.raises(ValueError, match="expected 'libero:<suite>/<task>@<init index>"):
            E.parse(bad)


def test_compiled_episodes_carry_their_program_and_are_deterministic():
    plain = E.Episode("libero_spatial", SPATIAL[0], 4)
    c = E.compile_episode(plain.program)
    assert (c.scene.program, c.scene.seed) == (plain.program, 0)
    assert c.scene.task["initial"]["init_index"] == 4
    shifted = E.Episode("libero_spatial", SPATIAL[0], 4, 3).program
    a, b = E.compile_episode(shifted, 11), E.compile_episode(shifted, 11)
    other = E.compile_episode(shifted, 12)
    np.testing.assert_allclose(a.init_qpos, b.init_qpos, atol=0)
    assert np.abs(a.init_qpos - other.init_qpos).max() > 1e-3  # another seed, another shift
    assert np.abs(a.init_qpos - c.init_qpos).max() > 1e-3
    assert a.scene.task["initial"]["perturbation"]["level"] == 3
    assert a.structure_key == c.structure_key  # one bucket for a task's states and shifts


def test_image_observations_of_libero_episodes_show_libero_cameras_and_meshes():
    """An image policy on LIBERO sees LIBERO's agent view and wrist camera rendered from the
    task's visual model (meshes, textures; one shared model), not our box scene's cameras."""
    from coda.libero import scene as S
    from coda.sim import render as R
    from coda.sim.observe import ImageSpec, cameras_in, render_qpos
    from coda.sim.rollout import make_buckets

    cs = [E.compile_episode(E.Episode("libero_spatial", SPATIAL[0], i).program) for i in (0, 1)]
    (b,) = make_buckets(cs, 2)
    vis = S.visual_model("libero_spatial", SPATIAL[0])
    assert all(m is vis for m in b.render_models) and vis.nmesh > 0
    assert all(m.nmesh == 0 for m in b.models)  # physics: collision boxes only
    spec = ImageSpec(("base_0_rgb", "left_wrist_0_rgb"), ("front", "wrist"), 32)
    assert cameras_in(vis, spec.cameras) == (S.AGENTVIEW_CAMERA, S.WRIST_CAMERA)
    frames = render_qpos(b.render_models, b.init_qpos, spec)  # [2, 2, 32, 32, 3]
    want = R.render_variants(
        [vis, vis], b.init_qpos, cameras=(S.AGENTVIEW_CAMERA, S.WRIST_CAMERA), width=32, height=32
    )
    np.testing.assert_array_equal(frames, want)
    assert frames.std() > 10  # a scene, not a blank frame
    boxes = render_qpos(b.models, b.init_qpos, spec)  # what the physics model would show
    assert np.abs(frames.astype(int) - boxes.astype(int)).mean() > 5


# ----------------------------------------------------------------------------- source + config


def test_the_libero_source_builds_pool_and_held_out_suites():
    from coda.loop.sources import make_source

    cfg = _config()
    cfg.eval.suites = ("id", "ood_layouts", "ood_shift", "ood_swap", "ood_objects", "ood_tasks")
    src = make_source(cfg)
    assert src.name == "libero" and src.tasks == SPATIAL[:2]
    pool, held, rows, generated = src.seed_pool()
    assert held == [] and generated == len(rows) == 4 and len(pool) == 4
    assert sorted(E.parse(p.scene.program).index for p in pool) == [0, 0, 1, 1]
    suites = src.build_suites(pool, held)
    assert list(suites) == list(cfg.eval.suites)
    assert {s.success for s in suites.values()} == {"any"}  # LIBERO's protocol
    n = int(cfg.eval.episodes)
    assert all(s.n == n for s in suites.values())
    assert suites["id"].programs == [p.scene.program for p in pool][:n]
    for name, data_suite, level in (
        ("ood_layouts", "libero_spatial", 0),
        ("ood_shift", "libero_spatial", int(cfg.libero.ood_shift_level)),
        ("ood_swap", "libero_spatial_swap", 0),
        ("ood_objects", "libero_spatial_object", 0),
        ("ood_tasks", "libero_spatial_task", 0),
    ):
        eps = [E.parse(p) for p in suites[name].programs]
        assert {e.suite for e in eps} == {data_suite}, name
        assert {e.level for e in eps} == {level}, name
        assert min(e.index for e in eps) >= int(cfg.libero.heldout_from), name
    # shifted held-out episodes have their own seeds; unshifted ones seed 0
    assert len(set(suites["ood_shift"].seeds)) == n and set(suites["ood_layouts"].seeds) == {0}
    # a round's fresh scenes: shifted, never at a held-out state, verified
    rng = np.random.default_rng(0)
    tried, fresh = src.novel(3, rng)
    assert tried == 3 and fresh
    for c in fresh:
        e = E.parse(c.scene.program)
        assert e.level in tuple(cfg.libero.shift_levels) and e.index < int(cfg.libero.heldout_from)
    every = ("layout", "attributes", "task")
    assert src.resamplable(every) == every  # a LIBERO task is edited in any factor
    tried, made = src.resample(pool[0], every, 6, rng)
    assert tried == 6 and made and {f for _, f in made} <= set(every)
    for c, f in made:  # an edit of the drawn factor of the pool episode's own task and state
        e = E.parse(c.scene.program)
        assert (e.task, e.index) == (SPATIAL[0], E.parse(pool[0].scene.program).index)
        assert e.level or {x.factor for x in P.edits_of(e)} == {f}
    # a generated scene with the goal of an ood_tasks (LIBERO-PRO changed-task) episode is
    # recognised as that held-out task whatever its file is called
    held_keys = src.heldout_task_keys(suites["ood_tasks"].programs)
    held = src.compile({"program": suites["ood_tasks"].programs[0], "seed": 0}).scene
    atoms = "+".join(",".join(a) for a in held.task["terminal"]["goal"])
    ours = src.compile({"program": f"{pool[0].scene.program}!goal({atoms})", "seed": 0}).scene
    assert task_key(ours) in held_keys and task_key(pool[0].scene) not in held_keys


def test_libero_configs_are_checked_before_anything_runs():
    from coda.sim import tasks

    goal = _config("smoke,libero_goal")  # a suite by name: its step cap, the smoke sizes
    assert goal.sim.source == "libero:libero_goal" and goal.libero.train_states == 2
    assert _config("libero_10").sim.num_chunks == 65  # 520 steps x 0.05 s / 0.4 s
    assert _config(None).sim.num_chunks == 28  # libero_spatial: 220 steps
    for bad in ("libero_goal,libero_10", "smoke,gpu"):
        with pytest.raises(ValueError, match="one "):
            _config(bad)

    runconfig.validate(_config(), families=tasks.FAMILIES)
    runconfig.validate(_config(None), families=tasks.FAMILIES)
    critiquing = _config()
    critiquing.strategy = "coda"  # the critic and engine act on LIBERO's scenes too
    runconfig.validate(critiquing, families=tasks.FAMILIES)
    cases = {
        ("sim.source", "libero:libero_100"): "sim.source='libero:libero_100' is unknown",
        ("sim.source", "libero"): "sim.source='libero' is unknown",
        ("sim.backend", "mjx"): "needs sim.backend native or auto",
        ("engine.name", "llm"): "engine.name='llm' with sim.source='libero:libero_spatial'",
        ("critic.name", "vlm"): "critiqued and edited by the 'offline' one only",
        ("libero.train_states", 45): "0 < train_states <= heldout_from < 50",
        ("libero.shift_levels", (0,)): "levels 1..5",
        ("libero.phrasings", 0): "must be an integer 1..8 .wordings per goal",
        ("libero.tasks", "3,10"): "libero.tasks='3,10': ids [10] outside .0, 10. of libero_spatial",
        ("libero.tasks", "1,,x"): "libero.tasks='1,,x' must be task ids like '0,3'",
        ("eval.suites", ("id", "ood_instances")): "eval.suites: unknown ['ood_instances']",
    }
    for (field, value), msg in cases.items():
        cfg = _config()
        cfg.strategy = "coda" if field in ("engine.name", "critic.name") else cfg.strategy
        node = cfg
        *parents, leaf = field.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
        with pytest.raises(
            runconfig.ConfigError, match=msg.replace("(", r"\(").replace("[", r"\[")
        ):
            runconfig.validate(cfg, families=tasks.FAMILIES)
    cfg = _config(suite="libero_90")
    cfg.eval.suites = ("id", "ood_swap")
    with pytest.raises(runconfig.ConfigError, match=r"unknown \['ood_swap'\]"):
        runconfig.validate(cfg, families=tasks.FAMILIES)


# ----------------------------------------------------------------------------- the loop


@pytest.fixture(scope="module")
def libero_run(tmp_path_factory):
    from coda import loop

    cfg = _config()
    workdir = str(tmp_path_factory.mktemp("libero_loop"))
    summary = loop.run(cfg, workdir)
    return cfg, workdir, summary


def _history(workdir, r):
    with open(os.path.join(workdir, "checkpoints", f"round_{r:04d}", "state.json")) as f:
        return json.load(f)["history"]


@pytest.mark.slow  # a LIBERO loop from a cold compile cache; the source and configs stay default
def test_the_loop_seeds_from_libero_and_runs_its_rounds(libero_run):
    cfg, workdir, _ = libero_run
    r0, r1 = _history(workdir, 1)
    # round 0: the pool is LIBERO's training states, the planner solves it, BC trains on it
    assert r0["pool"] == 4 and r0["planner_success_pool"] == pytest.approx(1.0, abs=1e-6)
    assert r0["demo_rows"] > 0 and math.isfinite(r0["bc_loss"])
    with open(os.path.join(workdir, "pool.jsonl")) as f:
        pool = [json.loads(line) for line in f]
    assert all(E.is_libero(p["program"]) and p["task"]["family"] == "libero" for p in pool)
    with open(os.path.join(workdir, "suites.json")) as f:
        assert set(json.load(f)) == set(cfg.eval.suites)
    for row in (r0, r1):
        assert set(row["suites"]) == set(cfg.eval.suites)
        assert all(s["n"] == int(cfg.eval.episodes) for s in row["suites"].values())
    # round 1: fresh layout-shifted states, verified, rolled out, planner demos for BC (sft)
    assert r1["kinds"] == {"novel": int(cfg.loop.budget)} and r1["accepted"] >= 1
    assert r1["rollouts"] == r1["accepted"] * int(cfg.loop.rollouts_per_variant)
    assert math.isfinite(r1["update"]["policy_loss"])
    with open(os.path.join(workdir, "report.md")) as f:
        assert "Scenes: LIBERO `libero_spatial`, tasks 0,1 at initial states 0-1" in f.read()


@pytest.mark.slow  # needs the run above
def test_a_libero_run_resumes_from_its_checkpoint(libero_run, tmp_path):
    """Round 1 lost (its checkpoint removed): the resumed run rebuilds the pool and suites from
    their episode programs, reloads round 0 and replays round 1 to the same numbers."""
    import shutil

    from coda import loop

    cfg, workdir, _ = libero_run
    again = str(tmp_path / "again")
    shutil.copytree(workdir, again)
    shutil.rmtree(os.path.join(again, "checkpoints", "round_0001"))
    loop.run(_config(), again)
    volatile = ("seconds", "budgets")
    want = [{k: v for k, v in r.items() if k not in volatile} for r in _history(workdir, 1)]
    got = [{k: v for k, v in r.items() if k not in volatile} for r in _history(again, 1)]
    assert [r["round"] for r in got] == [0, 1]
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


@pytest.mark.slow  # ~25 s each; the default suite runs sft above
@pytest.mark.parametrize("strategy", ["domain_randomization", "success_rate_guided", "zero_shot"])
def test_every_strategy_without_critique_runs_on_libero(strategy, tmp_path):
    from coda import loop

    cfg = _config()
    cfg.strategy = strategy
    loop.run(cfg, str(tmp_path))
    r0, r1 = _history(str(tmp_path), 1)
    assert set(r1["suites"]) == set(cfg.eval.suites)
    if strategy == "zero_shot":  # no BC start, no rounds' scenes
        assert "bc_loss" not in r0 and not r1.get("kinds")
    else:  # resampled pool episodes: layout shifts, AWR on their transitions
        assert r1["kinds"] == {"resample": int(cfg.loop.budget)}
        assert r1["transitions"] > 0 and math.isfinite(r1["update"]["policy_loss"])


@pytest.mark.slow  # ~2 min: the critic's probes compile edited LIBERO tasks
def test_coda_critiques_its_failures_on_libero(tmp_path):
    """`coda` with a LIBERO source: the round's failures go to the offline critic (probes are
    LIBERO edits, `coda.libero.kind`), its diagnoses join memory's modes; candidate modes with a
    scene factor are tested through `coda.libero.engine` (tests/test_libero_engine.py)."""
    from coda import loop

    cfg = _config()
    cfg.strategy = "coda"
    loop.run(cfg, str(tmp_path))
    r0, r1 = _history(str(tmp_path), 1)
    crit = r1["critique"]
    assert crit["critiqued"] >= 1 and crit["diagnosed"] >= 1
    assert r1["mode_table"] and all(m["diagnoses"] >= 1 for m in r1["mode_table"])
    assert set(r1["suites"]) == set(cfg.eval.suites) and math.isfinite(r1["update"]["policy_loss"])


@pytest.mark.slow  # ~70 s: a vision tower on the CPU
def test_an_image_policy_runs_the_libero_loop(tmp_path):
    from coda import loop

    cfg = _config()
    cfg.policy.obs_mode = "images"
    cfg.policy.image_size = 32
    loop.run(cfg, str(tmp_path))
    r0, r1 = _history(str(tmp_path), 1)
    assert r0["demo_rows"] > 0 and math.isfinite(r0["bc_loss"])
    assert math.isfinite(r1["update"]["policy_loss"]) and set(r1["suites"]) == set(cfg.eval.suites)


@pytest.mark.slow  # needs the run above; ~20 s
def test_launch_libero_evaluates_the_run_s_trained_policy(libero_run, tmp_path):
    """`--config.policy=<run folder>` acts with the run's last complete round (or a named round)
    under LIBERO's protocol; the results say which run, round and strategy acted."""
    from coda.libero import evaluate as LE
    from coda.loop import acting

    run_cfg, workdir, _ = libero_run
    spec = importlib.util.spec_from_file_location("libero_eval_cfg", f"{ROOT}/configs/libero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for policy, want_round in ((workdir, 1), (f"{workdir}/checkpoints/round_0000", 0)):
        cfg = mod.get_config("smoke")
        cfg.robot, cfg.policy, cfg.gifs = "floating", policy, 0
        res = LE.evaluate(cfg, str(tmp_path / f"r{want_round}"), acting.load(policy))
        assert res["trained"]["round"] == want_round
        assert res["trained"]["strategy"] == run_cfg.strategy
        assert res["trained"]["trained_on"] == "libero:libero_spatial"
        assert res["episodes"] == 2 and 0 <= res["successes"] <= 2
        assert res["per_task"][0]["unsupported"] is None


def test_a_generated_scene_that_recreates_an_evaluation_scene_is_dropped():
    """coda.libero.heldout: the same task with every movable object within 1 cm of an
    evaluation scene's start is that scene; step 2 drops such a generated scene (counted)."""
    import types

    from coda.libero import heldout as H
    from coda.loop.steps.generate import Gen, drop_duplicates

    src_cfg = _config()
    from coda.loop.sources import LiberoSource

    src = LiberoSource(src_cfg, "libero_spatial")
    held = E.Episode("libero_spatial", SPATIAL[0], 45).program  # an ood_layouts episode
    same = src.compile({"program": held, "seed": 0})
    other = src.compile({"program": E.Episode("libero_spatial", SPATIAL[0], 3).program, "seed": 0})
    idx = H.EvalIndex.of([same])
    assert idx.duplicate(same) == held and idx.same_task(other)
    near = idx.nearest(other)
    assert (idx.duplicate(other) is None) == (near > H.TOL)
    suites = {"id": types.SimpleNamespace(programs=[held], seeds=[0]),
              "ood_layouts": types.SimpleNamespace(programs=[held], seeds=[0])}  # fmt: skip
    svc = types.SimpleNamespace(source=src, suites=suites)
    gens = [Gen(same, None, "resample", "layout", "-")]
    kept, dropped = drop_duplicates(svc, gens)
    assert kept == [] and dropped == 1
    svc.suites = {"id": suites["id"]}  # the pool's own suite is not evaluation data to avoid
    assert drop_duplicates(svc, gens) == (gens, 0)


def test_libero_study_config_loads_and_every_cell_validates():
    from coda import study
    from coda.sim import tasks

    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "libero_study.py")
    spec = importlib.util.spec_from_file_location("libero_study_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for arg in (None, "smoke", *mod.PRO):
        c = mod.get_config(arg)
        study.check_study(c)
        for strategy, seed in study.cells(c):
            cfg = study.cell_config(c, strategy, seed, "/w")
            runconfig.validate(cfg, families=tasks.FAMILIES)
            assert cfg.sim.source == "libero:" + mod.PRO.get(arg, "libero_spatial")
    c = mod.get_config()
    assert c.study.strategies == mod.ARMS and c.study.base.libero.phrasings == 4
    assert mod.get_config("pro_goal").study.strategies == mod.PRO_ARMS
    with pytest.raises(ValueError, match="valid: '', 'pro_spatial', 'pro_object', 'pro_goal'"):
        mod.get_config("big")
