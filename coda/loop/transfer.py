"""`loop.memory_from`: seed a run's memory with another finished run's validated difficulties.

The method's backbone-transfer result: a second backbone (OpenVLA-OFT in the paper, `oft` here)
starts from the memory a finished CoDA run built with the first one, against the same backbone
from scratch at the same budget. What a run carries over is decided by what belongs to the task
rather than to the old policy:

Transferred (at round 0, after the start and before round 1; `coda.memory.transfer`):
* validated modes (δ, p, label, cause centroid) whose generation parents fit this run's task
  families, with the source's statistics kept as provenance only;
* their Ω generation programs (so round 1's targeted variants come from the validated program,
  not a fresh engine guess) and the parent scenes the source run kept per mode (`RunState.
  mode_parents`, capped at `loop.max_parents`): without parents a mode cannot be generated;
* their accepted Φ programs in memory, and the loop's Φ source per mode (`RunState.
  mode_potentials`) when both runs use the same potential kind (so no recompilation);
* the cause-similarity corpus statistics (term counts the centroids are weighted with).

Not transferred, and why:
* success statistics (p̂_j, trials, learning progress w_j) — the other backbone's; a
  transferred mode counts as never evaluated, so UCB's optimism (hardness 1) allocates the
  round-1 budget to the validated difficulties immediately, and this policy's own p̂_j follows;
* the allocator's counters n_j (`times_allocated`: the other run's exploration) — reset to 0;
* episodic records (diagnoses, deployments of the old policy, traces) and candidate / refuted /
  retired modes; the pool's per-program success (`program_success`);
* modes whose every parent belongs to a family this run does not train on (listed as skipped).

Provenance: every copied record names the source run folder, its snapshot round, strategy,
policy and seed (mode event ``transferred``, ``meta.transfer`` of Ω / Φ / scene programs, and
memory's ``meta.memory_transfer``); the round-0 metrics row gets ``memory_transfer``.

Resume safety: the copy is one transaction recorded in memory; the round-0 checkpoint is saved
again right after it. A crash before that save restores a memory without the record and the
copy runs again on it (same ids); after it, the record makes the call a no-op.

No JAX here: `coda.runconfig` calls `source_problems` before JAX is imported.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from coda import registries, runconfig
from coda.loop.state import RunState
from coda.memory import MemoryStore
from coda.memory.transfer import recorded_transfer, transfer_modes

# the checkpoint layout of `coda.loop.checkpoint` (which imports JAX; repeated here on purpose)
_CKPT_DIR, _MARKER = "checkpoints", "COMPLETE"
_SNAPSHOT_FILES = ("memory.sqlite", "state.json")


def final_snapshot(run_dir: str) -> tuple[int, str] | None:
    """(round, folder) of the run's last complete checkpoint holding a memory snapshot."""
    base = os.path.join(run_dir, _CKPT_DIR)
    if not os.path.isdir(base):
        return None
    found = []
    for name in os.listdir(base):
        d = os.path.join(base, name)
        if name.startswith("round_") and not name.endswith(".tmp") and name[6:].isdigit():
            if all(os.path.exists(os.path.join(d, f)) for f in (_MARKER, *_SNAPSHOT_FILES)):
                found.append((int(name[6:]), d))
    return max(found) if found else None


def usable_strategy(name: str) -> str:
    """'' if strategy `name` can use a transferred memory, else why not (pure Python)."""
    s = registries.STRATEGIES.get(name)
    if s is None:
        return ""  # the strategy check itself reports unknown names
    ok = [n for n, t in registries.STRATEGIES.items() if _drives_modes(t)]
    if not _drives_modes(s):
        alloc = type(s.allocator).__name__
        return (
            f"strategy {name!r} (memory {s.memory.name!r}, allocator {alloc}) does not "
            f"allocate over a full memory's modes, so a transferred memory would drive nothing "
            f"(strategies that can: {', '.join(ok)})"
        )
    return ""


def _drives_modes(s: Any) -> bool:
    """A strategy whose allocator spends on a full memory's modes."""
    return s.memory.name == "full" and s.allocator.targets_modes


def source_problems(path: str, strategy: str | None = None) -> list[str]:
    """Why `loop.memory_from=path` cannot seed a run of `strategy` (empty list: it can).

    Pure Python file checks: a run folder (config.json), finished (summary.json, which the loop
    writes after its last round), with a complete checkpoint holding a memory snapshot, made by
    a strategy whose memory has modes.
    """
    where = f"loop.memory_from={path!r}"
    out = []
    why = usable_strategy(strategy) if strategy else ""
    if why:
        out.append(f"{where}: {why}")
    if not os.path.isdir(path):
        return out + [f"{where}: no such run folder"]
    if not os.path.exists(os.path.join(path, "config.json")):
        return out + [f"{where}: not a run folder (no config.json)"]
    if not os.path.exists(os.path.join(path, "summary.json")):
        out.append(
            f"{where}: not a finished run (no summary.json: still running or interrupted; "
            "re-run its command to finish it)"
        )
        return out
    if final_snapshot(path) is None:
        out.append(f"{where}: holds no complete checkpoint with a memory snapshot")
        return out
    try:
        with open(os.path.join(path, "config.json")) as f:
            src = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        return out + [f"{where}: unreadable config.json ({e})"]
    theirs = registries.STRATEGIES.get(str(src.get("strategy")))
    if theirs is None or theirs.memory.name != "full":
        kind = "unknown" if theirs is None else theirs.memory.name
        out.append(
            f"{where}: its strategy {src.get('strategy')!r} kept no full memory (memory {kind!r})"
        )
    return out


