"""A LIBERO task driven as LIBERO drives it: the Panda under OSC_POSE at 20 Hz, LIBERO's stored
initial states, LIBERO's observations, success by LIBERO's goal (ν).

    env = PandaEnv("libero_spatial", name, n_envs=2, image_size=128)
    obs = env.reset([0, 1])                       # LIBERO's initial states 0 and 1
    obs, success = env.step(np.zeros((2, 7)))     # one 20 Hz step per environment

Observations carry robosuite's keys and conventions, in LIBERO's world frame:
`robot0_eef_pos` (the grasp site), `robot0_eef_quat` (the hand body, x y z w),
`robot0_gripper_qpos` (2), `robot0_joint_pos` (7), `state` (openpi's 8-D LIBERO state:
eef pos, axis-angle of the eef quat, gripper qpos), and with `image_size` the two camera images
`agentview_image` / `robot0_eye_in_hand_image` [B, H, W, 3] uint8 in robosuite's row order
(OpenGL: bottom row first). With `obs_perturbation` (`coda.libero.perturb`: camera / light /
noise levels) the frames are perturbed, never the physics; image noise is drawn per (seed,
initial state, step), so an episode's frames do not depend on the batch it runs in. With
`layout_shift` = (level, seed), LIBERO-Plus's layout shift: the objects LIBERO places on the
table are moved as `perturb.layout_offsets` draws them (the floating gripper's
`perturb.layout_shift` moves the same objects by the same offsets), an offset shortened where it
would make its object overlap another body (`moved` says what was applied), then settled by the
protocol's no-op steps.

`reset` sets the stored state as LIBERO's `set_init_state` does (qpos, qvel; no settling: the
evaluation protocol's no-op steps settle the objects under control), and the controller as
robosuite builds it at reset (`osc.reset_state` at LIBERO's `init_qpos`).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import mujoco
import numpy as np

from coda.libero import osc, placement
from coda.libero import panda as PD
from coda.libero import perturb as PT
from coda.libero import predicates as P
from coda.libero import render as LR
from coda.sim.state import decode

FRAMES_PER_EPISODE = 100_000  # frame_index's stride per initial state (> any episode's steps)
SEPARATED = 0.001  # m: how much deeper a layout shift may put an object into another body
SHIFT_SCALES = (1.0, 0.5, 0.25, 0.0)  # a layout offset's tries, until its object fits


def _host_device():
    """The CPU device where JAX has one (not with JAX_PLATFORMS naming only accelerators)."""
    try:
        return jax.devices("cpu")[0]
    except RuntimeError:
        return None


# ν runs on the host: a step's [B, ~70] sensor values are faster there than a round trip to an
# accelerator, and the outcome is then the same bits in one process or in workers
# (`evaluate_panda`, whose workers run on the CPU) and on GPU / TPU hosts (a TPU's default
# float32 matmul precision is lower)
HOST = _host_device()


def quat_to_axis_angle(q_xyzw: np.ndarray) -> np.ndarray:
    """[B, 4] x y z w -> [B, 3] axis-angle (robosuite's `quat2axisangle`, w clipped to ±1)."""
    q = np.asarray(q_xyzw, np.float64)
    w = np.clip(q[:, 3], -1.0, 1.0)
    den = np.sqrt(1.0 - w * w)
    angle = 2.0 * np.arccos(w)
    safe = np.where(np.isclose(den, 0.0), 1.0, den)
    return np.where(np.isclose(den, 0.0)[:, None], 0.0, q[:, :3] * (angle / safe)[:, None])


class PandaEnv:
    """`n_envs` copies of one LIBERO task with the Panda, stepped on the host (native MuJoCo)."""

    def __init__(
        self,
        suite: str,
        name: str,
        n_envs: int = 1,
        image_size: int | None = None,
        cfg: osc.OSCConfig = osc.OSCConfig(),
        obs_timing: str = "robosuite",
        fixture_seed: int | None = None,
        fixture_reset: int = 1,
        fixture_chained: bool = False,
        obs_perturbation: PT.ObsPerturbation | None = None,
        layout_shift: tuple[int, int] | None = None,
    ):
        """`fixture_seed`: the fixtures where LIBERO's `env.seed(fixture_seed); env.reset()` puts
        them (`coda.libero.placement`) on the `fixture_reset`-th reset of a LIBERO env, for
        every environment of this one (`fixture_chained`: the env seeded once, before its first
        reset, as openpi's LIBERO client does); None: the centres of their regions."""
        if obs_timing not in ("robosuite", "end"):
            raise ValueError(f"obs_timing {obs_timing!r}: valid 'robosuite', 'end'")
        self.obs_timing = obs_timing
        self.pt = PD.compile_panda_task(suite, name)
        self.fixture_seed, self.fixture_reset = fixture_seed, int(fixture_reset)
        self.fixture_chained = bool(fixture_chained)
        self.model = self._placed(self.pt.model)
        self.cfg = cfg
        self.image_size = image_size
        self.datas = [mujoco.MjData(self.model) for _ in range(n_envs)]
        self.idx = osc.ArmIndex.of(
            self.model, PD.ARM_JOINTS, "tcp", PD.ARM_ACTUATORS, PD.FINGER_ACTUATORS
        )
        self.hand = self.model.body(PD.HAND_BODY).id
        self.fingers = np.asarray(
            [self.model.jnt_qposadr[self.model.joint(j).id] for j in PD.FINGER_JOINTS]
        )
        self._scratch = mujoco.MjData(self.model)  # kinematics of sampled states (observe)
        self.state: osc.OSCState | None = None
        layout, consts, sym, nu = self.pt.layout, self.pt.consts, self.pt.sym, self.pt.success
        self._success = jax.jit(
            lambda sd: nu(decode(sd, layout, consts, np.zeros(sd.shape[:-1] + (6,))), sym)
        )
        self._per_atom: dict = {}  # atoms -> jitted [B, A] truth (`atoms_hold`)
        self._vis = None
        self._sampled = None  # (qpos after substep n-2, after n-1) of the last step
        self.obs_perturbation = obs_perturbation
        self.layout_shift = layout_shift
        self.moved: list[dict[str, list[float]]] = []
        self.inits = np.zeros(n_envs, np.int64)  # the initial states of the last reset
        self.t = 0  # steps since the last reset

    def _placed(self, model: mujoco.MjModel) -> mujoco.MjModel:
        """`model`, or with `fixture_seed` a copy with the fixtures at LIBERO's placement."""
        if self.fixture_seed is None:
            return model
        return placement.place_fixtures(
            model, self.pt.task, self.fixture_seed, self.fixture_reset, self.fixture_chained
        )

    @property
    def n_envs(self) -> int:
        return len(self.datas)

    def reset(self, init_indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Every environment at LIBERO's stored initial state `init_indices[b]`."""
        if len(init_indices) != self.n_envs:
            raise ValueError(f"{len(init_indices)} initial states for {self.n_envs} environments")
        self.moved = []  # per environment: the layout shift's offsets applied, object -> [dx, dy]
        for d, i in zip(self.datas, init_indices, strict=True):
            mujoco.mj_resetData(self.model, d)
            d.qpos[:], d.qvel[:] = self.pt.init_state(int(i))
            if self.layout_shift is not None:
                self.moved.append(self._shift(d, int(i)))
            mujoco.mj_forward(self.model, d)
        fingers = dict(zip(self.fingers.tolist(), PD.GRIPPER_INIT, strict=True))
        self.state = osc.reset_state(
            self.model, self.datas, self.idx, np.asarray(PD.INIT_QPOS), fingers
        )
        self._sampled = None
        self.inits, self.t = np.asarray(init_indices, np.int64), 0
        return self.observe()

    def _shift(self, d: mujoco.MjData, index: int) -> dict[str, list[float]]:
        """Initial state `index`'s table objects moved by the layout's offsets, one at a time;
        an offset that would put its object more than SEPARATED deeper into any other body than
        it was is halved, then quartered, then dropped, as LIBERO's placement
        samplers reject overlapping draws (pushing such overlaps apart under LIBERO's 2 ms
        physics threw a bowl left 5 mm into a plate off the table). -> the offsets applied."""
        level, seed = self.layout_shift
        mujoco.mj_forward(self.model, d)
        moved = {}
        for obj, dxy in PT.layout_offsets(self.pt.task, index, level, seed).items():
            adr = self.model.jnt_qposadr[self.model.joint(f"{obj}/free").id]
            body = self.model.body(obj).id
            start, before = d.qpos[adr : adr + 2].copy(), _depths(self.model, d, body)
            for scale in SHIFT_SCALES:
                d.qpos[adr : adr + 2] = start + scale * dxy
                mujoco.mj_forward(self.model, d)
                after = _depths(self.model, d, body)
                if scale == 0.0 or all(
                    v <= before.get(other, 0.0) + SEPARATED for other, v in after.items()
                ):
                    break
            moved[obj] = [float(v) for v in scale * dxy]
        return moved

    def step(self, actions: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """One 20 Hz step with actions [B, 7]: (observations, success [B] by ν)."""
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(actions, np.float64)
        if a.shape != (self.n_envs, 7):
            raise ValueError(f"actions must be [{self.n_envs}, 7], got {a.shape}")
        n = self.cfg.substeps
        sampled = {}

        def sample(k: int) -> None:  # robosuite's observables: qpos after substeps n-2, n-1
            if self.obs_timing == "robosuite" and k + 1 in (n - 2, n - 1):
                sampled[k + 1] = np.stack([d.qpos.copy() for d in self.datas])

        with osc.sensors_off(self.model):  # the substeps' sensors are never read
            self.state = osc.step(self.model, self.datas, self.idx, self.state, a, self.cfg, sample)
        for d in self.datas:  # ν (and "end" observations) read the state the step ended at
            mujoco.mj_forward(self.model, d)
        self._sampled = (sampled[n - 2], sampled[n - 1]) if sampled else None
        self.t += 1
        return self.observe(), self.success()

    def success(self) -> np.ndarray:
        sd = np.stack([d.sensordata for d in self.datas]).astype(np.float32)
        return np.asarray(self._success(jax.device_put(sd, HOST)), bool)

    def atoms_hold(self, atoms: tuple) -> np.ndarray:
        """[B, A] truth of each resolved goal atom now (`predicates.per_atom`; the planner's
        progress through a compound goal)."""
        fn = self._per_atom.get(atoms)
        if fn is None:
            layout, consts = self.pt.layout, self.pt.consts

            def per_atom(sd):
                state = decode(sd, layout, consts, np.zeros(sd.shape[:-1] + (6,)))
                return P.per_atom(state, atoms)

            fn = self._per_atom[atoms] = jax.jit(per_atom)
        sd = np.stack([d.sensordata for d in self.datas]).astype(np.float32)
        return np.asarray(fn(jax.device_put(sd, HOST)), bool)

    def observe(self, image_size: int | None = None) -> dict[str, np.ndarray]:
        """Observations of the last step (after `reset`: of the set state). With
        `obs_timing="robosuite"` they are sampled as robosuite's observables are during a step:
        joint and finger positions after substep n-1 of n, the grasp site, hand and images from
        the kinematics of the state after substep n-2 (measured against LIBERO itself:
        benchmarks/libero_reference); with "end", everything at the step's end. `image_size`:
        the cameras at that size for this call (else at the environment's own, if any)."""
        if self._sampled is None:
            pose_q = joint_q = np.stack([d.qpos for d in self.datas])
        else:
            pose_q, joint_q = self._sampled
        scratch = self._scratch
        pos, quat_wxyz = [], []
        for q in pose_q:
            scratch.qpos[:] = q
            mujoco.mj_kinematics(self.model, scratch)
            pos.append(scratch.site_xpos[self.idx.site].copy())
            quat_wxyz.append(scratch.xquat[self.hand].copy())
        quat_wxyz = np.stack(quat_wxyz)
        quat = np.concatenate([quat_wxyz[:, 1:], quat_wxyz[:, :1]], axis=1)
        grip = joint_q[:, self.fingers]
        obs = {
            "robot0_eef_pos": PD.to_libero(np.stack(pos), self.pt.task.workspace),
            "robot0_eef_quat": quat,
            "robot0_gripper_qpos": grip,
            "robot0_joint_pos": joint_q[:, self.idx.qpos],
        }
        obs["state"] = np.concatenate(
            [obs["robot0_eef_pos"], quat_to_axis_angle(quat), grip], axis=1
        )
        size = image_size or self.image_size
        if size:
            obs.update(self.images(size, pose_q))
        return obs

    def _visual(self) -> mujoco.MjModel:
        """The task's visual model (LIBERO's meshes and textures), built on first use."""
        if self._vis is None:
            vis = PD.compile_panda_task(self.pt.suite, self.pt.task.name, True).model
            self._vis = self._placed(vis)
            self._vis.site_rgba[:, 3] = 0.0  # LIBERO's observations show no sites
        return self._vis

    def images(self, size: int, qpos: np.ndarray) -> dict[str, np.ndarray]:
        """The two cameras at states `qpos` [B, nq] (the environments' current step): [B, size,
        size, 3] uint8, bottom row first as robosuite gives them."""
        frames = self._frames(qpos, size, LR.CAMERAS, self.frame_index(self.inits, self.t))
        return {
            "agentview_image": frames[:, 0, ::-1],
            "robot0_eye_in_hand_image": frames[:, 1, ::-1],
        }

    def agentview(
        self, qpos: np.ndarray, size: int = LR.IMAGE_SIZE, frames: np.ndarray | None = None
    ) -> np.ndarray:
        """LIBERO's agent view at states `qpos` [T, nq]: [T, size, size, 3] uint8, top row first
        (as a video shows it). `frames` [T]: the states' `frame_index` (their image noise)."""
        index = np.zeros(len(qpos), np.int64) if frames is None else np.asarray(frames)
        return self._frames(qpos, size, LR.CAMERAS[:1], index)[:, 0]

    @staticmethod
    def frame_index(init: np.ndarray | int, t: np.ndarray | int) -> np.ndarray:
        """The image-noise index of initial state `init`'s episode at step `t` since its reset."""
        return np.asarray(init, np.int64) * FRAMES_PER_EPISODE + np.asarray(t, np.int64)

    def _frames(self, qpos, size: int, cameras, index: np.ndarray) -> np.ndarray:
        """[B, len(cameras), size, size, 3] top-down, under the observation perturbation."""
        p = self.obs_perturbation
        noise = p is not None and p.kind == "noise"
        out = LR.render_observations(
            self._visual(), qpos, size=size, cameras=cameras, robosuite=True,
            perturbation=None if noise else p,
        )  # fmt: skip
        if noise:
            index = np.broadcast_to(index, (len(out),))
            pairs = zip(out, index, strict=True)
            out = np.stack([PT.perturb_images(f, p, int(i)) for f, i in pairs])
        return out


def _depths(model: mujoco.MjModel, d: mujoco.MjData, body: int) -> dict[int, float]:
    """Other body tree (root id) -> the deepest penetration (m) of `body`'s tree into it, over
    the contacts of d's last forward pass."""
    root, out = model.body_rootid, {}
    for k in range(d.ncon):
        c = d.contact[k]
        pair = root[model.geom_bodyid[c.geom1]], root[model.geom_bodyid[c.geom2]]
        if body in pair:
            other = int(pair[1] if pair[0] == body else pair[0])
            out[other] = max(out.get(other, 0.0), -c.dist)
    return out


def hand_axes(env, d: mujoco.MjData) -> tuple[np.ndarray, np.ndarray]:
    """(approach, closing): unit vectors of the hand's pointing (wrist to grasp site) and of
    its fingers' closing axis (the left finger's joint axis), world frame."""
    a = d.site_xpos[env.idx.site] - d.xpos[env.hand]
    a = a / np.linalg.norm(a)
    c = d.xaxis[env.model.joint(PD.FINGER_JOINTS[0]).id].copy()
    c = c - a * (a @ c)
    return a, c / np.linalg.norm(c)
