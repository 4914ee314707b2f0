"""LIBERO's Panda (`coda.libero.panda`), robosuite's OSC_POSE (`coda.libero.osc`) and the
environment that drives a LIBERO task with them (`coda.libero.panda_env`)."""

import math

import mujoco
import numpy as np
import pytest

from coda.libero import osc, suites
from coda.libero import panda as PD
from coda.libero import panda_env as E
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero import scene as S

pytestmark = pytest.mark.usefixtures("libero_data")

NOOP = [0.0] * 6 + [-1.0]


@pytest.fixture(scope="module")
def env():
    return E.PandaEnv("libero_spatial", suites.tasks("libero_spatial")[0], n_envs=2)


# one task of each scene kind the suites use (the coffee table has none)
TASK_OF = {
    "libero_tabletop_manipulation": ("libero_spatial", 0),
    "libero_floor_manipulation": ("libero_object", 0),
    "libero_living_room_tabletop_manipulation": ("libero_10", 0),
    "libero_kitchen_tabletop_manipulation": ("libero_10", 2),
    "libero_study_tabletop_manipulation": ("libero_10", 5),
}


@pytest.mark.parametrize("problem", sorted(TASK_OF))
def test_panda_state_layout_is_liberos(problem):
    """The compiled model's qpos / qvel are LIBERO's stored layout (robot first), the base sits
    where LIBERO's problem class puts it, the sensors' names resolve."""
    suite, k = TASK_OF[problem]
    pt = PD.compile_panda_task(suite, suites.tasks(suite)[k])
    assert pt.task.problem.problem == problem
    m = pt.model
    assert pt.task.states.shape[1] == 1 + m.nq + m.nv
    assert [m.joint(i).name for i in range(9)] == list(PD.ARM_JOINTS) + [
        "gripper/left_finger",
        "gripper/right_finger",
    ]
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = pt.init_state(0)
    mujoco.mj_kinematics(m, d)
    base = PD.to_libero(d.body("robot0_base").xpos, pt.task.workspace)
    np.testing.assert_allclose(base, PD.BASES[problem].pos, atol=1e-6)
    mounted = any(m.body(i).name.startswith("mount0_") for i in range(m.nbody))
    assert mounted == PD.BASES[problem].mounted
    if mounted:  # robosuite's `add_mount`: the mount's root 1 cm above the base (its file's
        # own -0.922 replaced): its pedestal under the base (as LIBERO has it) and its feet on
        # the floor
        ws = pt.task.workspace
        pedestal = PD.to_libero(d.geom_xpos[m.geom("mount0_pedestal_col").id], ws)
        np.testing.assert_allclose(pedestal, base + [-0.02, 0.0, -0.28], atol=1e-6)
        feet = m.geom("mount0_pedestal_feet_col").id
        bottom = PD.to_libero(d.geom_xpos[feet], ws)[2] - m.geom_size[feet, 2]
        assert 0.0 <= bottom < 0.02  # LIBERO's floor is z = 0
    assert m.site("tcp").id >= 0 and m.geom("gripper/left_pad").id >= 0
    assert m.camera(S.WRIST_CAMERA).id >= 0 and m.camera(S.AGENTVIEW_CAMERA).id >= 0


def test_panda_model_is_robosuites():
    """robosuite's joint settings and physics options, in radians."""
    m = PD.compile_panda_task("libero_spatial", suites.tasks("libero_spatial")[0]).model
    dof = [m.jnt_dofadr[m.joint(j).id] for j in PD.ARM_JOINTS]
    np.testing.assert_allclose(m.dof_damping[dof], PD.ARM_DAMPING, atol=1e-9)
    np.testing.assert_allclose(m.dof_armature[dof], [5.0 / (i + 1) for i in range(7)], atol=1e-9)
    np.testing.assert_allclose(m.dof_frictionloss[dof], 0.1, atol=1e-9)
    j4 = m.jnt_range[m.joint("robot0_joint4").id]
    np.testing.assert_allclose(j4, [-3.0718, -0.0698], atol=1e-6)  # radians, not degrees
    assert m.opt.timestep == pytest.approx(0.002, abs=1e-12)
    assert m.opt.impratio == pytest.approx(20.0, abs=1e-9)
    assert m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    motors = [m.actuator(a).id for a in PD.ARM_ACTUATORS]
    np.testing.assert_allclose(m.actuator_ctrlrange[motors, 1], [80] * 5 + [12] * 2, atol=1e-9)


