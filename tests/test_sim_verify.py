"""Verification: planted bad scenes are rejected with the right structured reason, and each
planted scene's clean twin (the same scene with the one defect removed) passes."""

import numpy as np
import pytest

from coda.sim import verify as V
from coda.sim.compile import compile_scene
from coda.sim.scene import TABLE_DEFAULT, Scene
from coda.sim.sdk import exec_program
from coda.sim.verify import verify

BASE = """
add_object("cube", role="target", instance="cube_red")
add_object("cube", role="other", instance="cube_blue")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
set_layout("target", 0.40, -0.15)
set_layout("other", 0.60, 0.20)
set_layout("goal", 0.45, 0.05)
"""

PLANTED = {
    "interpenetrating": (BASE + 'set_layout("other", 0.405, -0.15)\n', "penetration", "other"),
    "floating": (BASE, "unsupported", "other"),  # lifted 15 cm by _compile
    # the SDK refuses such values; a scene edited after Exec (or loaded) still meets the check
    "absurd_scale": (BASE, "scale", "target"),
    "absurd_mass": (BASE, "scale", "other"),
}
EDITS = {
    "absurd_scale": lambda s: s.attributes["target"]["dims"].update(half=0.4),
    "absurd_mass": lambda s: s.attributes["other"].update(mass=80.0),
}

# Two fixed containers beside the task (fixed bodies never collide in MuJoCo: the check must
# measure their overlap itself).
FIXTURES = BASE + (
    'add_object("bin", name="bin", instance="bin_grey")\n'
    'add_object("bowl", name="bowl", instance="bowl_white")\n'
    'set_attributes("bin", dims={"inner_half": 0.075, "wall_height": 0.06})\n'
    'set_attributes("bowl", dims={"inner_half": 0.06, "wall_height": 0.035})\n'
    'set_layout("bin", 0.60, -0.17)\n'
)
BALLS = """
add_object("ball", role="target", instance="ball_red")
add_object("ball", name="top", instance="ball_tennis")
add_object("plate", role="goal", instance="plate_white")
set_attributes("target", dims={"radius": 0.03}, friction=1.0)
set_attributes("top", dims={"radius": 0.03}, friction=1.0)
set_task("pick_place", target="target", goal="goal")
set_layout("target", 0.40, -0.15)
set_layout("goal", 0.45, 0.10)
"""
CUBES = BALLS.replace('"ball", role="target", instance="ball_red"', '"cube", role="target"')
CUBES = CUBES.replace('"ball", name="top", instance="ball_tennis"', '"cube", name="top"')
CUBES = CUBES.replace('dims={"radius": 0.03}', 'dims={"half": 0.02}')

# name: (planted source, lift {object: z}, clean twin source, twin lift, check, object)
NEW_CHECKS = {
    "fixed_overlap": (
        FIXTURES + 'set_layout("bowl", 0.62, -0.17)\n',  # the bowl inside the bin's walls
        {},
        FIXTURES + 'set_layout("bowl", 0.38, 0.22)\n',
        {},
        "penetration",
        "bin",
    ),
    "fixed_floating": (
        FIXTURES + 'set_layout("bowl", 0.38, 0.22)\n',
        {"bowl": 0.1},
        FIXTURES + 'set_layout("bowl", 0.38, 0.22)\n',
        {},
        "unsupported",
        "bowl",
    ),
    "beyond_table": (
        BASE + 'set_table(half_y=0.3)\nset_layout("other", 0.60, 0.33)\n',
        {},
        BASE + "set_table(half_y=0.3)\n",
        {},
        "off_table",
        "other",
    ),
    "out_of_reach": (
        BASE + 'set_table(half_x=0.6)\nset_layout("target", 0.97, -0.15)\n',
        {},
        BASE + 'set_table(half_x=0.6)\nset_layout("target", 0.80, -0.15)\n',
        {},
        "unreachable",
        "target",
    ),
    "out_of_view": (
        BASE + 'set_layout("target", 0.34, 0.42)\n',
        {},
        BASE,
        {},
        "out_of_view",
        "target",
    ),
    "ball_on_ball": (
        BALLS + 'set_layout("top", 0.40, -0.15)\n',
        {"top": 0.06},  # resting exactly on the lower ball's apex
        CUBES + 'set_layout("top", 0.40, -0.15)\n',
        {"top": 0.04},  # a cube resting on a cube
        "fragile",
        "top",
    ),
}


def _compile(src, seed=0, lift=None, edit=None):
    scene = exec_program(src, seed=seed, isolation="inprocess")
    if edit is not None:
        edit(scene)
    if isinstance(lift, str):
        lift = {lift: 0.15}  # σ places it 15 cm above its support
    for name, z in (lift or {}).items():
        scene.layout[name]["z"] = z
    return compile_scene(scene)


