"""Multi-device and multi-host runs of the loop: the thin layer between `coda.loop.run` and JAX.

Multi-device (one process): the learner's minibatches are split over every device
(`coda.train.multistep.data_mesh`, `loop.data_parallel`), MJX rollouts shard each bucket over
the local devices (`coda.sim.rollout.MjxBackend`).

Multi-host (`launch.main --num_processes=P --process_id=i --coordinator_address=host:port`,
`jax.distributed.initialize`; CPU collectives over gloo): every host runs the same loop on the
same keys, so the host-side steps (seeding, allocation, generation, critique, validation, Φ,
routing, the stop rule) are replicated, deterministic computations over identical inputs. The
learner is one data-parallel program over the global device mesh (gradients all-reduced across
hosts), so its state is one replicated array per leaf. What would make hosts differ is kept on
host 0 and broadcast:

- side effects: only host 0 writes the run folder (memory.sqlite, checkpoints' host files,
  metrics, TensorBoard, failures, report); other hosts keep their memory replica in RAM. The
  orbax learner save is collective (every host calls it; orbax writes each replicated array
  once), so the run folder must be one path every host sees (a shared file system);
- LLM calls (VLM critic, LLM engine): host 0 calls the backend, every reply is broadcast
  (`PrimaryLLM` / `ReplicaLLM`), so all hosts act on the same answer;
- the run state: at every round end host 0's `RunState` is broadcast and adopted (its wall
  times are the record), after the hosts checked that their own states, memory contents and
  learner parameters agree (`check_agreement`: a digest per host, gathered; a mismatch stops
  the run with a clear error instead of letting the hosts drift apart).

Why replicate instead of broadcasting every decision: the host-side steps exchange scenes,
diagnoses, programs and memory records; replaying them deterministically on every host keeps
this layer a few broadcasts wide, and the round-end digests make a divergence loud.
Split across hosts: the learner's work, the evaluation suites' rollouts, the control
experiment's rollouts (each host rolls out every count-th bucket, the successes are
all-gathered: `host_split`, `coda.eval.split_map`) and the round's training rollouts (each
host rolls out its buckets, the results are all-gathered pickled, `gather_object`, and every
host feeds all of them to its replica of the replay and memory in bucket order). Limits: the
critic's probes, the BC-demo and Φ-refinement rollouts and the host-side steps are
replicated, not split; the run folder must be shared. Single-process runs never touch any
collective: every helper here is the identity there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np

from coda import runconfig

# launch-environment variables the launch flags default from (not config fields)
ENV_COORDINATOR = "CODA_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "CODA_NUM_PROCESSES"
ENV_PROCESS_ID = "CODA_PROCESS_ID"

log = logging.getLogger(__name__)


class HostsDiverged(RuntimeError):
    """Hosts of one multi-host run computed different states (a bug or a non-deterministic op)."""


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """`jax.distributed.initialize` (before any JAX computation), CPU collectives over gloo.

    `num_processes` <= 1: single process, nothing to do. Errors name the flag to fix.
    """
    if num_processes <= 1:
        return
    if not coordinator_address:
        raise ValueError("--num_processes > 1 needs --coordinator_address=host:port (host 0's)")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"--process_id={process_id} must be in [0, {num_processes})")
    import jax

    # gloo is jax 0.9's default for CPU collectives; set it explicitly so a changed default
    # cannot silently make a CPU multi-host run fail at its first collective
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=int(num_processes),
        process_id=int(process_id),
    )


def process_count() -> int:
    import jax

    return jax.process_count()


def process_index() -> int:
    import jax

    return jax.process_index()


def is_primary() -> bool:
    """Host 0: the one that writes the run folder and calls LLM backends."""
    return process_index() == 0


def barrier(name: str) -> None:
    """All hosts wait here (e.g. until host 0 has written a file the others read)."""
    if process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


# ----------------------------------------------------------------------------- broadcasts


def broadcast_bytes(data: bytes | None) -> bytes:
    """Host 0's `data` on every host (others pass None). Two collectives: length, then bytes."""
    if process_count() == 1:
        assert data is not None
        return data
    from jax.experimental import multihost_utils

    primary = is_primary()
    if primary and data is None:
        raise ValueError("host 0 must pass the bytes to broadcast")
    n = np.array([len(data) if primary else 0], np.int32)
    n = int(np.asarray(multihost_utils.broadcast_one_to_all(n))[0])
    buf = np.zeros(_padded(n), np.uint8)
    if primary:
        buf[:n] = np.frombuffer(data, np.uint8)
    out = np.asarray(multihost_utils.broadcast_one_to_all(buf))
    return out[:n].astype(np.uint8).tobytes()


def _padded(n: int) -> int:
    """Buffers go out padded to a power of two: each shape compiles its collective once."""
    return max(64, 1 << max(n - 1, 0).bit_length())


def broadcast_json(obj: Any) -> Any:
    """Host 0's JSON-able `obj` on every host (what the others pass is ignored)."""
    data = json.dumps(obj, sort_keys=True).encode() if is_primary() else None
    return json.loads(broadcast_bytes(data).decode())