def test_noop_settles_towards_the_reset_pose_then_holds(env):
    """LIBERO's no-op ([0]*6, -1): robosuite's first goal after reset is the grasp site of the
    reset pose (its controller's cached state; LIBERO's stored arm differs slightly), so the
    site moves towards it during that step; every later goal is the site itself, so it then
    holds still with gravity compensated."""
    obs0 = env.reset([0, 1])
    home = env.state.goal_pos.copy()  # the reset pose's site, our frame
    assert env.state.reset is not None
    env.step(np.array([NOOP, NOOP]))
    assert env.state.reset is None  # used once
    for _ in range(14):
        obs, success = env.step(np.array([NOOP, NOOP]))
    site = np.stack([d.site_xpos[env.idx.site] for d in env.datas])
    start = PD.to_libero(home, env.pt.task.workspace)
    before = np.linalg.norm(obs0["robot0_eef_pos"] - start, axis=1)
    after = np.linalg.norm(site - home, axis=1)
    assert np.all(after < before - 0.002), (before, after)  # one step's pull, then no goal
    held = site.copy()
    for _ in range(5):
        env.step(np.array([NOOP, NOOP]))
    site = np.stack([d.site_xpos[env.idx.site] for d in env.datas])
    assert np.linalg.norm(site - held, axis=1).max() < 0.001
    assert not success.any()
    assert np.all(obs["robot0_gripper_qpos"][:, 0] > 0.035)  # -1 opened the fingers


def test_substeps_without_sensors_give_the_same_states_and_end_sensors(env):
    """`PandaEnv.step` runs its substeps with the sensors off (`osc.sensors_off`): the states,
    and the sensors of the step's end state that ν reads, are the same bits as with them on,
    and the model's flags are restored."""
    flags = env.model.opt.disableflags
    env.reset([0, 1])
    ref = [mujoco.MjData(env.model) for _ in env.datas]
    for r, d in zip(ref, env.datas, strict=True):
        r.qpos[:], r.qvel[:] = d.qpos, d.qvel
        mujoco.mj_forward(env.model, r)
    state = env.state
    rng = np.random.default_rng(0)
    for _ in range(6):
        a = np.clip(rng.normal(0.0, 0.5, (2, 7)), -1.0, 1.0)
        env.step(a)
        state = osc.step(env.model, ref, env.idx, state, a, env.cfg)
        for r in ref:
            mujoco.mj_forward(env.model, r)
    assert env.model.opt.disableflags == flags
    for r, d in zip(ref, env.datas, strict=True):
        np.testing.assert_array_equal(d.qpos, r.qpos)
        np.testing.assert_array_equal(d.qvel, r.qvel)
        np.testing.assert_array_equal(d.sensordata, r.sensordata)
    assert np.any(ref[0].sensordata != 0.0)


def test_batched_dynamics_are_the_per_data_ones(env):
    """`osc._dynamics` takes the arm's rows and columns once for the batch: the same values as
    per data, row-major, and so the same torques to the last bit (a transposed layout made
    numpy's matmul sum in another order: 58 of libero_goal's 500 planner episodes then ended
    at other steps)."""
    env.reset([0, 1])
    rng = np.random.default_rng(1)
    for _ in range(3):
        env.step(np.clip(rng.normal(0.0, 0.5, (2, 7)), -1.0, 1.0))
    for d in env.datas:
        mujoco.mj_forward(env.model, d)
    m, idx, n = env.model, env.idx, len(env.idx.dof)
    ref = {k: np.zeros((2, 3, n)) for k in ("jp", "jr")}
    ref["mass"] = np.zeros((2, n, n))
    jp, jr, full = np.zeros((3, m.nv)), np.zeros((3, m.nv)), np.zeros((m.nv, m.nv))
    for i, d in enumerate(env.datas):  # one data at a time, as robosuite's controller reads it
        mujoco.mj_jacSite(m, d, jp, jr, idx.site)
        mujoco.mj_fullM(m, d, full)
        ref["mass"][i], ref["jp"][i], ref["jr"][i] = (
            full[np.ix_(idx.dof, idx.dof)],
            jp[:, idx.dof],
            jr[:, idx.dof],
        )
    ref["q"] = np.stack([d.qpos[idx.qpos] for d in env.datas])
    ref["qvel"] = np.stack([d.qvel[idx.dof] for d in env.datas])
    ref["bias"] = np.stack([d.qfrc_bias[idx.dof] for d in env.datas])
    got = osc._dynamics(m, env.datas, idx)
    for k, v in ref.items():
        np.testing.assert_array_equal(got[k], v)
        assert got[k].flags["C_CONTIGUOUS"], k
    pos, ori = osc.site_pose(m, env.datas, idx)
    lim = m.actuator_ctrlrange[idx.motors]

    def torques(dyn):
        keys = ("mass", "jp", "jr", "q", "qvel", "bias")
        return osc.arm_torques(env.state, env.cfg, *(dyn[k] for k in keys), pos, ori, lim)

    np.testing.assert_array_equal(torques(got), torques(ref))


