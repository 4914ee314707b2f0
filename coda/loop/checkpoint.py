"""Run folder checkpoints: one directory per complete round, written atomically.

    <workdir>/checkpoints/round_0003/
        learner/        orbax: the whole LearnerState (policy, critic, optimizers, replay, demos)
        memory.sqlite   a consistent snapshot of memory (SQLite's online backup API)
        state.json      the host run state (`coda.loop.state.RunState`)
        COMPLETE        written last; a directory without it is an interrupted save

A round is saved into ``round_XXXX.tmp`` and renamed when complete, so a kill at any point leaves
either the previous round or the new one, never half of one. Resuming copies the snapshot back
over the live memory database (records a killed round had written are dropped with it: nothing
lost, nothing duplicated), restores the learner and reloads the run state.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from typing import Any

import jax
import numpy as np
from absl import logging as absl_logging

from coda.loop import distributed
from coda.loop.state import RunState

CKPT_DIR = "checkpoints"
MARKER = "COMPLETE"


def round_dir(workdir: str, round_idx: int) -> str:
    return os.path.join(workdir, CKPT_DIR, f"round_{round_idx:04d}")


def backup_sqlite(memory: Any, dest: str) -> None:
    """A consistent copy of memory's database at `dest` (SQLite backup API, under its lock).

    Uses the store's own connection, so an in-memory store (the no-memory ablation) is copied too.
    """
    conn = memory._conn  # the backup API needs the live connection (also for ":memory:")
    out = sqlite3.connect(dest)
    try:
        with memory._lock:
            conn.backup(out)
    finally:
        out.close()


def restore_sqlite(src: str, memory: Any) -> None:
    """Replace memory's contents with the snapshot at `src` (backup API into the live store)."""
    source = sqlite3.connect(src)
    try:
        with memory._lock:
            source.backup(memory._conn)
    finally:
        source.close()
    if hasattr(memory, "_load_corpus"):  # similarity statistics are read from the database
        memory._load_corpus(memory._conn)


def save_round(
    workdir: str, state: RunState, learner: Any, memory: Any, extras: dict | None = None
) -> str:
    """Write round `state.round` atomically; complete rounds older than the previous one are
    pruned, except round 0. `extras`: host pytrees (e.g. accumulated demo rows) saved as leaves
    in extras.npz. Every host of a multi-host run calls it (the learner save is collective);
    only host 0 writes the host files."""
    final = round_dir(workdir, state.round)
    tmp = final + ".tmp"
    primary = distributed.is_primary()
    if primary:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    distributed.barrier(f"save_round_{state.round}_dir")
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.WARNING)  # orbax logs every file at INFO
    try:  # collective in a multi-host run: orbax writes each replicated array once
        learner.save(os.path.join(tmp, "learner"))
    finally:
        absl_logging.set_verbosity(verbosity)
    if not primary:  # the rest of the folder is host files: host 0 writes them
        distributed.barrier(f"save_round_{state.round}_done")
        return final
    backup_sqlite(memory, os.path.join(tmp, "memory.sqlite"))
    with open(os.path.join(tmp, "state.json"), "w") as f:
        f.write(state.to_json())
    leaves = {}
    for name, tree in (extras or {}).items():
        if tree is not None:
            for i, x in enumerate(jax.tree.leaves(tree)):
                leaves[f"{name}/{i}"] = np.asarray(x)
    np.savez(os.path.join(tmp, "extras.npz"), **leaves)
    with open(os.path.join(tmp, MARKER), "w") as f:
        f.write("ok\n")
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    _fsync_dir(os.path.dirname(final))
    # keep round 0 (the start other runs can adopt: `loop.start_from`) and the last two rounds
    for r in complete_rounds(workdir)[1:-2]:
        shutil.rmtree(round_dir(workdir, r), ignore_errors=True)
    distributed.barrier(f"save_round_{state.round}_done")
    return final


def complete_rounds(workdir: str) -> list[int]:
    base = os.path.join(workdir, CKPT_DIR)
    if not os.path.isdir(base):
        return []
    out = []
    for name in os.listdir(base):
        if name.startswith("round_") and not name.endswith(".tmp"):
            if os.path.exists(os.path.join(base, name, MARKER)):
                out.append(int(name[len("round_") :]))
    return sorted(out)


def latest_round(workdir: str) -> int | None:
    rounds = complete_rounds(workdir)
    return rounds[-1] if rounds else None


def load_round(
    workdir: str, round_idx: int, learner: Any, memory: Any
) -> tuple[RunState, dict[str, list[np.ndarray]]]:
    """Restore learner + memory in place from a complete round; returns its run state and the
    extras' leaves by name (`restore_batch` puts them back into a pytree)."""
    d = round_dir(workdir, round_idx)
    with open(os.path.join(d, "state.json")) as f:
        state = RunState.from_json(f.read())
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.WARNING)
    try:
        learner.restore(os.path.join(d, "learner"))
    finally:
        absl_logging.set_verbosity(verbosity)
    restore_sqlite(os.path.join(d, "memory.sqlite"), memory)
    extras: dict[str, list[np.ndarray]] = {}
    with np.load(os.path.join(d, "extras.npz")) as z:
        for key in sorted(z.files, key=lambda k: (k.split("/")[0], int(k.split("/")[1]))):
            extras.setdefault(key.split("/")[0], []).append(z[key])
    return state, extras


def restore_batch(leaves: list[np.ndarray] | None, template: Any) -> Any:
    """The saved leaves in `template`'s tree structure (None when nothing was saved)."""
    if leaves is None or template is None:
        return None
    treedef = jax.tree.structure(template)
    return jax.tree.unflatten(treedef, [jax.numpy.asarray(x) for x in leaves])


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
