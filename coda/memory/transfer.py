"""Copying what a memory learned about *difficulties* into another memory (transfer).

The semantic and procedural tiers describe the simulator and the task: which factor / phase /
cause makes the task hard (a validated mode), how to generate more of it (Ω) and how to shape
learning on it (Φ). The episodic tier and the success statistics describe one policy: how often
*that* policy succeeded where. `transfer_modes` copies the first kind into `dst` and leaves the
second behind, so a new policy (another backbone, another seed) starts from the validated
difficulties without inheriting another policy's numbers.

Copied, per validated source mode (ids are remapped; `dst` keeps its own id space):
* the mode: factor δ, phase p, label, status ``validated``, its cause centroid (``cause_state``,
  so that the new run's diagnoses of the same failure join it instead of founding a twin);
* the corpus statistics the centroids are weighted with (``cause_df``, ``n_docs``: aggregate term
  counts, added to `dst`'s);
* its Ω generation programs (variants, roles, the program in ``meta``), and the scene program an
  Ω entry names as its parent (``parent_scene_program_id``), when it names one;
* its accepted Φ training programs (``meta.accepted``; rejected compile attempts stay behind).

Reset (kept only as provenance in a ``transferred`` mode event and in ``meta.transfer``): the
mode's success statistics (p̂_j, trials / successes, round counts), learning progress w_j and its
count, the diagnosis count, Φ's improvement evidence. A transferred mode is "validated, never
evaluated on this policy": the allocator's optimism (hardness 1 for a mode without p̂_j) sends
budget to it in the first round, and its own p̂_j follows from this policy's rollouts.

Not copied: candidate / refuted / retired modes (a candidate's failure may be the old policy's
own; a refuted one was refuted), diagnoses, deployments, verifiers, generation traces, mode
events and memberships (the episodic record of another run, read it there).

One transaction; a ``memory_transfer`` record in ``meta`` makes a second call a no-op that
returns the first call's result (resume safety: nothing is ever duplicated).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coda.memory.store import MemoryStore, Mode, _dumps

__all__ = ["META_KEY", "TransferResult", "recorded_transfer", "transfer_modes"]

META_KEY = "memory_transfer"


@dataclass(frozen=True)
class TransferResult:
    """What a transfer wrote: the mode id map (source id -> new id) and counts per table."""

    mode_map: dict[int, int]
    counts: dict[str, int]
    source: dict[str, Any] = field(default_factory=dict)
    created: bool = True  # False: `dst` already held this transfer (nothing written)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode_map": {str(k): v for k, v in self.mode_map.items()},
            "counts": dict(self.counts),
            "source": dict(self.source),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], created: bool = False) -> TransferResult:
        return cls(
            {int(k): int(v) for k, v in d["mode_map"].items()},
            {k: int(v) for k, v in d["counts"].items()},
            dict(d.get("source", {})),
            created,
        )


def recorded_transfer(dst: MemoryStore) -> TransferResult | None:
    """The transfer `dst` already holds (its ``meta`` record), else None."""
    with dst._lock:
        raw = dst._meta_get(dst._conn, META_KEY)
    return None if raw is None else TransferResult.from_dict(json.loads(raw))


def transfer_modes(
    src: MemoryStore,
    dst: MemoryStore,
    *,
    round: int,
    source: Mapping[str, Any],
    mode_ids: Sequence[int] | None = None,
) -> TransferResult:
    """Copy validated modes of `src` with their Ω and accepted Φ into `dst` (module docstring).

    `round`: the round of `dst` the copies belong to (the loop uses 0). `source`: provenance
    (run folder, snapshot round, strategy, policy, ...), stored with every copied record.
    `mode_ids`: which validated modes (default: all); another status is a `ValueError`.
    """
    _check_compatible(src, dst)
    done = recorded_transfer(dst)
    if done is not None:
        return done
    validated = {m.id: m for m in src.modes(status="validated")}
    ids = _chosen_modes(validated, mode_ids)
    prov = {k: v for k, v in dict(source).items()}
    cp = _Copy(src, dst, round, prov, time.time())
    with dst.batch():
        conn = dst._conn
        _copy_corpus(cp)
        mode_map = {old: _copy_mode(cp, validated[old]) for old in ids}
        scene_map: dict[int, int] = {}
        for old, new in mode_map.items():
            _copy_generation_programs(cp, old, new, scene_map)
            _copy_training_programs(cp, old, new)
        result = TransferResult(mode_map, cp.counts, prov, True)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?)", (META_KEY, _dumps(result.as_dict()))
        )
        dst._load_corpus(conn)
    return result


def _check_compatible(src: MemoryStore, dst: MemoryStore) -> None:
    if src.memory_mode != "full" or dst.memory_mode != "full":
        raise ValueError(
            f"memory transfer needs full memories (modes keyed by (δ, p)); got "
            f"{src.memory_mode!r} -> {dst.memory_mode!r}"
        )
    if src.similarity.name != dst.similarity.name:
        raise ValueError(
            f"source memory clusters causes with {src.similarity.name!r}, this one with "
            f"{dst.similarity.name!r}: its mode centroids would not be comparable"
        )


def _chosen_modes(validated: Mapping[int, Mode], mode_ids: Sequence[int] | None) -> list[int]:
    """The source mode ids to copy (default: every validated one); each must be validated."""
    ids = sorted(validated) if mode_ids is None else [int(i) for i in mode_ids]
    missing = [i for i in ids if i not in validated]
    if missing:
        raise ValueError(
            f"source modes {missing} are not validated (validated: {sorted(validated)})"
        )
    return ids


# What `TransferResult.counts` counts, in its order.
_COUNTED = ("modes", "generation_programs", "training_programs", "scene_programs", "cause_terms")


@dataclass
class _Copy:
    """One transfer in progress: both memories, the target round, provenance, counts."""

    src: MemoryStore
    dst: MemoryStore
    round: int
    prov: dict[str, Any]
    now: float
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTED, 0))


def _copy_corpus(cp: _Copy) -> None:
    """Add the corpus statistics the centroids' IDF weights come from (aggregate term counts)."""
    src, conn = cp.src, cp.dst._conn
    terms = src._conn.execute("SELECT feature, df FROM cause_df").fetchall()
    conn.executemany(
        "INSERT INTO cause_df(feature, df) VALUES (?, ?) "
        "ON CONFLICT(feature) DO UPDATE SET df = df + excluded.df",
        [(int(f), int(d)) for f, d in terms],
    )
    cp.counts["cause_terms"] = len(terms)
    n_docs = int(src._meta_get(src._conn, "n_docs") or 0)
    conn.execute(
        "INSERT INTO meta(key, value) VALUES ('n_docs', ?) ON CONFLICT(key) DO "
        "UPDATE SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT)",
        (str(n_docs), n_docs),
    )


