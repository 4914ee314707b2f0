"""openpi checkpoint import (orbax params) and openpi norm stats (quantile normalisation)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax.traverse_util import flatten_dict, unflatten_dict

from coda.policy.base import Params


def _params_dir(path: str) -> str:
    """Accept an orbax params dir, or a checkpoint step dir that contains ``params/``."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"openpi checkpoint directory not found: {path}")
    if not os.path.exists(os.path.join(path, "_METADATA")) and os.path.isdir(
        os.path.join(path, "params")
    ):
        path = os.path.join(path, "params")
    if not os.path.exists(os.path.join(path, "_METADATA")):
        raise ValueError(f"{path} is not an orbax PyTree checkpoint (no _METADATA)")
    return path


def tree_metadata_keys(path: str) -> list[tuple[str, ...]]:
    with open(os.path.join(path, "_METADATA")) as f:
        meta = json.load(f)
    return [tuple(k["key"] for k in v["key_metadata"]) for v in meta["tree_metadata"].values()]


class _AbandonedReadLogs(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" records for reads of one checkpoint
    (their exception names its directory): the other arrays' failed reads of a restore that has
    already raised on the first one."""

    def __init__(self, path: str):
        super().__init__()
        self.path = os.path.abspath(path)

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        abandoned = str(record.msg).startswith("Task exception was never retrieved")
        return not (abandoned and exc is not None and self.path in str(exc))


def _drop_abandoned_reads(path: str) -> Callable[[], None]:
    """A restore that fails on one array (a truncated or corrupt file) closes orbax's event loop
    while tensorstore still finishes the other arrays' reads. Each of those then reports either
    "Event loop is closed" as an unraisable exception or, when its task is collected, asyncio's
    "Task exception was never retrieved" with its own read error: dozens of tracebacks around the
    real error. Those, and only those, are dropped (for the rest of the process when the restore
    fails: they keep coming after it); any other unraisable goes to the previous hook and any other
    asyncio record is logged. Returns the function that undoes both (for a restore that read
    everything)."""
    previous = sys.unraisablehook
    logs = _AbandonedReadLogs(path)

    def hook(unraisable) -> None:
        e = unraisable.exc_value
        if isinstance(e, RuntimeError) and str(e) == "Event loop is closed":
            return
        previous(unraisable)

    sys.unraisablehook = hook
    logging.getLogger("asyncio").addFilter(logs)

    def undo() -> None:
        sys.unraisablehook = previous
        logging.getLogger("asyncio").removeFilter(logs)

    return undo


def load_openpi(path: str, *, expected: Params | None = None, dtype: Any | None = None) -> Params:
    """Restore an openpi params checkpoint into our (identically named) param tree.

    Handles the on-disk item ``{'params': tree}`` and both key forms: pure-dict keys and training
    checkpoints whose every key ends in an extra ``value``. Leaves come back as host numpy arrays
    (optionally cast to ``dtype``). With ``expected`` (e.g. ``policy.param_shapes()``) the key set
    and shapes are checked, and a mismatch raises with the differing keys.
    """
    path = _params_dir(path)
    keys = tree_metadata_keys(path)
    restore_args = unflatten_dict({k: ocp.RestoreArgs(restore_type=np.ndarray) for k in keys})
    ckptr = ocp.PyTreeCheckpointer()
    undo = _drop_abandoned_reads(path)  # before: the first may come before orbax raises
    try:
        tree = ckptr.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore_args))
    finally:
        ckptr.close()
    undo()  # read whole: no read was abandoned
    flat = flatten_dict(tree)
    if all(k[0] == "params" for k in flat):
        flat = {k[1:]: v for k, v in flat.items()}
    if flat and all(k[-1] == "value" for k in flat):
        flat = {k[:-1]: v for k, v in flat.items()}
    if dtype is not None:
        flat = {k: np.asarray(v).astype(dtype) for k, v in flat.items()}
    params = unflatten_dict(flat)
    if expected is not None:
        check_params(params, expected)
    return params


def check_params(params: Params, expected: Params) -> None:
    """Raise ValueError listing missing / unexpected keys and shape mismatches."""
    got = {"/".join(k): np.shape(v) for k, v in flatten_dict(params).items()}
    want = {"/".join(k): tuple(v.shape) for k, v in flatten_dict(expected).items()}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    bad = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    if missing or extra or bad:
        raise ValueError(
            "params do not match the model: "
            f"missing={missing[:10]} unexpected={extra[:10]} "
            f"shape_mismatch={[(k, got[k], want[k]) for k in bad[:10]]}"
        )


# --- norm stats -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NormStats:
    """openpi per-dimension statistics. Quantile mode maps [q01, q99] to [-1, 1]."""

    mean: np.ndarray
    std: np.ndarray
    q01: np.ndarray | None = None
    q99: np.ndarray | None = None

    def normalize(self, x, use_quantiles: bool = True):
        d = x.shape[-1]
        if use_quantiles:
            q01, q99 = self._quantiles(d)
            return (x - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0
        return (x - self.mean[..., :d]) / (self.std[..., :d] + 1e-6)

    def unnormalize(self, x, use_quantiles: bool = True):
        d = x.shape[-1]
        if use_quantiles:
            q01, q99 = self._quantiles(d)
            return (x + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01
        return x * (self.std[..., :d] + 1e-6) + self.mean[..., :d]

    def _quantiles(self, d: int):
        if self.q01 is None or self.q99 is None:
            raise ValueError("quantile normalisation needs q01 and q99 in the norm stats")
        if self.q01.shape[-1] < d:
            raise ValueError(f"norm stats have {self.q01.shape[-1]} dims, data has {d}")
        return self.q01[..., :d], self.q99[..., :d]

    def to_json(self) -> dict:
        out = {"mean": self.mean.tolist(), "std": self.std.tolist()}
        if self.q01 is not None:
            out["q01"] = self.q01.tolist()
        if self.q99 is not None:
            out["q99"] = self.q99.tolist()
        return out


def load_norm_stats(path: str) -> dict[str, NormStats]:
    """Read openpi's ``norm_stats.json`` (``{"norm_stats": {key: {mean, std, q01, q99}}}``).

    ``path`` may be the file or a directory containing ``norm_stats.json``.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "norm_stats.json")
    with open(path) as f:
        data = json.load(f)
    if "norm_stats" in data:
        data = data["norm_stats"]
    out = {}
    for key, st in data.items():
        if not isinstance(st, dict) or "mean" not in st or "std" not in st:
            raise ValueError(f"norm stats entry {key!r} needs 'mean' and 'std'")
        arr = {k: np.asarray(v, np.float32) for k, v in st.items() if v is not None}
        if arr["mean"].shape != arr["std"].shape:
            raise ValueError(f"norm stats {key!r}: mean/std shapes differ")
        out[key] = NormStats(arr["mean"], arr["std"], arr.get("q01"), arr.get("q99"))
    return out


def save_norm_stats(path: str, stats: dict[str, NormStats]) -> None:
    """Write norm stats in openpi's JSON layout."""
    with open(path, "w") as f:
        json.dump({"norm_stats": {k: v.to_json() for k, v in stats.items()}}, f, indent=2)


def to_device(params: Params) -> Params:
    return jax.tree.map(jax.numpy.asarray, params)
