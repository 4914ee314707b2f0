"""Scene SDK: object pool, Exec determinism, JSON round trip, one-factor resampling."""

import numpy as np
import pytest

from coda import sandbox
from coda.sim import assets, sdk, tasks
from coda.sim.compile import compile_scene
from coda.sim.scene import FACTORS, Scene, SceneFormatError, resample
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


# ----------------------------------------------------------------------------- bad input
CUBE_PLATE = (
    'add_object("cube", role="target", instance="cube_red")\n'
    'add_object("plate", role="goal", instance="plate_white")\n'
    'set_task("pick_place", target="target", goal="goal")\n'
)

SDK_BAD = {  # program line -> (object, field, text): refused at the SDK call, not by MuJoCo
    'set_attributes("target", dims={"half": 0.0})': ("target", "dims.half", "must be positive"),
    'set_attributes("target", dims={"half": -0.01})': ("target", "dims.half", "must be positive"),
    'set_attributes("target", dims={"half": 0.4})': ("target", "dims.half", "outside the cube"),
    'set_attributes("goal", dims={"radius": 0.1})': ("goal", "dims", "unknown sizes"),
    'set_attributes("goal", dims=0.1)': ("goal", "dims", "must be a dict"),
    'set_attributes("target", mass=float("nan"))': ("target", "mass", "must be finite"),
    'set_attributes("target", mass=80.0)': ("target", "mass", "outside the cube range"),
    'set_attributes("target", friction=0)': ("target", "friction", "must be positive"),
    'set_attributes("target", rgba=[1, 0, 0])': ("target", "rgba", "needs 4 values"),
    'set_attributes("target", rgba=[1, 0, 0, 2])': ("target", "rgba", "in [0, 1]"),
    'set_layout("goal", float("inf"), 0.0)': ("goal", "x", "must be finite"),
    'set_layout("goal", 0.5, "left")': ("goal", "y", "must be a number"),
}


@pytest.mark.parametrize("line", sorted(SDK_BAD))
def test_sdk_refuses_impossible_and_out_of_range_values_naming_object_and_field(line):
    obj, field, text = SDK_BAD[line]
    with pytest.raises(sandbox.SandboxError) as e:
        exec_program(CUBE_PLATE + line + "\n", seed=0, isolation="inprocess")
    assert e.value.stage == "runtime" and e.value.line == 4, (e.value.stage, e.value.line)
    reason = e.value.reason
    assert reason.startswith("SceneValueError: "), reason
    assert f"object {obj!r}, field {field}:" in reason and text in reason, reason


def test_sdk_errors_carry_object_and_field_and_survive_pickling():
    import pickle

    b = sdk.SceneBuilder(0)
    b.add_object("cube", role="target")
    with pytest.raises(sdk.SceneValueError) as e:
        b.set_attributes("target", dims={"half": 0.0})
    assert (e.value.object, e.value.field) == ("target", "dims.half")
    again = pickle.loads(pickle.dumps(e.value))
    assert str(again) == str(e.value) and again.field == "dims.half"
    assert isinstance(e.value, ValueError)
    for call, text in (
        (lambda: b.add_object(["cube"]), "category must be a non-empty string"),
        (lambda: b.uniform(1.0, 0.0), "lo <= hi"),
        (lambda: b.uniform(0.0, float("nan")), "finite"),
        (lambda: b.randint(0, 2.5), "integers"),
    ):
        with pytest.raises(sdk.SceneProgramError, match=text):
            call()


@pytest.mark.parametrize("split", ["tarin", "", "ALL"])
def test_unknown_split_is_refused_not_treated_as_all(split):
    with pytest.raises(sdk.SceneProgramError, match="valid: train, heldout, all"):
        exec_program(CUBE_PLATE, seed=0, split=split, isolation="inprocess")
    with pytest.raises(ValueError, match="valid: train, heldout, all"):
        assets.instances_for("cube", split)


def test_sdk_accepts_values_verify_accepts():
    """The SDK's range is verify's (range +- SCALE_SLACK): an edge value builds and verifies."""
    from coda.sim.verify import check_scale

    lo, hi = assets.get_category("cube").dims["half"]
    edge = lo * (1 - assets.SCALE_SLACK) * 1.001
    m_hi = assets.get_category("cube").mass[1] * (1 + assets.SCALE_SLACK) * 0.999
    src = CUBE_PLATE + f'set_attributes("target", dims={{"half": {edge}}}, mass={m_hi})\n'
    c = compile_scene(exec_program(src, seed=0, isolation="inprocess"))
    assert check_scale(c) == []
    assert c.scene.attributes["target"]["dims"]["half"] == pytest.approx(edge, abs=1e-12)


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_sampled_coupled_and_resampled_attributes_stay_in_range(family):
    """No code path of our own makes a scene that the SDK would refuse or verify would flag."""
    rng = np.random.default_rng(5)
    fam = tasks.get_family(family)
    for k in range(4):
        scene = exec_program(fam.propose(rng), seed=k, isolation="inprocess")
        for s in (scene, resample(scene, "attributes", seed=k), resample(scene, "task", seed=k)):
            for o in s.objects:
                problems = assets.get_category(o.category).scale_problems(s.attributes[o.name])
                assert problems == [], (family, o.name, problems)


def _record() -> dict:
    return exec_program(CUBE_PLATE, seed=0, isolation="inprocess").to_dict()


def _set(path: str, value):
    d = _record()
    *head, last = path.split(".")
    node = d
    for p in head:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return d


_DELETE = object()

FROM_JSON_BAD = {  # edit -> the field the error must name
    "no_layout": (("layout", _DELETE), "layout missing"),
    "zero_size": (("attributes.target.dims.half", 0.0), "attributes.target.dims.half must be"),
    "nan_pose": (("layout.goal.x", float("nan")), "layout.goal.x must be a finite number"),
    "string_mass": (("attributes.goal.mass", "heavy"), "attributes.goal.mass must be"),
    "bad_category": (("objects.1.category", "dragon"), "unknown object category 'dragon'"),
    "bad_instance": (("objects.0.instance", "cube_pink"), "unknown instance 'cube_pink'"),
    "bad_role": (("task.roles.goal", "nobody"), "task.roles.goal refers to unknown object"),
    "extra_key": (("objects.0.colour", "red"), "objects[0] has keys"),
    "short_rgba": (("attributes.goal.rgba", [1, 1, 1]), "attributes.goal.rgba must be 4"),
    "float_seed": (("seed", 1.5), "seed must be an integer"),
}


@pytest.mark.parametrize("case", sorted(FROM_JSON_BAD))
def test_from_json_names_the_bad_field(case):
    import json

    (path, value), text = FROM_JSON_BAD[case]
    s = json.dumps(_set(path, value))
    with pytest.raises(SceneFormatError) as e:
        Scene.from_json(s, where="scenes.jsonl:12")
    assert str(e.value).startswith("scenes.jsonl:12: "), str(e.value)
    assert text in str(e.value), str(e.value)


def test_from_json_reports_the_line_of_broken_json():
    import json

    text = json.dumps(_record(), indent=1).splitlines()
    text[5] = text[5].rstrip(",")  # a missing comma on line 6
    with pytest.raises(SceneFormatError, match=r"scene JSON: not valid JSON \(line [67],"):
        Scene.from_json("\n".join(text))
    with pytest.raises(SceneFormatError, match="record must be an object, got list"):
        Scene.from_json("[1, 2]")
    out = Scene.from_json(json.dumps(_record()))  # a good record still round-trips
    assert out.to_json() == Scene.from_dict(_record()).to_json()
