"""Verification: planted bad scenes are rejected with the right structured reason."""

import pytest

from coda.sim.compile import compile_scene
from coda.sim.scene import Scene
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
    "absurd_scale": (BASE, "scale", "target"),
    "absurd_mass": (BASE, "scale", "other"),
}
# α outside the category's range cannot come from the SDK (it refuses it at the call), but a
# scene record can carry it (Scene.from_json / from_dict accept any physically possible value).
ALPHA = {"absurd_scale": ("target", "dims", {"half": 0.4}), "absurd_mass": ("other", "mass", 80.0)}


def _compile(src, seed=0, lift=None, alpha=None):
    scene = exec_program(src, seed=seed, isolation="inprocess")
    if lift:
        scene.layout[lift]["z"] = 0.15  # σ places it 15 cm above its support
    if alpha:
        name, field, value = alpha
        record = scene.to_dict()
        record["attributes"][name][field] = value
        scene = Scene.from_dict(record)
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


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_bad_scene_is_rejected_with_reason(name):
    src, check, obj = PLANTED[name]
    c = _compile(src, lift="other" if name == "floating" else None, alpha=ALPHA.get(name))
    (verdict,) = verify([c])
    assert not verdict.ok
    hits = [r for r in verdict.reasons if r.check == check]
    assert hits, f"{name}: expected a {check!r} reason, got {verdict.reasons}"
    assert any(r.object == obj for r in hits), hits
    assert all(r.magnitude > 0 for r in hits)
    assert all(r.detail for r in verdict.reasons)


def test_verification_is_batched_and_order_preserving():
    good, bad = _compile(BASE), _compile(PLANTED["interpenetrating"][0])
    verdicts = verify([good, bad, good])
    assert [v.ok for v in verdicts] == [True, False, True]
