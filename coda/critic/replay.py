"""Control-step traces of recorded episodes: the critic's phases read every control step, not
only the chunk endpoints the policy saw.

A rollout keeps the state at t = 0 and at each chunk endpoint (`RolloutResult.states`); a chunk
is many control steps (`policy.horizon`, 25 Hz), so a grip that closes and opens again inside
one chunk, or a hand that reaches the object and leaves it before the endpoint, never shows
there, and the phase segmentation would blame the phase before. `control_step_states` replays
the recorded action chunks of chosen variants open-loop on native MuJoCo from the bucket's
initial state, with the same servo integration (`robot.apply_actions`), recording the state
after every control step, and checks each replay against its recorded endpoints: a replay that
does not land where the recorded episode did (an MJX rollout replayed natively, a contact
resolved differently) is not used (`ok` False), and that episode keeps its endpoint
segmentation.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from coda.sim import robot
from coda.sim.rollout import Bucket, RolloutResult, decode_trace
from coda.sim.state import SimState

# A replay matches its recording when every tracked body and the tcp are within this of their
# recorded positions at every chunk endpoint (m). Float32 decoding alone differs by ~1e-6.
REPLAY_ATOL = 0.005


@functools.partial(jax.jit)
def _servo(target: jnp.ndarray, actions: jnp.ndarray):
    return robot.apply_actions(target, actions)


def _positions(states: SimState) -> np.ndarray:
    """[..., NB + 1, 3]: the tracked bodies' and the tcp's positions."""
    return np.concatenate(
        [np.asarray(states.body_pos), np.asarray(states.ee_pos)[..., None, :]], axis=-2
    )


def control_step_states(
    bucket: Bucket, result: RolloutResult, rows: np.ndarray, nthread: int | None = None
) -> tuple[SimState, np.ndarray]:
    """(states with leaves [R, C * H + 1, ...], ok [R] bool) for the variants `rows` of a rolled-
    out bucket: t = 0 and the state after every control step, replayed from `result.actions`
    [B, C, H, 7]; endpoint c sits at index c * H. ok: the replay matches the recorded chunk
    endpoints within REPLAY_ATOL (module docstring)."""
    from mujoco import rollout as mjrollout  # lazy: as coda.sim.rollout, loaded on first use

    rows = np.asarray(rows, int)
    actions = np.asarray(result.actions)[rows]  # [R, C, H, 7]
    n_rows, n_chunks, horizon = actions.shape[:3]
    models = [bucket.models[i] for i in rows]
    n = max(1, min(nthread or os.cpu_count() or 1, n_rows))
    datas = [mujoco.MjData(models[0]) for _ in range(n)]
    state, sens = (x[rows] for x in bucket.initial_state())
    target = jnp.asarray(bucket.init_ctrl[rows, :6])
    sens_t, cmd_t = [sens[:, None]], [np.asarray(target)[:, None]]
    for c in range(n_chunks):
        ctrl, target = _servo(target, jnp.asarray(actions[:, c]))
        ctrl = np.asarray(ctrl, np.float64)  # [R, H, NU]
        st, sd = mjrollout.rollout(
            models, datas, state, np.repeat(ctrl, robot.SUBSTEPS, axis=1), persistent_pool=True
        )
        state = st[:, -1]
        sens_t.append(sd[:, robot.SUBSTEPS - 1 :: robot.SUBSTEPS])  # after each control step
        cmd_t.append(ctrl[..., :6])
    consts = {k: jnp.asarray(v[rows]) for k, v in bucket.consts.items()}
    states = decode_trace(
        jnp.asarray(np.concatenate(sens_t, 1), jnp.float32),
        bucket.layout,
        consts,
        jnp.asarray(np.concatenate(cmd_t, 1), jnp.float32),
    )
    ends = jax.tree_util.tree_map(lambda x: x[:, ::horizon], states)
    recorded = jax.tree_util.tree_map(lambda x: np.asarray(x)[rows], result.states)
    err = np.abs(_positions(ends) - _positions(recorded)).max(axis=(1, 2, 3))
    return states, err <= REPLAY_ATOL