def test_success_is_computed_on_the_host(env, monkeypatch):
    """ν's inputs go to the CPU device whatever JAX's default device is (an accelerator: one
    process would compute on it and `evaluate_panda`'s workers on the CPU)."""
    assert E.HOST is not None and E.HOST.platform == "cpu"
    seen = []
    real = E.jax.device_put
    monkeypatch.setattr(E.jax, "device_put", lambda x, dev: seen.append(dev) or real(x, dev))
    env.reset([0, 1])
    assert (
        env.success().shape == (2,)
        and env.atoms_hold(env.pt.success.keywords["atoms"]).shape[0] == 2
    )
    assert seen == [E.HOST, E.HOST]


def test_delta_actions_move_the_site_along_their_axis(env):
    """+x and -z at full scale move the site ~1 cm per 20 Hz step along that axis (goal 5 cm
    ahead every step, kp 150) and little along the others; +1 closes the gripper."""
    obs0 = env.reset([0, 0])
    a = np.array([[1, 0, 0, 0, 0, 0, -1.0], [0, 0, -1, 0, 0, 0, 1.0]])
    for _ in range(10):
        obs, _ = env.step(a)
    d = obs["robot0_eef_pos"] - obs0["robot0_eef_pos"]
    assert 0.05 < d[0, 0] < 0.2 and abs(d[0, 1]) < 0.01 and abs(d[0, 2]) < 0.03
    assert -0.2 < d[1, 2] < -0.05 and abs(d[1, 0]) < 0.02 and abs(d[1, 1]) < 0.01
    assert obs["robot0_gripper_qpos"][1, 0] < 0.01  # closed on nothing


def test_rotation_action_turns_the_hand_about_that_axis(env):
    env.reset([0, 0])
    a = np.array([[0, 0, 0, 0, 0, 0.5, -1.0], NOOP])
    r0 = np.stack([d.site_xmat[env.idx.site].reshape(3, 3).copy() for d in env.datas])
    for _ in range(4):
        env.step(a)
    r1 = np.stack([d.site_xmat[env.idx.site].reshape(3, 3) for d in env.datas])
    rel = r1[0] @ r0[0].T  # world-frame rotation the step applied
    angle = math.acos(np.clip((np.trace(rel) - 1) / 2, -1, 1))
    axis = np.array([rel[2, 1] - rel[1, 2], rel[0, 2] - rel[2, 0], rel[1, 0] - rel[0, 1]])
    assert 0.05 < angle < 1.0  # 4 steps, each towards a goal 0.25 rad ahead of the hand
    assert abs(axis[2]) / np.linalg.norm(axis) > 0.95  # about world z
    # the no-op row keeps robosuite's orientation goal, set at reset from LIBERO's init_qpos
    # (the stored state's arm differs slightly): it turns towards it, not about z
    goal = env.state.goal_ori[1]
    assert np.linalg.norm(r1[1] - goal) < 0.5 * np.linalg.norm(r0[1] - goal)


