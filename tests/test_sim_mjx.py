"""MJX buckets: per-variant fields take effect, backends agree, NaN isolation, sharding.

Every MJX episode compile costs ~1 minute on a 2-core CPU, so all tests in this file share one
bucket shape (4 variants, 14 chunks) through session fixtures, and the tests that roll it out
on both backends are slow-marked (the default tier keeps the per-variant field checks); the sharding / deadlock check
lives in tests/test_mjx_deadlock.py (a subprocess with 4 forced host devices; marked slow).
"""

import jax
import numpy as np
import pytest

from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.rollout import Bucket, MjxBackend, make_backend, varied_fields
from coda.sim.sdk import exec_program

NUM_CHUNKS = 14


@pytest.fixture(scope="module")
def mjx_backend():
    return MjxBackend()


@pytest.fixture(scope="module")
def both_results(cube_plate_bucket, mjx_backend, native_backend):
    planner = planner_for(cube_plate_bucket)
    key = jax.random.PRNGKey(0)
    m = mjx_backend.rollout(cube_plate_bucket, planner, None, key, NUM_CHUNKS)
    n = native_backend.rollout(cube_plate_bucket, planner, None, key, NUM_CHUNKS)
    return m, n


def test_backend_auto_is_native_without_accelerator():
    assert make_backend("auto").name == "native"
    with pytest.raises(KeyError, match="valid"):
        make_backend("warp-drive")


def test_varied_fields_are_per_variant_model_fields(cube_plate_bucket):
    fields = set(varied_fields(cube_plate_bucket))
    assert {
        "geom_size",
        "geom_rbound",
        "body_mass",
        "geom_friction",
        "geom_rgba",
        "body_pos",
        "qpos0",
    } <= fields


def test_structurally_different_variants_cannot_share_a_bucket(cube_plate_bucket):
    other = compile_scene(
        exec_program(
            'add_object("ball", role="target")\nadd_object("plate", role="goal")\n'
            'set_task("pick_place", target="target", goal="goal")\n',
            0,
            isolation="inprocess",
        )
    )
    with pytest.raises(ValueError, match="different structure"):
        Bucket([cube_plate_bucket.variants[0], other])


@pytest.mark.slow  # shares the two 14-chunk episodes (MJX + native) of `both_results`
def test_backends_agree_on_planner_success(both_results):
    m, n = both_results
    assert np.asarray(n.success).all()
    agree = np.mean(np.asarray(m.success) == np.asarray(n.success))
    assert agree >= 0.95, (m.success, n.success)
    # same decoded layout at t=0 on both backends (same sensors, same state layout)
    np.testing.assert_allclose(
        np.asarray(m.states.body_pos[:, 0]), np.asarray(n.states.body_pos[:, 0]), atol=1e-5
    )


@pytest.mark.slow  # shares the two 14-chunk episodes (MJX + native) of `both_results`
def test_backends_decode_the_same_body_velocities(cube_plate_bucket, both_results):
    """The velocity sensors ν's "at rest" reads come out of MJX as out of MuJoCo: the carried
    cube moves (> 0.1 m/s mid-episode) and comes to rest, with the same numbers on both."""
    from coda.sim import predicates

    m, n = both_results
    i = cube_plate_bucket.sym.body("target")
    lin_m, lin_n = (
        np.asarray(m.states.body_linvel[:, :, i]),
        np.asarray(n.states.body_linvel[:, :, i]),
    )
    ang_m, ang_n = (
        np.asarray(m.states.body_angvel[:, :, i]),
        np.asarray(n.states.body_angvel[:, :, i]),
    )
    np.testing.assert_allclose(lin_m, lin_n, atol=1e-2)  # measured < 1e-3 m/s
    np.testing.assert_allclose(ang_m, ang_n, atol=5e-2)  # measured < 3e-3 rad/s
    speed = np.linalg.norm(lin_m, axis=-1)  # [B, C+1]
    assert (speed.max(1) > 0.1).all(), speed
    assert (speed[:, -1] < predicates.REST_MAX_SPEED).all(), speed


@pytest.mark.slow  # shares the two 14-chunk episodes (MJX + native) of `both_results`
def test_commanded_setpoint_is_the_integrated_actions_on_both_backends(
    cube_plate_bucket, both_results
):
    """`SimState.ee_cmd` at every endpoint = the initial setpoint + the actions executed so far
    (robot.apply_actions), identically on both backends: it is what makes the state Markov."""
    from coda.sim import robot

    for r in both_results:
        target = np.asarray(cube_plate_bucket.init_ctrl[:, :6], np.float32)
        np.testing.assert_allclose(np.asarray(r.states.ee_cmd[:, 0]), target, atol=1e-6)
        for c in range(NUM_CHUNKS):
            _, target = robot.apply_actions(target, r.actions[:, c])
            np.testing.assert_allclose(np.asarray(r.states.ee_cmd[:, c + 1]), target, atol=1e-5)
    # at rest after the retreat, the tcp sits at its setpoint (wrist minus the tcp offset)
    m, _ = both_results
    tcp_goal = np.asarray(m.states.ee_cmd[:, -1, :3]) - [0.0, 0.0, robot.TCP_OFFSET]
    np.testing.assert_allclose(np.asarray(m.states.ee_pos[:, -1]), tcp_goal, atol=0.01)


@pytest.mark.slow  # shares the two 14-chunk episodes (MJX + native) of `both_results`
def test_per_variant_size_changes_contact_geometry(cube_plate_bucket, both_results):
    """Each cube ends on the plate at plate top + its *own* half size: MJX used every
    variant's geom_size in collision, not the first variant's."""
    m, _ = both_results
    i_cube = cube_plate_bucket.sym.body("target")
    i_plate = cube_plate_bucket.sym.body("goal")
    z = np.asarray(m.states.body_pos[:, -1, i_cube, 2])
    half = cube_plate_bucket.consts["body_half"][:, i_cube, 2]
    plate_top = 2 * cube_plate_bucket.consts["body_half"][:, i_plate, 2]
    assert np.ptp(half) > 0.002, "fixture variants should differ in size"
    np.testing.assert_allclose(z, plate_top + half, atol=0.003)
    assert np.ptp(z) > 0.002


@pytest.mark.slow  # ~30 s: two more 14-chunk MJX episodes on the CPU
def test_nan_variant_is_isolated(
    cube_plate_bucket, mjx_backend, native_backend, both_results, tmp_path, monkeypatch
):
    """A variant whose physics turns non-finite is marked failed; the others are untouched."""
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its instability warning to ./MUJOCO_LOG.TXT
    poisoned = [compile_scene(v.scene) for v in cube_plate_bucket.variants]
    i = poisoned[1].model.body("target").id
    poisoned[1].model.body_mass[i] = np.nan
    bucket = Bucket(poisoned)
    planner = planner_for(bucket)
    clean_m, clean_n = both_results
    for backend, clean in ((mjx_backend, clean_m), (native_backend, clean_n)):
        r = backend.rollout(bucket, planner, None, jax.random.PRNGKey(0), NUM_CHUNKS)
        failed = np.asarray(r.failed)
        assert failed.tolist() == [False, True, False, False], backend.name
        assert not bool(r.success[1])
        ok = np.array([0, 2, 3])
        np.testing.assert_array_equal(np.asarray(r.success)[ok], np.asarray(clean.success)[ok])
        np.testing.assert_allclose(
            np.asarray(r.states.body_pos)[ok], np.asarray(clean.states.body_pos)[ok], atol=1e-5
        )
        assert np.isfinite(np.asarray(r.states.body_pos)).all() or backend.name == "mjx"
