"""How well the chunk critic ranks chunks it has not trained on (reported every round).

The rows a round adds to the replay are held out until the round's first critic update: before
that update, min_k Q_k(o, a) of each new chunk is compared with what the chunk led to. Two
areas under the ROC curve (Mann-Whitney, ties counted half):

* ``auc_success``: chunks of episodes that succeeded vs. chunks of episodes that failed;
* ``auc_return``: chunks whose observed (shaped) return to the episode's end is above the
  median of the new chunks vs. those at or below it.

0.5 is chance; NaN when the new chunks have one class only. An advantage-weighted update can
only be as good as this ranking (AWR weights rows by exp(A/λ) with A from the same heads).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from coda import lifetime
from coda.policy.base import Observation
from coda.train.critic import ChunkCritic
from coda.train.replay import Replay

BLOCK = 1024  # rows scored per call (fixed shape: one compile)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + ½ P(tie); NaN with one class."""
    s, y = np.asarray(scores, np.float64), np.asarray(labels, bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(s.size)
    ss = s[order]
    i = 0
    while i < s.size:  # average ranks over ties
        j = i
        while j + 1 < s.size and ss[j + 1] == ss[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def newest_rows(replay: Replay, n: int) -> Any:
    """The last `n` rows written (host copies, oldest first; at most the filled part); None
    for a buffer spread over several hosts (not read back here)."""
    if any(not getattr(x, "is_fully_addressable", True) for x in jax.tree.leaves(replay.data)):
        return None
    size, ptr, cap = int(replay.size), int(replay.ptr), replay.capacity
    n = min(int(n), size)
    idx = (ptr - n + np.arange(n)) % cap
    return jax.tree.map(lambda x: np.asarray(x)[idx], replay.data)


def _q_min(critic: ChunkCritic):
    @jax.jit
    def f(params, state, state_mask, tokens, token_mask, actions):
        obs = Observation(tokens, token_mask, state, state_mask)
        return critic.q_min(params, obs, actions)

    return f


# one scoring program per critic object (a run has one), emptied when a run ends
_Q = lifetime.RunCache("train.critic_quality", maxsize=2)


def ranking(critic: ChunkCritic, params: Any, rows: Any, token_len: int) -> dict[str, float]:
    """`auc_success`, `auc_return` and the number of chunks scored (module docstring)."""
    n = 0 if rows is None else int(rows.success.shape[0])
    if n == 0:
        return {}
    f, scores = _Q.get(critic, lambda: _q_min(critic)), []
    for s in range(0, n, BLOCK):
        sl = slice(s, min(s + BLOCK, n))
        pad = BLOCK - (sl.stop - sl.start)

        def cut(x, sl=sl, pad=pad):
            return np.pad(x[sl], [(0, pad)] + [(0, 0)] * (x.ndim - 1))

        q = f(
            params,
            cut(rows.state),
            cut(rows.state_mask),
            cut(rows.tokens[:, :token_len]),
            cut(rows.token_mask[:, :token_len]),
            cut(rows.actions),
        )
        scores.append(np.asarray(q)[: sl.stop - sl.start])
    q = np.concatenate(scores)
    mc = np.asarray(rows.mc, np.float64)
    return {
        "auc_success": auc(q, np.asarray(rows.success) > 0.5),
        "auc_return": auc(q, mc > np.median(mc)),
        "chunks": float(n),
    }


__all__ = ["auc", "newest_rows", "ranking"]