def _copy_mode(cp: _Copy, m: Mode) -> int:
    """Insert a validated mode with its cause centroid and reset statistics; -> its new id."""
    old = m.id
    (cause_state,) = cp.src._conn.execute(
        "SELECT cause_state FROM modes WHERE id=?", (old,)
    ).fetchone()
    new = cp.dst._insert(
        "modes",
        {
            "factor": m.factor,
            "phase": m.phase,
            "label": m.label,
            "status": "validated",
            "created_round": int(cp.round),
            "cause_state": cause_state,
            "updated_at": cp.now,
        },
    )
    cp.counts["modes"] += 1
    stats = {
        "n_diagnoses": m.n_diagnoses,
        "n_trials": m.n_trials,
        "n_successes": m.n_successes,
        "hardness": m.hardness,
        "hardness_round": m.hardness_round,
        "importance": m.importance,
        "n_progress": m.n_progress,
        "created_round": m.created_round,
    }
    cp.dst._event(
        new, int(cp.round), "transferred", {**cp.prov, "from_mode": old, "statistics": stats}
    )
    return new


def _copy_parent_scene(cp: _Copy, parent: int, new_mode: int) -> int:
    """Copy the scene program an Ω entry names as its parent; -> its new id."""
    sp = cp.src.get_scene_program(parent)
    new_id = cp.dst._insert(
        "scene_programs",
        {
            "round": int(cp.round),
            "mode_id": new_mode,
            "parent_id": None,
            "factor": sp.factor,
            "source": sp.source,
            "meta": _dumps({**(sp.meta or {}), "transfer": {**cp.prov, "from_id": sp.id}}),
            "created_at": cp.now,
        },
    )
    cp.counts["scene_programs"] += 1
    return new_id


def _copy_generation_programs(cp: _Copy, old: int, new: int, scene_map: dict[int, int]) -> None:
    """Copy the Ω entries of source mode `old` (oldest first) into mode `new`, with parents."""
    for gp in reversed(cp.src.generation_programs(mode_id=old)):  # oldest first
        parent = gp.parent_scene_program_id
        if parent is not None and parent not in scene_map:
            scene_map[parent] = _copy_parent_scene(cp, parent, new)
        cp.dst._insert(
            "generation_programs",
            {
                "round": int(cp.round),
                "mode_id": new,
                "parent_scene_program_id": None if parent is None else scene_map[parent],
                "factor": gp.factor,
                "variants": _dumps(gp.variants),
                "compile_checks": _dumps(gp.compile_checks),
                "roles": _dumps(gp.roles),
                "role_signature": gp.role_signature,
                "meta": _dumps(
                    {
                        **(gp.meta or {}),
                        "transfer": {**cp.prov, "from_id": gp.id, "from_round": gp.round},
                    }
                ),
                "created_at": cp.now,
            },
        )
        cp.counts["generation_programs"] += 1


def _copy_training_programs(cp: _Copy, old: int, new: int) -> None:
    """Copy the accepted Φ entries of source mode `old` (oldest first) into mode `new`; their
    evidence starts empty (kept in ``meta.transfer``)."""
    for tp in reversed(cp.src.training_programs(mode_id=old)):
        if not (tp.meta or {}).get("accepted"):
            continue
        cp.dst._insert(
            "training_programs",
            {
                "round": int(cp.round),
                "mode_id": new,
                "phase": tp.phase,
                "subgoals": _dumps(tp.subgoals),
                "potential_source": tp.potential_source,
                "tools": _dumps(tp.tools),
                "evidence": _dumps([]),
                "improved": None,
                "role_signature": tp.role_signature,
                "meta": _dumps(
                    {
                        **(tp.meta or {}),
                        "transfer": {
                            **cp.prov,
                            "from_id": tp.id,
                            "from_round": tp.round,
                            "evidence": tp.evidence,
                            "improved": tp.improved,
                        },
                    }
                ),
                "created_at": cp.now,
            },
        )
        cp.counts["training_programs"] += 1
