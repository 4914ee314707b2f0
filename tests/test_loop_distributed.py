"""The loop on several devices and several hosts (coda.loop.distributed).

(a) Multi-device: the smoke loop, shrunk, on 8 forced host devices with the learner data
    parallel (`loop.data_parallel="on"`: minibatches split over the 8 devices, gradients
    all-reduced) against the same loop with `"off"` (one device), in one subprocess (the XLA flag
    must be set before JAX is imported). Same decisions and metrics; learner state equal up to
    float32 reduction order (atol).
(b) Multi-host: two `launch.main` processes on 127.0.0.1 (jax.distributed, gloo CPU collectives)
    sharing one run folder that only host 0 writes; both finish the same rounds, agree at every
    round end (the loop's own digest check, `distributed.check_agreement`) and print the same
    digests of run state, learner state and memory; run as round 0, then resumed to round 1.
    Also with the VLM critic and LLM engine against the scripted server (tests/chat_server.py):
    host 0 alone calls it, the replies reach host 1.
(c) Fast checks: device checks in coda.runconfig, the digests, and the helpers across two real
    processes (broadcasts, gathers, host 0's LLM replies on host 1, a divergence caught), ~10 s.
Measured on the 2-core machine (warm compile cache, shared with other jobs): (a) 73 s (170 s
cold), (b) 159 s (196 s as one uninterrupted launch under heavier load), with LLM roles 98 s.
"""

import json
import math
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests import two_hosts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the loop shrunk below configs/coda.py:smoke: one round, few updates, small suites, no GIFs
TINY = {
    "loop.rounds": 1,
    "loop.bc_steps": 10,
    "loop.critic_updates": 10,
    "loop.policy_updates": 10,
    "eval.episodes": 4,
    "render.enabled": False,
}


# ----------------------------------------------------------------------------- (c) units