def test_gripper_command_follows_robosuite():
    """robosuite's PandaGripper: the command moves 0.01 per substep towards ±1, so closing from
    fully open takes 200 substeps (8 policy steps); 0 holds."""
    cfg = osc.OSCConfig()
    st = osc.OSCState(np.zeros((3, 3)), np.zeros((3, 3, 3)), np.zeros((3, 7)), np.zeros((3, 2)))
    st.gripper[:] = [1.0, -1.0]  # fully open
    for _ in range(100):
        st = osc.gripper_step(st, np.array([1.0, -1.0, 0.0]), cfg)
    np.testing.assert_allclose(st.gripper[0], [0.0, 0.0], atol=1e-9)  # half way after 4 steps
    np.testing.assert_allclose(st.gripper[1], [1.0, -1.0], atol=1e-9)  # stays open
    np.testing.assert_allclose(st.gripper[2], [1.0, -1.0], atol=1e-9)  # 0 holds
    ranges = np.array([[0.0, 0.04], [-0.04, 0.0]])
    np.testing.assert_allclose(osc.finger_targets(st, ranges)[1], [0.04, -0.04], atol=1e-9)


def test_osc_math():
    """Rodrigues against MuJoCo's quaternion conversion, the orientation error's sign and size,
    and axis-angle of robosuite's quaternions."""
    v = np.array([[0.3, -0.2, 0.5], [0.0, 0.0, 0.0]])
    rot = osc.axis_angle_matrix(v)
    q = np.zeros(4)
    mujoco.mju_axisAngle2Quat(q, v[0] / np.linalg.norm(v[0]), np.linalg.norm(v[0]))
    ref = np.zeros(9)
    mujoco.mju_quat2Mat(ref, q)
    np.testing.assert_allclose(rot[0], ref.reshape(3, 3), atol=1e-9)
    np.testing.assert_allclose(rot[1], np.eye(3), atol=1e-12)
    small = osc.axis_angle_matrix(np.array([[0.0, 0.0, 0.01]]))
    err = osc.orientation_error(small, np.eye(3)[None])
    np.testing.assert_allclose(err[0], [0.0, 0.0, 0.01], atol=1e-6)
    aa = E.quat_to_axis_angle(np.array([[0.0, 0.0, math.sin(0.2), math.cos(0.2)]]))
    np.testing.assert_allclose(aa[0], [0.0, 0.0, 0.4], atol=1e-9)


