"""LIBERO's Panda as a jitted JAX step on MJX (`coda.libero.panda_mjx`): its controller is
robosuite's OSC_POSE as `coda.libero.osc` computes it, its robot-only dynamics are the scene's,
and (slow, MuJoCo Warp) its steps follow native MuJoCo's `PandaEnv`."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from mujoco import mjx

from coda.libero import osc, suites
from coda.libero import panda as PD
from coda.libero import panda_mjx as PM

pytestmark = pytest.mark.usefixtures("libero_data")

ROOT = pathlib.Path(__file__).resolve().parents[1]
TASK = ("libero_goal", 3)  # a kitchen: the cabinet, stove, bottle and bowl; the mounted Panda


def _random_dynamics(rng, b: int) -> dict:
    """Well-conditioned arm dynamics: an SPD inertia, full-rank Jacobians."""
    a = rng.normal(size=(b, 7, 7))
    return {
        "mass": a @ np.swapaxes(a, 1, 2) / 7 + np.eye(7),
        "jp": rng.normal(size=(b, 3, 7)),
        "jr": rng.normal(size=(b, 3, 7)),
        "q": rng.normal(size=(b, 7)),
        "qvel": rng.normal(size=(b, 7)),
        "bias": rng.normal(size=(b, 7)),
        "ee_pos": rng.normal(size=(b, 3)),
        "ee_ori": osc.axis_angle_matrix(rng.normal(size=(b, 3))),
    }


def test_osc_torques_are_osc_arm_torques():
    """The JAX controller gives robosuite's torques (as `osc.arm_torques`) on random states,
    below and at the motors' limits."""
    rng = np.random.default_rng(0)
    b, cfg = 16, osc.OSCConfig()
    dyn = _random_dynamics(rng, b)
    state = osc.OSCState(
        goal_pos=dyn["ee_pos"] + rng.normal(0, 0.05, (b, 3)),
        goal_ori=osc.axis_angle_matrix(rng.normal(0, 0.3, (b, 3))) @ dyn["ee_ori"],
        initial_joint=np.tile(np.asarray(PD.INIT_QPOS), (b, 1)),
        gripper=np.zeros((b, 2)),
    )
    for bound in (1e4, 5.0):  # unclipped, then mostly clipped
        limit = np.tile([[-bound, bound]], (7, 1))
        want = osc.arm_torques(
            state, cfg, dyn["mass"], dyn["jp"], dyn["jr"], dyn["q"], dyn["qvel"], dyn["bias"],
            dyn["ee_pos"], dyn["ee_ori"], limit,
        )  # fmt: skip
        got = jax.vmap(PM.osc_torques, in_axes=(None, 0, 0, 0, *[0] * 9))(
            cfg, *(jnp.asarray(x, jnp.float32) for x in (state.goal_pos, state.goal_ori,
            state.initial_joint, dyn["mass"], dyn["jp"], dyn["jr"], dyn["q"], dyn["qvel"],
            dyn["bias"], dyn["ee_pos"], dyn["ee_ori"], limit[None].repeat(b, 0))),
        )  # fmt: skip
        scale = np.abs(want).max()
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-4 * scale, rtol=0)
    rot = np.array([0.3, -0.2, 0.5])
    np.testing.assert_allclose(
        np.asarray(PM.axis_angle_matrix(jnp.asarray(rot))), osc.axis_angle_matrix(rot[None])[0],
        atol=1e-6,
    )  # fmt: skip