def _smoke():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "coda_cfg_dist", os.path.join(ROOT, "configs", "coda.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config("smoke")


def test_device_problems_name_the_field_and_the_device_count():
    from coda import runconfig

    cfg = _smoke()  # policy_batch 16, critic_batch 32, bucket_size 8
    assert runconfig.device_problems(cfg, 8, 8, 1) == []
    bad = runconfig.device_problems(cfg, 3, 3, 1)
    assert len(bad) == 2 and "loop.policy_batch=16" in bad[0] and "3 data-parallel" in bad[0]
    cfg.loop.data_parallel = "off"  # one device: nothing to divide
    assert runconfig.device_problems(cfg, 1, 3, 1) == []
    assert "multi-host run" in runconfig.device_problems(cfg, 2, 1, 2)[0]
    cfg.loop.data_parallel = "auto"
    assert runconfig.device_problems(cfg, 1, 1, 1) == []  # auto on one device: off
    mjx = runconfig.device_problems(cfg, 1, 3, 1, backend="mjx")
    assert mjx and "loop.bucket_size=8" in mjx[0]
    cfg.loop.data_parallel = "sometimes"
    assert any("loop.data_parallel='sometimes' is unknown" in p for p in runconfig.problems(cfg))


def test_digests_ignore_wall_times_and_see_decisions():
    from coda.loop import distributed as D
    from coda.loop.state import RunState
    from coda.memory import MemoryStore

    a = RunState(round=1, history=[{"round": 1, "seconds": 3.0, "accepted": 4}])
    b = RunState(round=1, history=[{"round": 1, "seconds": 9.5, "accepted": 4}])
    # host 0's record: wall times and LLM spend differ
    spent = b.budgets.plus(rollout_seconds=2.0, llm_tokens=1050, set_llm={"critic": {"calls": 1}})
    b = b.replace(budgets=spent)
    assert D.state_digest(a) == D.state_digest(b)
    b.history[0]["accepted"] = 5
    assert D.state_digest(a) != D.state_digest(b)
    m1, m2 = MemoryStore(":memory:"), MemoryStore(":memory:")
    assert D.memory_digest(m1) == D.memory_digest(m2)


def test_check_agreement_names_what_differs(monkeypatch):
    from coda.loop import distributed as D

    mine = {"state": "s", "learner": "l", "memory": "m"}
    assert D.check_agreement("round 1", mine) == mine  # one process agrees with itself
    other = dict(mine, learner="L")
    monkeypatch.setattr(D, "gather_json", lambda obj: [obj, other])
    with pytest.raises(D.HostsDiverged, match="round 1: hosts disagree on learner"):
        D.check_agreement("round 1", mine)


def test_batches_that_do_not_split_over_the_devices_are_one_line_and_write_nothing(tmp_path):
    """8 forced host devices, policy_batch 12: the run stops before the run folder exists."""
    workdir = tmp_path / "run"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.main",
            "--config=configs/coda.py:smoke",
            "--config.loop.policy_batch=12",
            f"--workdir={workdir}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    last = [line for line in out.stderr.splitlines() if line.strip()][-1]
    assert "loop.policy_batch=12 must be a multiple of the 8 data-parallel devices" in last
    assert not workdir.exists()


# ----------------------------------------------------------------------------- (a) devices

DEVICES_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    )
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, numpy as np
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from tests.test_loop_distributed import TINY, _smoke
    from coda.loop import driver, distributed
    assert len(jax.devices()) == 8
    out, leaves = {}, {}
    captured = {}
    real = driver.make_services
    def keep(*a, **k):
        captured["ctx"] = real(*a, **k)
        return captured["ctx"]
    driver.make_services = keep
    for mode in ("off", "on"):
        cfg = _smoke()
        for k, v in TINY.items():
            sec, name = k.split(".")
            cfg[sec][name] = v
        cfg.loop.data_parallel = mode
        summary = driver.run(cfg, os.path.join(sys.argv[3], mode))
        ctx = captured["ctx"]
        st = ctx.learner.state
        leaves[mode] = [np.asarray(x) for x in jax.tree.leaves(st)]
        from coda.loop.state import RunState
        state = RunState.from_json(open(os.path.join(sys.argv[3], mode, "checkpoints",
                                   "round_0001", "state.json")).read())
        out[mode] = {
            "mesh": 0 if ctx.mesh is None else ctx.mesh.size,
            "devices": len(jax.tree.leaves(st.policy.params)[0].sharding.device_set),
            "state": distributed._drop_timings(json.loads(state.to_json())),
        }
    diffs = [float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
             for a, b in zip(leaves["off"], leaves["on"])]
    out["max_diff"] = max(diffs)
    out["n_leaves"] = len(diffs)
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.slow
def test_loop_on_eight_host_devices_matches_one_device(tmp_path):
    """Learner data parallel over 8 forced host devices vs one device, the whole (tiny) loop:
    identical decisions and metrics, learner state within float32 reduction-order noise."""
    from tests.conftest import _CACHE

    script = tmp_path / "devices.py"
    script.write_text(DEVICES_SCRIPT)
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, str(script), _CACHE, ROOT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT ") :])
    print(f"8-device vs 1-device loop: {time.time() - t0:.0f} s, max diff {res['max_diff']:.2e}")
    assert res["off"]["mesh"] == 0 and res["off"]["devices"] == 1
    assert res["on"]["mesh"] == 8 and res["on"]["devices"] == 8
    # same decisions, counts, successes and budgets; float metrics (losses) to float32 noise
    from coda.loop.distributed import _flat

    on, off = _flat(res["on"]["state"]), _flat(res["off"]["state"])
    assert sorted(on) == sorted(off)

    def same(a, b):
        if isinstance(a, float) and isinstance(b, float):
            return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-4 + 1e-4 * abs(b)
        return a == b

    differ = {k: (on[k], off[k]) for k in off if not same(on[k], off[k])}
    assert not differ, differ
    floats = [abs(on[k] - off[k]) for k in off if isinstance(off[k], float) and on[k] == on[k]]
    print(f"largest run-state float difference {max(floats, default=0.0):.2e}")
    assert res["max_diff"] == pytest.approx(0.0, abs=1e-4), res["max_diff"]


# ----------------------------------------------------------------------------- (b) hosts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


