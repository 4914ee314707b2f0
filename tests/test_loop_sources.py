"""`sim.programs`: a run's training pool from fixed scene programs instead of proposed ones."""

from __future__ import annotations

import importlib.util
import os

import pytest

from coda import runconfig
from coda.loop.sources import FamilySource

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUBE = """add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_blue")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


def _config(arg: str = "smoke"):
    spec = importlib.util.spec_from_file_location(
        "coda_cfg_src", os.path.join(ROOT, "configs/coda.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def test_fixed_programs_are_the_pool_and_proposed_ones_stay_the_default():
    cfg = _config()
    cfg.sim.seeds_per_program = 2
    proposed, held0, _, _ = FamilySource(cfg).seed_pool()
    cfg.sim.programs = (CUBE,)
    pool, held, rows, generated = FamilySource(cfg).seed_pool()
    assert generated == 2 and len(pool) == 2
    assert {s.scene.program for s in pool} == {CUBE}
    assert len({int(s.scene.seed) for s in pool}) == 2  # two layouts of the one program
    assert CUBE not in held and held  # held-out tasks still proposed from the families
    assert {s.scene.program for s in proposed} != {CUBE}
    again, *_ = FamilySource(cfg).seed_pool()
    assert [int(s.scene.seed) for s in again] == [int(s.scene.seed) for s in pool]


def test_fixed_programs_are_checked_against_the_families():
    cfg = _config()
    runconfig.validate(cfg)
    cfg.sim.programs = (CUBE.replace("pick_place", "stack_or_insert"), "add_object('cube')", "")
    got = runconfig.problems(cfg)
    assert "sim.programs must be a list of scene-program sources (() = proposed)" in got
    cfg.sim.programs = (CUBE.replace("pick_place", "stack_or_insert"), "add_object('cube')")
    got = runconfig.problems(cfg)
    assert any("sim.programs[0] is a 'stack_or_insert' task, not one of" in p for p in got)
    assert 'sim.programs[1] has no set_task("<family>", ...) line' in got
    cfg.sim.programs = (CUBE,)
    cfg.sim.source = "libero:libero_spatial"
    cfg.strategy = "sft"
    with pytest.raises(runconfig.ConfigError, match="sim.programs applies to sim.source=families"):
        runconfig.validate(cfg)


def test_scenes_of_a_held_out_task_are_dropped_whatever_their_layout_or_distractors():
    """Step 2 drops a generated scene whose task (family, relation, role-bound objects) is one
    of the ood_tasks programs': another layout or other distractors are the same task; another
    target instance is not."""
    import types

    from coda.loop.sources import task_key
    from coda.loop.steps.generate import drop_heldout
    from coda.sim.sdk import exec_program

    held = CUBE
    same = CUBE.replace(
        "sample_layout()", 'add_object("ball", role="distractor_0")\nsample_layout()'
    )
    other = CUBE.replace('instance="cube_red"', 'instance="cube_blue"', 1)
    src = FamilySource(_config())
    keys = src.heldout_task_keys([held])
    assert src.heldout_task_keys([held]) is keys  # computed once
    scenes = [
        exec_program(p, s, "train", isolation="inprocess")
        for p, s in ((held, 7), (same, 3), (other, 7))
    ]
    assert task_key(scenes[0]) == task_key(scenes[1]) != task_key(scenes[2])
    gens = [types.SimpleNamespace(compiled=types.SimpleNamespace(scene=s)) for s in scenes]
    assert drop_heldout(gens, keys) == [gens[2]]
    assert drop_heldout(gens, frozenset()) == gens