def test_observations_are_liberos(env):
    """robosuite's keys in LIBERO's world frame: the site above LIBERO's table top, the hand
    pointing down, openpi's 8-D state composed of them."""
    obs = env.reset([0, 3])
    assert set(obs) >= {
        "robot0_eef_pos",
        "robot0_eef_quat",
        "robot0_gripper_qpos",
        "robot0_joint_pos",
        "state",
    }
    ws = env.pt.task.workspace
    assert np.all(obs["robot0_eef_pos"][:, 2] > ws.top_z + 0.1)
    np.testing.assert_allclose(np.linalg.norm(obs["robot0_eef_quat"], axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(obs["state"][:, :3], obs["robot0_eef_pos"], atol=1e-12)
    np.testing.assert_allclose(obs["state"][:, 6:], obs["robot0_gripper_qpos"], atol=1e-12)
    # LIBERO's stored states start the arm at its init pose: hand down (rotation ~pi about x)
    assert np.all(np.abs(obs["state"][:, 3]) > 2.8)
    np.testing.assert_allclose(obs["robot0_joint_pos"][0], env.pt.task.states[0, 1:8], atol=1e-12)


def test_bad_inputs_are_one_line_errors(env):
    with pytest.raises(ValueError, match="out of range"):
        env.pt.init_state(50)
    env.reset([0, 0])
    with pytest.raises(ValueError, match=r"actions must be \[2, 7\]"):
        env.step(np.zeros((2, 6)))


def test_scripted_pick_place_puts_the_soup_in_the_basket():
    """`panda_planner`'s pick-and-place under OSC_POSE succeeds on libero_object's first task
    (LIBERO itself replays the same actions to success: benchmarks/results/libero_fidelity)."""
    env = E.PandaEnv("libero_object", suites.tasks("libero_object")[0], n_envs=1)
    planner = PP.PandaPickPlace(env)
    env.reset([0])
    success = False
    for _ in range(200):
        success |= bool(env.step(planner.act(env))[1][0])
    assert success
    assert planner.plans[0].phase == 8  # the whole plan ran


@pytest.mark.parametrize(
    "suite, what",
    [
        ("libero_object", "milk"),
        ("libero_object", "cream_cheese"),
        ("libero_spatial", "between_the_plate_and_the_ramekin"),
    ],
)
def test_scripted_pick_place_carries_tall_objects_turns_for_long_ones_and_takes_bowls_by_the_rim(
    suite, what
):
    """The milk carton stands taller than the basket's rim is high over the carry line (it
    used to hit the rim and fall); the cream cheese box is longer than the fingers open, so
    the hand turns to close across its width; the bowl is wider than they open everywhere, so
    the fingers straddle its wall on a side where the hand clears the ramekin
    (benchmarks/results/libero_panda_planner_trace)."""
    name = next(n for n in suites.tasks(suite) if what in n)
    env = E.PandaEnv(suite, name, n_envs=1)
    planner = PP.PandaPickPlace(env)
    env.reset([0])
    success = False
    for _ in range(280):
        success |= bool(env.step(planner.act(env))[1][0])
        if success:
            break
    assert success


def test_a_bowl_is_taken_by_its_wall_and_a_box_across_its_width():
    """`grasp_of`: a 6 x 3 cm box is grasped at its centre across the 3 cm (within the width
    tie, towards the current direction); a 14 cm round footprint (wider than the fingers open
    everywhere) by the wall of the side asked for, the fingers closing towards the centre."""
    box = np.c_[np.array([[x, y] for x in (-0.03, 0.03) for y in (-0.015, 0.015)]), np.zeros(4)]
    xy, yaw, rim = PO.grasp_of(box + [0.5, 0.1, 0.0], current=0.0)
    np.testing.assert_allclose(xy, [0.5, 0.1], atol=1e-6)
    assert not rim and abs(PO.wrap(yaw - np.pi / 2)) < np.deg2rad(10.0)  # the width tie
    a = np.linspace(0.0, 2 * np.pi, 36, endpoint=False)
    bowl = np.c_[0.07 * np.cos(a) + 0.5, 0.07 * np.sin(a), np.zeros_like(a)]
    xy, yaw, rim = PO.grasp_of(bowl, current=0.0, side=0)  # the wall nearest the robot (-x)
    assert rim and abs(PO.wrap(yaw)) < 1e-6
    np.testing.assert_allclose(xy, [0.5 - 0.07 + PO.RIM_INSET, 0.0], atol=1e-6)
    xy, yaw, rim = PO.grasp_of(bowl, current=0.0, side=2)  # the +y wall
    np.testing.assert_allclose(xy, [0.5, 0.07 - PO.RIM_INSET], atol=1e-6)
    assert abs(PO.wrap(yaw - np.pi / 2)) < 1e-6


def _width(corners: np.ndarray, yaw: float) -> float:
    proj = corners[:, :2] @ np.array([np.cos(yaw), np.sin(yaw)])
    return float(proj.max() - proj.min())


def test_the_closing_direction_is_across_the_narrowest_width():
    """`closing_yaw` on an 8 x 4 cm footprint turned by 30 degrees closes across the 4 cm
    width (near 120 degrees, within the width tie); on a 6 cm square the two narrowest
    directions tie, and the hand takes the smaller turn."""
    a = np.deg2rad(30.0)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    box = np.array([[x, y] for x in (-0.04, 0.04) for y in (-0.02, 0.02)]) @ rot.T
    corners = np.c_[box, np.zeros(4)]
    yaw = PO.closing_yaw(corners, current=0.0)
    assert _width(corners, yaw) <= 0.04 + PO.WIDTH_TIE + 1e-6
    assert abs(PO.wrap(yaw - np.deg2rad(120.0))) < np.deg2rad(10.0)
    square = np.c_[np.array([[x, y] for x in (-0.03, 0.03) for y in (-0.03, 0.03)]), np.zeros(4)]
    current = np.deg2rad(80.0)  # nearer 90 (a 10 degree turn) than 0 (80 degrees)
    yaw = PO.closing_yaw(square, current)
    assert _width(square, yaw) <= 0.06 + PO.WIDTH_TIE + 1e-6
    assert abs(PO.wrap(yaw - current)) <= np.deg2rad(10.0)


def test_scripted_planner_refuses_goals_it_cannot_plan():
    env = E.PandaEnv("libero_goal", suites.tasks("libero_goal")[0], n_envs=1)  # Open(drawer)
    with pytest.raises(ValueError, match="no single In / On goal"):
        PP.PandaPickPlace(env)


def test_fixtures_stand_at_liberos_heights():
    """On the Panda's scenes a fixture stands where LIBERO's placement sampler puts it in z
    (measured in LIBERO itself: the stove's root at 0.905, the microwave's at 0.920); our
    gripper's scenes keep fixtures resting on the table."""
    for task_id, fixture, z in ((2, "flat_stove_1", 0.905), (9, "microwave_1", 0.920)):
        name = suites.tasks("libero_10")[task_id]
        pt = PD.compile_panda_task("libero_10", name)
        d = mujoco.MjData(pt.model)
        d.qpos[:], d.qvel[:] = pt.init_state(0)
        mujoco.mj_kinematics(pt.model, d)
        root = PD.to_libero(d.body(fixture).xpos, pt.task.workspace)
        assert root[2] == pytest.approx(z, abs=1e-6)
        ours = S.compile_task("libero_10", name, 0, settle=False)
        dd = mujoco.MjData(ours.model)
        dd.qpos[:] = ours.init_qpos
        mujoco.mj_kinematics(ours.model, dd)
        cat = fixture.rsplit("_", 1)[0]
        assert dd.body(fixture).xpos[2] == pytest.approx(-S.bottom_offset(cat), abs=1e-6)


def test_layout_shift_moves_the_table_objects_by_the_floating_gripper_s_offsets(tmp_path):
    """layoutN on the Panda: the objects LIBERO puts on the table move by `perturb.layout_offsets`
    (the floating gripper's own shift), shortened only where the full offset would overlap another
    body, and the protocol's no-ops settle them there. (libero_spatial 'next to the plate', state
    2: the bowl's full offset puts it 5 mm into the plate, and pushing that apart threw it off the
    table.)"""
    from coda.libero import evaluate_panda as EP
    from coda.libero import perturb as PT

    suite = "libero_spatial"
    name = next(n for n in suites.tasks(suite) if n.startswith("pick_up_the_black_bowl_next_to"))
    base = E.PandaEnv(suite, name, n_envs=2)
    shifted = E.PandaEnv(suite, name, n_envs=2, layout_shift=(5, 0))
    base.reset([2, 3])
    shifted.reset([2, 3])
    adr = {o: shifted.model.jnt_qposadr[shifted.model.joint(f"{o}/free").id]
           for o, _ in shifted.pt.task.problem.objects}  # fmt: skip
    for b, i in enumerate((2, 3)):
        want = PT.layout_offsets(shifted.pt.task, i, 5, 0)
        assert set(shifted.moved[b]) == set(want) and len(want) >= 3
        for obj, dxy in shifted.moved[b].items():
            got = (
                shifted.datas[b].qpos[adr[obj] : adr[obj] + 2] - base.datas[b].qpos[adr[obj] :][:2]
            )
            np.testing.assert_allclose(got, dxy, atol=1e-9)
            assert any(np.allclose(dxy, s * want[obj], atol=1e-12) for s in E.SHIFT_SCALES)
    full = PT.layout_offsets(shifted.pt.task, 2, 5, 0)["akita_black_bowl_1"]
    assert not np.allclose(shifted.moved[0]["akita_black_bowl_1"], full, atol=1e-6)  # shortened
    floating = PT.layout_shift(suite, name, 3, 5, 0).scene.task["initial"]["perturbation"]
    assert floating["moved"] == shifted.moved[1]  # state 3: no offset shortened
    for _ in range(10):
        for e in (base, shifted):
            e.step(np.broadcast_to(NOOP, (2, 7)))
    for b in range(2):
        for obj, dxy in shifted.moved[b].items():
            end = (
                shifted.datas[b].qpos[adr[obj] : adr[obj] + 3] - base.datas[b].qpos[adr[obj] :][:3]
            )
            assert np.linalg.norm(end - [*dxy, 0.0]) < 0.02, (b, obj, end, dxy)
    cfg = _libero_config()
    cfg.policy, cfg.tasks, cfg.init_states, cfg.perturbation, cfg.gifs = (
        "hold",
        "0",
        1,
        "layout2",
        0,
    )
    cfg.panda.max_steps, cfg.panda.wait_steps = 2, 1
    res = EP.evaluate(cfg, tmp_path)
    assert set(res["per_episode"][0]["moved"]) == set(PT.layout_offsets(
        S.load_task(suite, suites.tasks(suite)[0]), 0, 2, 0))  # fmt: skip


def _libero_config():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "configs" / "libero.py"
    spec = importlib.util.spec_from_file_location("_libero_panda_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()