def broadcast_object(obj: Any) -> Any:
    """Host 0's picklable `obj` on every host (hosts of one run trust each other)."""
    data = pickle.dumps(obj) if is_primary() else None
    return pickle.loads(broadcast_bytes(data))


def host_split(objects: bool = False) -> tuple[int, int, Any] | None:
    """(this host, hosts, `gather_json`): the `split` of `coda.eval.split_map` (evaluation and
    control-experiment rollouts), with `objects` `gather_object` (the training rollouts'
    results); None in a single-process run."""
    if process_count() == 1:
        return None
    return process_index(), process_count(), gather_object if objects else gather_json


def gather_object(obj: Any) -> list[Any]:
    """Every host's picklable `obj`, in process order, on every host (hosts of one run trust
    each other; `gather_json` for what JSON can carry)."""
    if process_count() == 1:
        return [obj]
    return [pickle.loads(b) for b in _gather_bytes(pickle.dumps(obj))]


def _gather_bytes(data: bytes) -> list[bytes]:
    from jax.experimental import multihost_utils

    buf = np.frombuffer(data, np.uint8)
    n = np.asarray(multihost_utils.process_allgather(np.array([buf.size], np.int32)))
    pad = np.zeros(_padded(int(n.max())), np.uint8)
    pad[: buf.size] = buf
    rows = np.asarray(multihost_utils.process_allgather(pad))
    return [rows[i, : int(n[i, 0])].tobytes() for i in range(rows.shape[0])]


def gather_json(obj: Any) -> list[Any]:
    """Every host's JSON-able `obj`, in process order, on every host."""
    if process_count() == 1:
        return [obj]
    return [json.loads(b.decode()) for b in _gather_bytes(json.dumps(obj, sort_keys=True).encode())]


# ----------------------------------------------------------------------------- devices


def learner_mesh(mode: str) -> Any:
    """The learner's data mesh for `loop.data_parallel`: "on" = all devices, "off" = none (one
    device), "auto" = all devices when there is more than one. Batch sizes are checked against
    the device count by `check_devices`."""
    import jax

    from coda.train.multistep import data_mesh  # lazy: launch.main imports this before JAX

    if mode not in runconfig.DATA_PARALLEL:
        valid = runconfig.DATA_PARALLEL
        raise ValueError(f"loop.data_parallel={mode!r} is unknown (valid: {valid})")
    if mode == "off" or (mode == "auto" and len(jax.devices()) == 1):
        return None
    mesh = data_mesh()
    log.info("learner data parallel over %d devices (%d processes)", mesh.size, jax.process_count())
    return mesh


def check_devices(config: Any) -> None:
    """`coda.runconfig.ConfigError` when the config does not fit this device layout (batch
    sizes vs the data-parallel device count, MJX buckets vs a host's devices)."""
    import jax

    from coda.sim.rollout import has_accelerator  # lazy: launch.main imports this before JAX

    backend = str(config.sim.backend)
    if backend == "auto":
        backend = "mjx" if has_accelerator() else "native"
    dp = str(config.loop.get("data_parallel", "auto"))
    n = len(jax.devices()) if dp != "off" else 1
    bad = runconfig.device_problems(
        config, n, len(jax.local_devices()), jax.process_count(), backend
    )
    if bad:
        raise runconfig.ConfigError("invalid config for this device layout: " + "; ".join(bad))


def acting_devices(backend: Any) -> tuple[Any, ...]:
    """Where a backend's rollouts run the policy: MJX's (local) devices when it shards, else
    this host's first device (the native backend steps one policy batch per chunk)."""
    import jax

    if getattr(backend, "shard", False):
        return tuple(backend.devices)
    return (jax.local_devices()[0],)


def place(tree: Any, devices: Sequence[Any]) -> Any:
    """Every array of `tree` replicated over `devices` (copied only when it lives elsewhere:
    the learner's data-parallel mesh, or other hosts too). A replicated array that spans
    hosts is read from this host's copy. () = unchanged."""
    import jax

    if not devices:
        return tree
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    target = NamedSharding(Mesh(np.asarray(devices), ("acting",)), PartitionSpec())
    want = set(devices)

    def one(x: Any) -> Any:
        if not isinstance(x, jax.Array) or x.sharding.device_set == want:
            return x
        if not x.is_fully_replicated:
            raise ValueError(f"cannot place a sharded array {x.shape} ({x.sharding})")
        return jax.device_put(x if x.is_fully_addressable else x.addressable_data(0), target)

    return jax.tree.map(one, tree)


# ----------------------------------------------------------------------------- LLM calls