AGREE = re.compile(r"round (\d+): 2 hosts agree: (\{.*?\})")


def _two_hosts(workdir, rounds: int, **more) -> list[str]:
    """`launch.main` as hosts 0 and 1 of one run on 127.0.0.1 (1 CPU device each); their logs.
    `more`: further config overrides."""
    from tests.conftest import _CACHE

    port = _free_port()
    fields = {**TINY, "loop.rounds": rounds, **{k.replace("__", "."): v for k, v in more.items()}}
    overrides = [f"--config.{k}={v}" for k, v in fields.items()]
    env = dict(os.environ, JAX_PLATFORMS="cpu", CODA_CACHE_DIR=_CACHE, NO_PROXY="127.0.0.1")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env.pop(k, None)  # the scripted LLM server is on 127.0.0.1
    flags = env.get("XLA_FLAGS", "").split()  # conftest's fast-compile flags; one device each
    env["XLA_FLAGS"] = " ".join(f for f in flags if "device_count" not in f)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launch.main",
                "--config=configs/coda.py:smoke",
                *overrides,
                f"--workdir={workdir}",
                f"--coordinator_address=127.0.0.1:{port}",
                "--num_processes=2",
                f"--process_id={i}",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=1500)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    both = "\n".join(f"host {j}:\n{log[-4000:]}" for j, log in enumerate(logs))
    for p in procs:  # both hosts' logs: the one that failed first may be either
        assert p.returncode == 0, both
    return logs


@pytest.mark.slow
def test_two_local_processes_finish_the_same_rounds_with_identical_state(tmp_path):
    """Two `launch.main` processes (1 CPU device each; the learner is data parallel over both,
    gradients all-reduced over gloo) on one run folder that host 0 alone writes: round 0, then
    the same command resumed to round 1. Both hosts agree at every round end (the loop checks)
    and print the same digests of run state, learner state and memory."""
    workdir = tmp_path / "run"
    t0 = time.time()
    first = _two_hosts(workdir, rounds=0)
    second = _two_hosts(workdir, rounds=1)  # resumes after round 0 on both hosts
    print(f"2-process loop, round 0 then resumed to round 1: {time.time() - t0:.0f} s")
    agreed = [dict(AGREE.findall(a + b)) for a, b in zip(first, second, strict=True)]
    assert sorted(agreed[0]) == ["0", "1"], second[0][-3000:]
    assert agreed[0] == agreed[1]  # the same rounds, the same digests on both hosts
    for log in first + second:
        assert "learner data parallel over 2 devices (2 processes)" in log
    assert "resuming after round 0" in second[0]
    assert "summary: host 1: 1 rounds done" in second[1]
    # host 0 wrote the run folder: both rounds checkpointed, metrics, report
    rows = [json.loads(x) for x in open(workdir / "metrics.jsonl")]
    assert [r["round"] for r in rows] == [0, 1]
    for r in (0, 1):
        assert (workdir / "checkpoints" / f"round_{r:04d}" / "COMPLETE").exists()
    assert (workdir / "report.md").exists() and (workdir / "memory.sqlite").exists()
    # host 0's checkpointed run state is the one both hosts agreed on at round 1
    from coda.loop import distributed as D
    from coda.loop.state import RunState

    state = RunState.from_json(open(workdir / "checkpoints" / "round_0001" / "state.json").read())
    assert json.loads(agreed[0]["1"].replace("'", '"'))["state"] == D.state_digest(state)


