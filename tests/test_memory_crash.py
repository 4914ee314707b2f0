"""Crash safety: a writer killed with SIGKILL mid-batch loses only its uncommitted batch."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from coda.memory import open_memory

BATCH = 20

WRITER = textwrap.dedent(
    f"""
    import sys, time
    from coda.memory import open_memory

    m = open_memory(sys.argv[1])
    total = 0
    while True:
        with m.batch():
            for i in range({BATCH}):
                k = total + i
                sid = m.add_scene_program(f"prog-{{k}}", round=k // 100, meta={{"k": k}})
                if i % 5 == 0:
                    m.add_diagnosis(round=0, factor="execution", phase="grasp",
                                    cause=f"gripper slips on object {{k % 7}}",
                                    scene_program_id=sid)
                time.sleep(0.002)  # keep the batch open long enough to be killed inside it
        total += {BATCH}
        print(f"committed {{total}}", flush=True)
    """
)


def test_sigkill_mid_batch_keeps_every_committed_record(tmp_path):
    db = tmp_path / "memory.db"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    committed = 0
    try:
        deadline = time.monotonic() + 60
        while committed < 5 * BATCH:
            line = proc.stdout.readline()
            assert line, f"writer exited early with {proc.poll()}"
            committed = int(line.split()[1])
            assert time.monotonic() < deadline
        time.sleep(0.015)  # inside the next batch (one batch takes >= 40 ms)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL

    # The WAL holds the committed work; a raw connection sees a sound database.
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    sources = {r[0] for r in conn.execute("SELECT source FROM scene_programs")}
    n = len(sources)
    conn.close()
    # Every record committed before the kill is there, and no partial batch is visible.
    assert {f"prog-{k}" for k in range(committed)} <= sources
    assert n % BATCH == 0 and n in (committed, committed + BATCH)

    m = open_memory(db)
    assert m.integrity_check() == "ok"
    c = m.counts()
    assert c["diagnoses"] == c["mode_members"] == n // 5
    assert sum(mode.n_diagnoses for mode in m.modes()) == n // 5
    assert m.similarity.n_docs == n // 5  # corpus statistics consistent with the data
    # The store keeps working after recovery.
    m.add_scene_program("after-crash", round=99)
    assert m.counts()["scene_programs"] == n + 1
    m.close()