class PrimaryLLM:
    """Host 0's LLM client: calls the backend, then broadcasts each reply to the other hosts.

    The loop calls the client from its main thread in the same order on every host (the VLM
    critic: one `chat_many` per round; the LLM engine: `chat` per attempt), so the broadcasts
    pair up. Everything else (ledger, usage, records) is the wrapped client's.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return broadcast_object(self.client.chat(*args, **kwargs))

    def chat_many(self, *args: Any, **kwargs: Any) -> Any:
        return broadcast_object(self.client.chat_many(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class ReplicaLLM:
    """Another host's LLM client: receives host 0's replies, calls nothing, records nothing
    (no client is built there, so nothing is written to the run folder). Usage is host 0's to
    count: its run state, with the budgets, is adopted at every round end."""

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return broadcast_object(None)

    def chat_many(self, *args: Any, **kwargs: Any) -> Any:
        return broadcast_object(None)

    def usage_summary(self) -> dict[str, Any]:
        return {"by_role": {}}

    def save_usage(self) -> None:
        return None


def make_llm(make: Any) -> Any:
    """The LLM client this host uses: `make()` in a single process, host 0's `make()` wrapped to
    broadcast its replies, or a `ReplicaLLM` (`make` not called) on the other hosts."""
    if process_count() == 1:
        return make()
    return PrimaryLLM(make()) if is_primary() else ReplicaLLM()


# ----------------------------------------------------------------------------- agreement

# RunState / Budgets fields that are host 0's record, not decisions, so digests leave them out
# (host 0's values are adopted): wall-clock measurements ("seconds", "critic_seconds",
# "rollout_seconds", "latency_s", ...) differ between hosts; LLM spend ("llm" per role,
# "llm_tokens", "llm_usd") is counted by host 0's client alone (the others call nothing)
TIMING_SUFFIXES = ("seconds", "latency_s")
HOST0_RECORD = frozenset({"llm", "llm_tokens", "llm_usd"})


def _drop_timings(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: _drop_timings(v)
            for k, v in obj.items()
            if not str(k).endswith(TIMING_SUFFIXES) and k not in HOST0_RECORD
        }
    if isinstance(obj, list):
        return [_drop_timings(v) for v in obj]
    return obj


def state_digest(state: Any) -> str:
    """sha256 of a `RunState` without its host-0 record fields (wall times, LLM spend)."""
    d = _drop_timings(json.loads(state.to_json()))
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def tree_digest(tree: Any) -> str:
    """sha256 over the bytes of every leaf (this host's copy of replicated arrays)."""
    import jax

    h = hashlib.sha256()
    for x in jax.tree.leaves(tree):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            x = x.addressable_data(0)
        a = np.asarray(x)
        h.update(str((a.shape, a.dtype)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def memory_digest(memory: Any) -> str:
    """sha256 of every memory table's rows, timestamp columns (``*_at``) left out."""
    conn = memory._conn  # the store's live connection (also for ":memory:")
    h = hashlib.sha256()
    with memory._lock:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
            ).fetchall()
        ]
        for t in tables:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({t})").fetchall()]
            keep = [c for c in cols if not c.endswith("_at")]
            if not keep:
                continue
            sel = ", ".join(f'"{c}"' for c in keep)
            q = f'SELECT {sel} FROM "{t}"'
            try:
                rows = [tuple(r) for r in conn.execute(q + " ORDER BY rowid")]
            except sqlite3.OperationalError:  # WITHOUT ROWID tables
                rows = sorted((tuple(r) for r in conn.execute(q)), key=repr)
            h.update(t.encode())
            h.update(repr(rows).encode())
    return h.hexdigest()[:16]


def digests(state: Any, learner_state: Any, memory: Any) -> dict[str, str]:
    """This host's digests of what the hosts must agree on after a round."""
    return {
        "state": state_digest(state),
        "learner": tree_digest(learner_state),
        "memory": memory_digest(memory),
    }


def _flat(obj: Any, where: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{where}.{k}" if where else str(k)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flat(v, f"{where}[{i}]"))
        return out
    return {where: obj}


def check_agreement(what: str, mine: dict[str, str], state: Any = None) -> dict[str, str]:
    """Gathers every host's digests; `HostsDiverged` naming the parts that differ (and, given
    the `RunState`, the first fields of it that differ), else returns them (identical on every
    host). One collective when the hosts agree; identity in a single process."""
    every = gather_json(mine)
    bad = sorted(k for k in mine if len({d.get(k) for d in every}) > 1)
    if bad:
        rows = "; ".join(f"host {i}: {d}" for i, d in enumerate(every))
        detail = ""
        if "state" in bad and state is not None:  # every host takes this branch: collective
            flats = gather_json(_flat(_drop_timings(json.loads(state.to_json()))))
            keys = sorted(set().union(*flats))
            diff = [k for k in keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
            detail = "; run state fields that differ: " + ", ".join(
                f"{k} = {[f.get(k) for f in flats]}" for k in diff[:8]
            )
        raise HostsDiverged(f"{what}: hosts disagree on {', '.join(bad)} ({rows}){detail}")
    return mine


def adopt_primary_state(state: Any) -> Any:
    """Host 0's `RunState` on every host (its wall times and LLM spend included): one
    broadcast."""
    if process_count() == 1:
        return state
    text = broadcast_bytes(state.to_json().encode() if is_primary() else None).decode()
    return type(state).from_json(text, demos=state.demos)


def env_default(name: str, fallback: Any) -> Any:
    """A launch flag's default from the environment (typed like `fallback`)."""
    v = os.environ.get(name)
    if v is None or v == "":
        return fallback
    return type(fallback)(v)