@pytest.mark.slow
def test_two_hosts_with_the_vlm_critic_and_llm_engine_call_the_server_from_host_0_only(tmp_path):
    """The LLM roles on two hosts: host 0 calls the scripted server and broadcasts every reply
    (`PrimaryLLM` / `ReplicaLLM`), both hosts act on it and agree at every round end; the
    server sees each call once (host 0's budgets count exactly the server's critic calls)."""
    from coda.sim.render import gl_available
    from tests.test_loop_llm import MODEL, Server, _calls

    ok, why = gl_available()
    if not ok:
        pytest.skip(f"the VLM critic renders keyframes: {why}")
    server = Server()
    workdir = tmp_path / "run"
    t0 = time.time()
    try:
        logs = _two_hosts(
            workdir,
            rounds=1,
            critic__name="vlm",
            engine__name="llm",
            llm__backend="openai_compatible",
            llm__base_url=server.url,
            llm__model=MODEL,
        )
    finally:
        server.close()
    print(f"2-process loop with LLM roles: {time.time() - t0:.0f} s")
    agreed = [dict(AGREE.findall(log)) for log in logs]
    assert sorted(agreed[0]) == ["0", "1"] and agreed[0] == agreed[1], logs[0][-3000:]
    n_critic = _calls(server, "diagnosis")
    assert n_critic >= 1
    rows = [json.loads(x) for x in open(workdir / "metrics.jsonl")]
    assert rows[-1]["budget/llm/critic/tokens"] == 1050 * n_critic  # one call each, host 0's
    import sqlite3

    with sqlite3.connect(workdir / "memory.sqlite") as db:
        assert {r[0] for r in db.execute("SELECT critic FROM diagnoses")} == {"vlm"}


HELPERS_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    sys.path.insert(0, sys.argv[3])
    from coda.loop import distributed as D
    D.initialize(f"127.0.0.1:{sys.argv[1]}", 2, int(sys.argv[2]))
    out = {"primary": D.is_primary(), "count": D.process_count()}
    out["json"] = D.broadcast_json({"host": D.process_index(), "x": [1, 2]})
    out["gather"] = D.gather_json({"host": D.process_index()})

    class Fake:  # host 0's client: its answers depend on the host, so copies would differ
        def chat(self, role, messages, **kw):
            return {"role": role, "text": "reply from host %d" % D.process_index()}
        def chat_many(self, calls):
            return [self.chat(c, []) for c in calls]
        def usage_summary(self):
            return {"by_role": {"critic": {"calls": 1}}}

    made = []
    llm = D.make_llm(lambda: made.append(1) or Fake())
    out["llm_built"] = bool(made)
    out["chat"] = llm.chat("engine", [{"role": "user", "content": "hi"}])
    out["chat_many"] = llm.chat_many(["critic", "critic"])
    out["usage"] = llm.usage_summary()
    mine = {"state": "s", "learner": "l%d" % D.process_index(), "memory": "m"}
    try:
        D.check_agreement("round 3", mine)
        out["diverged"] = None
    except D.HostsDiverged as e:
        out["diverged"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)