def test_good_scenes_pass(family_variants):
    compiled = [c for v in family_variants.values() for c in v] + [_compile(BASE)]
    verdicts = verify(compiled)
    bad = [
        (c.scene.task["instruction"], v.reasons)
        for c, v in zip(compiled, verdicts, strict=True)
        if not v.ok
    ]
    assert not bad


def _assert_rejected(verdict, check, obj, name):
    assert not verdict.ok
    hits = [r for r in verdict.reasons if r.check == check]
    assert hits, f"{name}: expected a {check!r} reason, got {verdict.reasons}"
    assert any(r.object == obj for r in hits), hits
    assert all(r.magnitude > 0 for r in hits)
    assert all(r.detail for r in verdict.reasons)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_bad_scene_is_rejected_with_reason(name):
    src, check, obj = PLANTED[name]
    c = _compile(src, lift="other" if name == "floating" else None, edit=EDITS.get(name))
    (verdict,) = verify([c])
    _assert_rejected(verdict, check, obj, name)


@pytest.fixture(scope="module")
def planted_verdicts():
    """{name: (verdict of the planted scene, verdict of its twin)}: one batched verify call."""
    names = sorted(NEW_CHECKS)
    bad = [_compile(NEW_CHECKS[n][0], lift=NEW_CHECKS[n][1]) for n in names]
    twins = [_compile(NEW_CHECKS[n][2], lift=NEW_CHECKS[n][3]) for n in names]
    verdicts = verify(bad + twins)
    return {n: (verdicts[k], verdicts[len(names) + k]) for k, n in enumerate(names)}


@pytest.mark.parametrize("name", sorted(NEW_CHECKS))
def test_new_check_rejects_planted_scene_and_passes_its_twin(name, planted_verdicts):
    bad, twin = planted_verdicts[name]
    check, obj = NEW_CHECKS[name][4:]
    _assert_rejected(bad, check, obj, name)
    assert twin.ok, f"{name}: clean twin rejected: {twin.reasons}"


def test_summary_counts_every_check(planted_verdicts):
    verdicts = [v for pair in planted_verdicts.values() for v in pair]
    summary = V.summarize(verdicts)
    assert summary["pass_rate"] == pytest.approx(0.5, abs=1e-9)
    assert set(summary["reasons"]) == set(V.CHECKS)
    for n in NEW_CHECKS:
        assert summary["reasons"][NEW_CHECKS[n][4]] >= 1, summary


def test_reasons_carry_magnitudes_in_metres():
    by = {}
    for n in ("fixed_floating", "out_of_reach", "beyond_table"):
        (v,) = verify([_compile(NEW_CHECKS[n][0], lift=NEW_CHECKS[n][1])])
        by[n] = {r.check: r for r in v.reasons}
    # lifted 10 cm above its 0.5 mm clearance: the gap is the distance to the nearest fixed
    # geom below (the plate's corner, 2 cm aside, is a little nearer than the table top)
    assert 0.085 < by["fixed_floating"]["unsupported"].magnitude < 0.1005 + 1e-3
    # the target's hover needs the wrist at x 0.97 > 0.90
    assert by["out_of_reach"]["unreachable"].magnitude == pytest.approx(0.07, abs=2e-3)
    # a cube (half 0.017..0.024) centred 3 cm past the edge of a 0.30 m half-width table
    assert 0.02 < by["beyond_table"]["off_table"].magnitude < 0.06
    # and off the table it falls: the table is finite
    assert by["beyond_table"]["unsupported"].magnitude > 0.1


def test_fragile_only_after_passive_settle_passes():
    """The balanced balls survive the passive settle: only the push exposes them."""
    src, lift = NEW_CHECKS["ball_on_ball"][:2]
    (reasons,) = V.check_stability([_compile(src, lift=lift)])
    assert {r.check for r in reasons} == {"fragile"}, reasons
    assert "top" in {r.object for r in reasons}


def test_verification_is_batched_and_order_preserving():
    good, bad = _compile(BASE), _compile(PLANTED["interpenetrating"][0])
    verdicts = verify([good, bad, good])
    assert [v.ok for v in verdicts] == [True, False, True]


