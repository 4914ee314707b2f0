"""Issue 11 §0: a bucket never mixes tasks; a role-swapped twin is scored and planned as itself.

The case: "stack the red cube on the blue cube" and its `resample(scene, "task", seed)` twin
"stack the blue cube on the red cube". The SDK names objects after their roles, so the twin's
object "top" plays "base"; the symbol table used to let the object name overwrite the role
(both roles on one cube), and the structure key ignored roles (both tasks in one bucket).
"""

import jax
import numpy as np
import pytest

from coda.potentials import compile_program, subgoal_program
from coda.sim import geometry as G
from coda.sim.compile import compile_scene, symbol_table
from coda.sim.planner import planner_for
from coda.sim.rollout import Bucket, make_buckets
from coda.sim.scene import resample
from coda.sim.sdk import exec_program

STACK = """
add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
"""
SEEDS = (0, 1, 2)
NUM_CHUNKS = 14


@pytest.fixture(scope="module")
def pairs():
    """[(original, role-swapped twin)] compiled, one pair per seed."""
    out = []
    for seed in SEEDS:
        scene = exec_program(STACK, seed=seed, isolation="inprocess")
        twin = resample(scene, "task", seed)
        out.append((compile_scene(scene), compile_scene(twin)))
    return out


def test_symbol_table_roles_win_over_same_named_objects():
    # object "top" (body 0) plays "base", object "base" (body 1) plays "top"
    sym = symbol_table({"top": "base", "base": "top"}, {"top": 0, "base": 1}, [])
    assert (sym.body("top"), sym.body("base")) == (1, 0)


def test_twin_has_its_own_roles_structure_and_bucket(pairs):
    c, twin = pairs[0]
    assert c.scene.task["instruction"] == "stack the red cube on the blue cube"
    assert twin.scene.task["instruction"] == "stack the blue cube on the red cube"
    assert twin.scene.task["roles"] == {"top": "base", "base": "top"}
    red, blue = c.object_bodies["top"], c.object_bodies["base"]
    assert (c.sym.body("top"), c.sym.body("base")) == (red, blue)
    assert (twin.sym.body("top"), twin.sym.body("base")) == (blue, red)
    assert c.scene.structure() != twin.scene.structure()
    assert c.structure_key != twin.structure_key
    buckets = make_buckets([c, twin])
    assert [[v.scene.task["instruction"] for v in b.variants] for b in buckets] == [
        [c.scene.task["instruction"]],
        [twin.scene.task["instruction"]],
    ]
    assert [b.sym.body("top") for b in buckets] == [red, blue]


def test_bucket_refuses_variants_whose_roles_differ(pairs):
    c, twin = pairs[0]
    with pytest.raises(ValueError, match=r"roles \['base', 'top'\] are bound to different"):
        Bucket([c, twin])
    with pytest.raises(ValueError, match=r"'top': object 'base' vs 'top'"):
        Bucket([c, twin])
    # same task, another layout: one bucket, as before
    moved = compile_scene(resample(c.scene, "layout", 7))
    assert len(Bucket([c, moved]).variants) == 2


def _top_above_base(bucket, result) -> np.ndarray:
    """[B] bool: the bucket's own "top" cube ends higher than its "base" cube (by geometry)."""
    end = jax.tree_util.tree_map(lambda x: x[:, -1], result.states)
    dz = G.pos(end, bucket.sym.body("top"))[..., 2] - G.pos(end, bucket.sym.body("base"))[..., 2]
    return np.asarray(dz) > 0.02  # m: a cube's edge is >= 4 cm


def test_planner_nu_and_potential_solve_the_twin_alone(pairs, native_backend):
    pot = None
    for _, twin in pairs:
        (bucket,) = make_buckets([twin])
        r = native_backend.rollout(
            bucket, planner_for(bucket), None, jax.random.PRNGKey(0), NUM_CHUNKS
        )
        nu = np.asarray(bucket.success_over_time(r.states))  # [1, C+1]
        assert not nu[0, 0] and bool(r.success[0]), twin.scene.task
        assert _top_above_base(bucket, r)[0], "the blue cube must end on the red one"
        if pot is None:  # the twins share task and symbol table: one program serves all three
            pot = compile_program(subgoal_program(bucket.scene_task), bucket.sym)
        assert pot.sym == bucket.sym
        phi = np.asarray(pot.phi(r.states))  # [1, C+1]
        assert phi[0, 0] < 1.0 / pot.num_stages
        np.testing.assert_allclose(phi[0, -1], 1.0, atol=1e-6)


def test_originals_and_twins_batched_each_solve_their_own_task(pairs, native_backend):
    flat = [v for pair in pairs for v in pair]
    buckets = make_buckets(flat)
    assert len(buckets) == 2
    for bucket in buckets:
        assert len({v.scene.task["instruction"] for v in bucket.variants}) == 1
        r = native_backend.rollout(
            bucket, planner_for(bucket), None, jax.random.PRNGKey(0), NUM_CHUNKS
        )
        assert np.asarray(r.success).all(), bucket.scene_task["instruction"]
        assert _top_above_base(bucket, r).all()