""")


def test_broadcasts_and_llm_replies_reach_the_other_host(tmp_path):
    """Two processes (jax.distributed over gloo): host 0's JSON / LLM replies arrive on host 1
    unchanged, host 1 builds no client, gathers are in process order, and a digest mismatch
    raises `HostsDiverged` on both hosts naming the part."""
    script = tmp_path / "helpers.py"
    script.write_text(HELPERS_SCRIPT)
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i), ROOT],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            outs.append(
                json.loads([x for x in out.splitlines() if x.startswith("RESULT ")][-1][7:])
            )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    h0, h1 = outs
    assert (h0["primary"], h1["primary"], h0["count"]) == (True, False, 2)
    assert h0["json"] == h1["json"] == {"host": 0, "x": [1, 2]}
    assert h0["gather"] == h1["gather"] == [{"host": 0}, {"host": 1}]
    assert (h0["llm_built"], h1["llm_built"]) == (True, False)
    assert h0["chat"] == h1["chat"] == {"role": "engine", "text": "reply from host 0"}
    assert h0["chat_many"] == h1["chat_many"] == [h0["chat"] | {"role": "critic"}] * 2
    assert h1["usage"] == {"by_role": {}}  # host 0 counts the spend
    for h in outs:
        assert h["diverged"].startswith("round 3: hosts disagree on learner")


def test_validation_rollouts_split_over_hosts_match_one_host(native_backend):
    """`collect.success_of(..., split=(i, 2, gather))` (the control experiment's rollouts): two
    hosts each roll out every other bucket and both return the one-host successes and env
    steps. Simulated in one process: each host's share is captured, then both run again with
    the gathered shares."""
    import jax
    import numpy as np

    from coda.loop import collect
    from coda.sim.compile import compile_scene
    from coda.sim.planner import planner_for
    from coda.sim.sdk import exec_program

    prog = (
        'add_object("cube", role="target", instance="cube_red")\n'
        'add_object("plate", role="goal", instance="plate_blue")\n'
        'set_task("pick_place", target="target", goal="goal")\nsample_layout()\n'
    )
    variants = [compile_scene(exec_program(prog, seed=s, isolation="inprocess")) for s in range(5)]

    def planner(bucket):
        return planner_for(bucket), None

    key = jax.random.key(5)
    one, steps = collect.success_of(native_backend, variants, planner, key, 14, 2)
    assert one.sum() > 0 and steps > 0  # 3 buckets (2, 2, 1 variants)

    shares = two_hosts.shares(
        lambda split: collect.success_of(native_backend, variants, planner, key, 14, 2, split)
    )
    assert [len(s) for s in shares] == [2, 1]  # buckets 0, 2 on host 0; bucket 1 on host 1
    for h in (0, 1):
        got, st = collect.success_of(
            native_backend, variants, planner, key, 14, 2, (h, 2, lambda v: list(shares))
        )
        np.testing.assert_array_equal(got, one)
        assert st == steps
    with pytest.raises(RuntimeError, match="hosts rolled out 3 of 5"):
        collect.success_of(native_backend, variants, planner, key, 14, 2, (0, 2, lambda v: [v, []]))


def test_training_rollouts_split_over_hosts_match_one_host(native_backend):
    """`collect.rollouts_of(..., split=(i, 2, gather))` (the round's training rollouts): two
    hosts each roll out every other bucket N times, the pickled results are all-gathered, and
    both hosts hold the one-host results (as numpy) for every bucket and repeat, in order."""
    import pickle

    import jax
    import numpy as np

    from coda.loop import collect
    from coda.sim.compile import compile_scene
    from coda.sim.planner import Perturbed, planner_for
    from coda.sim.sdk import exec_program

    prog = (
        'add_object("cube", role="target", instance="cube_red")\n'
        'add_object("plate", role="goal", instance="plate_blue")\n'
        'set_task("pick_place", target="target", goal="goal")\nsample_layout()\n'
    )
    variants = [compile_scene(exec_program(prog, seed=s, isolation="inprocess")) for s in range(5)]
    buckets = collect.buckets_of(variants, 2)  # 3 buckets (2, 2, 1 variants)

    def noisy(bucket):  # keys matter: a noisy planner differs per repeat
        return Perturbed(planner_for(bucket), sigma=0.3), None

    key = jax.random.key(7)
    one = collect.rollouts_of(native_backend, buckets, noisy, key, 6, 2)
    assert [len(r) for r in one] == [2, 2, 2]
    a0, a1 = (np.asarray(one[0][n][0].actions) for n in (0, 1))
    assert not np.allclose(a0, a1, atol=1e-6)  # the two repeats have their own keys

    shares = two_hosts.shares(
        lambda split: collect.rollouts_of(native_backend, buckets, noisy, key, 6, 2, split),
        wire=lambda v: pickle.loads(pickle.dumps(v)),  # what travels between hosts
    )
    assert [[i for i, _ in s] for s in shares] == [[0, 2], [1]]
    for h in (0, 1):
        got = collect.rollouts_of(
            native_backend, buckets, noisy, key, 6, 2, (h, 2, lambda v: list(shares))
        )
        for b in range(3):
            for n in range(2):
                res, ref = got[b][n][0], one[b][n][0]
                assert isinstance(res.actions, np.ndarray)
                np.testing.assert_allclose(res.actions, np.asarray(ref.actions), atol=1e-6)
                np.testing.assert_array_equal(res.success, np.asarray(ref.success))
                assert res.env_steps == ref.env_steps
    with pytest.raises(RuntimeError, match="hosts rolled out buckets"):
        collect.rollouts_of(native_backend, buckets, noisy, key, 6, 2, (0, 2, lambda v: [v, []]))
