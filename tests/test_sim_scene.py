"""Scene SDK: object pool, Exec determinism, JSON round trip, one-factor resampling."""

import numpy as np
import pytest

from coda import sandbox
from coda.sim import assets, tasks
from coda.sim.compile import compile_scene
from coda.sim.scene import FACTORS, Scene, resample
from coda.sim.sdk import exec_program


def test_object_pool_categories_ranges_and_splits():
    cats = assets.CATEGORIES
    assert len(cats) >= 12
    required = {
        "block",
        "cube",
        "can",
        "bottle",
        "ball",
        "fruit",
        "plate",
        "bowl",
        "bin",
        "box",
        "cabinet_drawer",
        "cabinet_door",
        "peg",
        "hole",
    }
    assert required <= set(cats)
    for c in cats.values():
        assert len(c.instances) >= 2, c.name
        assert c.dims and all(0 < lo < hi < 1.0 for lo, hi in c.dims.values()), c.name
        assert 0 < c.mass[0] < c.mass[1] and 0 < c.friction[0] < c.friction[1]
        splits = {assets.split_of(c.name, i.name) for i in c.instances}
        assert "heldout" in splits, f"{c.name} declares no held-out instance"
    assert assets.HELDOUT_CATEGORIES, "no held-out category for OOD evaluation"
    for name in assets.HELDOUT_CATEGORIES:
        assert assets.instances_for(name, "train") == []
    with pytest.raises(KeyError, match="valid"):
        assets.get_category("dragon")


def test_every_category_and_instance_compiles():
    for cat in assets.CATEGORIES.values():
        for inst in cat.instances:
            src = (
                f'add_object("{cat.name}", role="thing", instance="{inst.name}")\n'
                'add_object("cube", role="target")\nadd_object("plate", role="goal")\n'
                'set_task("pick_place", target="target", goal="goal")\n'
            )
            c = compile_scene(exec_program(src, seed=1, isolation="inprocess"))
            i = c.sym.body("thing")
            half = c.consts["body_half"][i]
            assert np.all(half > 0) and np.all(half < 0.3), (inst.name, half)


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_exec_is_deterministic_and_round_trips_json(family):
    src = tasks.get_family(family).propose(np.random.default_rng(7))
    a = exec_program(src, seed=11, isolation="inprocess")
    b = exec_program(src, seed=11, isolation="inprocess")
    c = exec_program(src, seed=12, isolation="inprocess")
    assert a.to_json() == b.to_json()
    assert a.layout != c.layout
    back = Scene.from_json(a.to_json())
    assert back.to_json() == a.to_json()
    ma, mb = compile_scene(a).model, compile_scene(back).model
    np.testing.assert_array_equal(ma.body_pos, mb.body_pos)
    np.testing.assert_array_equal(ma.geom_size, mb.geom_size)


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
@pytest.mark.parametrize("factor", FACTORS)
def test_resampling_one_factor_keeps_the_other_two(family, factor):
    src = tasks.get_family(family).propose(np.random.default_rng(3))
    scene = exec_program(src, seed=5, isolation="inprocess")
    new = resample(scene, factor, seed=99)
    parts = {
        "task": lambda s: s.task,
        "layout": lambda s: s.layout,
        "attributes": lambda s: s.attributes,
    }
    assert parts[factor](new) != parts[factor](scene), f"{factor} did not change"
    for other in set(FACTORS) - {factor}:
        assert parts[other](new) == parts[other](scene), f"{other} changed with {factor}"
    assert [o.name for o in new.objects] == [o.name for o in scene.objects]
    compile_scene(new)  # still a valid scene
    assert resample(scene, factor, seed=99).to_json() == new.to_json()  # deterministic


def test_sdk_misuse_and_hostile_programs_are_rejected_with_reasons():
    cases = {
        'add_object("dragon", role="x")\nset_task("pick_place")': ("runtime", "dragon"),
        'add_object("cube", role="target")\nset_task("pick_place", target="target", goal="nope")': (
            "runtime",
            "unknown object",
        ),
        'add_object("cube")': ("runtime", "set_task"),
        'import os\nadd_object("cube")': ("validate", "import"),
        "().__class__.__mro__": ("validate", "dunder"),
        'add_object("cube", role="t"\n': ("syntax", ""),
    }
    for src, (stage, text) in cases.items():
        with pytest.raises(sandbox.SandboxError) as e:
            exec_program(src, seed=0, isolation="inprocess")
        assert e.value.stage == stage, (src, e.value.stage, e.value.reason)
        assert text.lower() in e.value.reason.lower(), (src, e.value.reason)


def test_untrusted_program_runs_in_a_limited_subprocess():
    src = (
        'add_object("cube", role="target")\nadd_object("plate", role="goal")\n'
        'set_task("pick_place", target="target", goal="goal")\n'
    )
    a = exec_program(src, seed=4)  # subprocess (default)
    b = exec_program(src, seed=4, isolation="inprocess")
    assert a.to_json() == b.to_json()
    with pytest.raises(sandbox.SandboxError) as e:
        exec_program(
            'add_object("cube", role="target")\nwhile True:\n    pass\n', seed=0, time_limit_s=2.0
        )
    assert e.value.stage == "timeout"


def test_proposal_without_verifier_is_discarded():
    class NoVerifier(tasks.PickPlaceFamily):
        name = "no_verifier"

        def success_fn(self, task):
            return None

    assert NoVerifier().propose(np.random.default_rng(0), max_tries=3) is None
    with pytest.raises(ValueError, match="success predicate"):
        tasks.register_family(NoVerifier())
    with pytest.raises(KeyError, match="valid"):
        tasks.get_family("juggle")