@pytest.mark.slow  # MJX's body-tree kinematics: ~30 s op by op, ~100 s to jit at the suite's -O0
def test_robot_only_dynamics_are_the_scenes():
    """The arm's inertia block, site Jacobians, bias forces and site pose from the robot-only
    MJX model equal native MuJoCo's on the whole scene (moving arm, objects at LIBERO's stored
    state): the objects are not in the arm's subtree."""
    pt = PD.compile_panda_task(TASK[0], suites.tasks(TASK[0])[TASK[1]])
    robot = PM.robot_spec(pt.task).compile()
    assert robot.nq == robot.nv == PD.S.ROBOT_NQ
    m, d = pt.model, mujoco.MjData(pt.model)
    d.qpos[:], d.qvel[:] = pt.init_state(2)
    d.qvel[: robot.nv] = np.random.default_rng(1).normal(0, 0.3, robot.nv)
    mujoco.mj_forward(m, d)
    idx = osc.ArmIndex.of(m, PD.ARM_JOINTS, "tcp", PD.ARM_ACTUATORS, PD.FINGER_ACTUATORS)
    nat = osc._dynamics(m, [d], idx)
    rm = mjx.put_model(robot, impl="jax")
    ridx = osc.ArmIndex.of(robot, PD.ARM_JOINTS, "tcp", PD.ARM_ACTUATORS, [])
    body = int(robot.site_bodyid[ridx.site])

    def dynamics(qpos, qvel):  # what the controller reads
        rd = PM.arm_dynamics(rm, qpos, qvel)
        jp, jr = mjx.jac(rm, rd, rd.site_xpos[ridx.site], body)
        return mjx.full_m(rm, rd), jp, jr, rd.qfrc_bias, rd.site_xpos[ridx.site]

    full, jp, jr, bias, site = (np.asarray(x) for x in dynamics(
        jnp.asarray(d.qpos[: robot.nq]), jnp.asarray(d.qvel[: robot.nv])))  # fmt: skip
    dof = ridx.dof
    np.testing.assert_allclose(full[np.ix_(dof, dof)], nat["mass"][0], atol=1e-4)
    np.testing.assert_allclose(jp[dof].T, nat["jp"][0], atol=1e-5)
    np.testing.assert_allclose(jr[dof].T, nat["jr"][0], atol=1e-5)
    np.testing.assert_allclose(bias[dof], nat["bias"][0], atol=1e-3)
    np.testing.assert_allclose(site, d.site_xpos[idx.site], atol=1e-5)


def test_bad_backend_is_a_one_line_error():
    with pytest.raises(ValueError, match="valid warp, jax"):
        PM.PandaMJX(TASK[0], suites.tasks(TASK[0])[TASK[1]], impl="cuda")


@pytest.mark.skipif(
    importlib.util.find_spec("mujoco_warp") is None,
    reason="MuJoCo Warp not installed (`make warp`)",
)
def test_warp_contact_buffer_is_the_batchs():
    """Warp's contact buffer is one for all the worlds a step vmaps over: a batch of B worlds
    gets B x max_contacts (a per-world size given as the batch's would drop contacts from 6
    worlds on: a LIBERO kitchen holds ~44 at rest), one template per batch size."""
    mx = PM.PandaMJX(TASK[0], suites.tasks(TASK[0])[TASK[1]], impl="warp", max_contacts=50)
    for b in (1, 4096):
        t = mx.template(b)
        assert t._impl.contact__dist.shape == (b * 50,)
        assert t._impl.efc__D.shape == (mx.max_constraints,)  # per world: vmapped over
        assert mx.template(b) is t


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("mujoco_warp") is None,
    reason="MuJoCo Warp not installed (`make warp`)",
)
def test_mjx_steps_follow_native_mujoco(tmp_path):
    """From LIBERO's stored states, the same smooth actions: the MJX (Warp) episode's grasp
    site follows `PandaEnv`'s within 0.1 mm over the first steps (the hand moving freely;
    robosuite's cached reset state included), the objects stay where native MuJoCo keeps them,
    and ν agrees at every step. 8 worlds: with Warp's contact buffer sized per world but shared
    by the batch, this batch dropped contacts and its objects ended 18 cm off. Run through
    `benchmarks/libero_mjx_speed.py` in its own process: the suite's XLA flags
    (`--xla_backend_optimization_level=0`, conftest) make the jitted step ~10x slower."""
    out = tmp_path / "mjx"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "libero_mjx_speed.py"), "--suite=libero_goal",
           "--task=3", "--worlds=8", "--native_worlds=8", "--steps=6", f"--out={out}"]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=1800)
    res = json.loads(out.with_suffix(".json").read_text())
    row = res["mjx"][0]
    assert row["worlds"] == 8 and res["native"]["worlds"] == 8
    assert row["site_error_mm_max"] < 0.1
    assert row["object_pos_error_mm_max"] < 0.01
    assert row["success_agreement"] == 1.0