def test_planner_waypoints_mirror_the_planner(family_variants):
    """verify's numpy waypoints equal the scripted planner's own at t = 0."""
    import jax
    import jax.numpy as jnp

    from coda.sim import robot
    from coda.sim.planner import ScriptedPlanner
    from coda.sim.state import decode

    cases = [v[0] for v in family_variants.values()]
    arts = family_variants["articulated"]
    part = arts[0].scene.task["params"]["part"]
    cases += [c for c in arts if c.scene.task["params"]["part"] != part][:1]  # drawer and door
    for c in cases:
        d = V._forward(c)
        task = c.scene.task
        planner = ScriptedPlanner(task["family"], tuple(sorted(task["params"].items())), c.sym)
        home = jnp.asarray(robot.HOME[None])
        state = decode(jnp.asarray(d.sensordata[None], jnp.float32), c.layout, c.consts, home)
        xyz = np.asarray(jax.jit(planner._waypoints)(state, home)[0])[0]  # [P, 3]
        mine = {}
        for phase, _, p in V.planner_waypoints(c, d):
            mine.setdefault(phase, p)  # "lower": the first is the lowest grasp offset
        phases = planner.phase_names
        same = ["approach", "descend"]
        if task["family"] != "articulated":
            same += ["transport", "retreat"]
            # the planner's lower at t = 0 uses the tcp height at home: offset clipped to 0.04
            hi = [p for ph, _, p in V.planner_waypoints(c, d) if ph == "lower"][-1]
            np.testing.assert_allclose(hi, xyz[phases.index("lower")], atol=1e-5)
        for ph in same:
            np.testing.assert_allclose(mine[ph], xyz[phases.index(ph)], atol=1e-5, err_msg=ph)


def test_table_is_a_scene_attribute_with_json_round_trip():
    scene = exec_program(BASE + "set_table(half_x=0.4, height=0.7)\n", 0, isolation="inprocess")
    assert scene.table == {**TABLE_DEFAULT, "half_x": 0.4, "height": 0.7}
    back = Scene.from_json(scene.to_json())
    assert back.table == scene.table
    old = scene.to_dict()
    del old["table"]  # a scene saved before tables existed gets the default table
    assert Scene.from_dict(old).table == TABLE_DEFAULT
    c = compile_scene(back)
    top = c.model.geom("table/top")
    np.testing.assert_allclose(c.model.geom_size[top.id], [0.4, 0.5, 0.35], atol=1e-9)
    # its top surface is at z = 0 and the ground a table height below
    np.testing.assert_allclose(c.model.body("table").pos[2] + 0.35, 0.0, atol=1e-9)
    np.testing.assert_allclose(c.model.geom("floor").pos[2], -0.7, atol=1e-9)


@pytest.mark.parametrize(
    "call,field",
    [("set_table(half_x=-0.2)", "half_x"), ("set_table(height=float('nan'))", "height")],
)
def test_bad_table_is_a_clear_error(call, field):
    from coda.sandbox import SandboxError

    with pytest.raises(SandboxError, match=f"table.{field}"):
        exec_program(BASE + call + "\n", 0, isolation="inprocess")
    with pytest.raises(ValueError, match="unknown table fields"):
        Scene.from_dict({**_compile(BASE).scene.to_dict(), "table": {"width": 1.0}})


def test_reserved_object_names_are_rejected():
    src = BASE.replace('role="other", instance="cube_blue"', 'name="table", instance="cube_blue"')
    src = src.replace('set_layout("other"', 'set_layout("table"')
    scene = exec_program(src, 0, isolation="inprocess")
    with pytest.raises(ValueError, match="reserved"):
        compile_scene(scene)


def test_table_top_is_the_support_contact_entity():
    import mujoco

    from coda.sim import geometry as G
    from coda.sim import robot
    from coda.sim.state import decode

    c = _compile(BASE)
    d = V._forward(c)
    for _ in range(40):  # objects start 0.5 mm above the table: let them land
        mujoco.mj_step(c.model, d)
    s = decode(np.asarray(d.sensordata[None], np.float32), c.layout, c.consts, robot.HOME[None])
    assert bool(G.on_table(s, c.sym.body("target"))[0])


def test_sampled_layouts_stay_on_a_smaller_table():
    src = (
        BASE.split("set_layout")[0]
        + "set_table(x=0.45, half_x=0.2, half_y=0.25)\nsample_layout()\n"
    )
    for seed in range(4):
        c = compile_scene(exec_program(src, seed, isolation="inprocess"))
        assert V.check_on_table(c) == [], c.scene.layout


def test_table_size_varies_inside_one_mjx_bucket():
    from coda.sim.rollout import batch_mjx_models

    small = _compile(BASE + "set_table(half_x=0.4, half_y=0.45, height=0.7)\n")
    big = _compile(BASE)
    assert small.structure_key == big.structure_key
    batch_mjx_models([small.model, big.model])  # raises if a structural field differs