def _copy_modes(
    src: str,
    snap: str,
    memory: Any,
    parents: dict,
    families: set[str],
    round: int,
    provenance: dict,
    done: Any,
) -> tuple[Any, list[int], dict[str, str]]:
    """(the transfer result, the source's validated modes, the skipped ones with why): the
    validated modes with a parent in this run's families copied from a private copy of the
    snapshot's memory (`done`, the recorded earlier transfer, instead when there is one)."""
    tmp = tempfile.mkdtemp(prefix="coda_memory_from_")
    try:
        # a private copy: opening a store writes (WAL, schema, meta), the source stays untouched
        shutil.copy2(os.path.join(snap, "memory.sqlite"), os.path.join(tmp, "memory.sqlite"))
        try:
            source = MemoryStore(os.path.join(tmp, "memory.sqlite"))
        except (RuntimeError, ValueError) as e:  # newer schema, other similarity backend
            raise runconfig.ConfigError(f"loop.memory_from={src!r}: {e}") from None
        try:
            validated = [m.id for m in source.modes(status="validated")]
            take = [m for m in validated if parents.get(m)]
            skipped = {
                str(m): "no generation parent in this run's families "
                f"({', '.join(sorted(families))})"
                for m in validated
                if not parents.get(m)
            }
            if done is None:
                res = transfer_modes(source, memory, round=round, source=provenance, mode_ids=take)
            else:
                res = done
        finally:
            source.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return res, validated, skipped


def seed_run(svc: Any, state: Any, workdir: str, round: int = 0) -> tuple[Any, dict | None]:
    """Transfer `svc.config.loop.memory_from`'s final memory into `svc.memory` and the run state.

    Returns (the run state with the transferred modes' parents and Φ, and the record in round
    `round`'s metrics row; ``created`` False when the memory already held this transfer: a
    resumed run); (state, None) when `loop.memory_from` is empty.
    """
    cfg = svc.config
    src = str(cfg.loop.get("memory_from", "") or "")
    if not src:
        return state, None
    bad = source_problems(src, cfg.strategy)
    if os.path.realpath(src) == os.path.realpath(workdir):
        bad.append(f"loop.memory_from={src!r} is this run's own folder")
    if bad:
        raise runconfig.ConfigError("; ".join(bad))
    snap_round, snap = final_snapshot(src)  # type: ignore[misc]
    with open(os.path.join(src, "config.json")) as f:
        src_cfg = json.load(f)
    with open(os.path.join(snap, "state.json")) as f:
        src_state = RunState.from_json(f.read())
    families = set(cfg.sim.families)
    cap = int(cfg.loop.max_parents)
    parents = {
        m: [p for p in ps if p.get("task", {}).get("family") in families][:cap]
        for m, ps in src_state.mode_parents.items()
    }
    provenance = {
        "run": os.path.abspath(src),
        "round": int(snap_round),
        "strategy": src_cfg.get("strategy"),
        "policy": (src_cfg.get("policy") or {}).get("name"),
        "seed": src_cfg.get("seed"),
    }
    done = recorded_transfer(svc.memory)
    res, validated, skipped = _copy_modes(
        src, snap, svc.memory, parents, families, round, provenance, done
    )
    same_phi = get_potential(src_cfg.get("strategy")) == svc.strategy.potential.name != "none"
    new_parents, new_phi = {}, {}
    for old, new in res.mode_map.items():
        new_parents[new] = list(parents.get(old, []))
        phi = src_state.mode_potentials.get(old)
        if same_phi and phi is not None:
            new_phi[new] = phi
    state = state.with_modes(parents=new_parents, potentials=new_phi)
    n_phi = len(new_phi)
    record = {
        **res.as_dict(),
        "created": bool(done is None),
        "skipped": skipped,
        "validated_in_source": len(validated),
        "parents": sum(len(state.mode_parents[n]) for n in res.mode_map.values()),
        "loop_potentials": n_phi,
    }
    if state.history and state.history[0].get("round") == 0:
        first = {**state.history[0]}
        first.setdefault("memory_transfer", record)
        state = state.replace(history=[first, *state.history[1:]])
    return state, record


def get_potential(strategy: str | None) -> str | None:
    s = registries.STRATEGIES.get(str(strategy))
    return None if s is None else s.potential.name
