"""Shared memory: tiers, append-only episodic store, online mode clustering, retrieval, I/O."""

from __future__ import annotations

import re
import sqlite3
import threading

import numpy as np
import pytest

from coda.memory import (
    MEMORY_MODES,
    SCHEMA_VERSION,
    EmbeddingSimilarity,
    MemoryImportError,
    MemoryStore,
    get_similarity,
    open_memory,
    role_signature,
)
from coda.memory.schema import EPISODIC_TABLES

GRASP_A = "the gripper closes before reaching the mug handle"
GRASP_B = "gripper closes too early, before it reaches the handle of the mug"
OCCLUDED = "the bowl is occluded by the shelf so the target is not visible"


@pytest.fixture
def mem(tmp_path):
    m = open_memory(tmp_path / "memory.db")
    yield m
    m.close()


def _populate(m: MemoryStore) -> dict:
    sp = m.add_scene_program("set_task('put mug in bowl')", round=0, meta={"family": "pick"})
    child = m.add_scene_program("set_layout(...)", round=1, parent_id=sp, factor="spatial")
    m.add_verifier("def nu(s): return inside(s, 'mug', 'bowl')", round=0, scene_program_id=sp)
    m.add_generation_trace(
        round=0,
        scene_program_id=sp,
        violated=["penetration: mug/bowl"],
        repair_steps=["raised mug by 2 cm"],
        outcome="verified",
    )
    dep = m.add_deployment(
        round=0, scene_program_id=sp, n_rollouts=8, n_success=2, learning_progress=0.1
    )
    a = m.add_diagnosis(
        round=0,
        factor="execution",
        phase="grasp",
        cause=GRASP_A,
        evidence={"rollouts": [1, 4], "frames": [10, 20]},
        critic="vlm",
        model="gpt-5.5",
        scene_program_id=sp,
        deployment_id=dep,
    )
    gp = m.add_generation_program(
        round=1,
        mode_id=a.mode_id,
        parent_scene_program_id=sp,
        factor="spatial",
        variants=[{"source": "set_layout(a)"}, {"source": "set_layout(b)"}],
        compile_checks=[{"ok": True}],
        roles={"roles": {"target": "mug", "receptacle": "bowl"}, "relations": [["inside", 0, 1]]},
    )
    tp = m.add_training_program(
        round=1,
        mode_id=a.mode_id,
        phase="grasp",
        subgoals=["reach handle", "close gripper"],
        potential_source="def potential(s):\n    return 0.0\n",
        tools={"reach handle": "shaping", "close gripper": "bc"},
        roles=["target", "receptacle"],
    )
    return {"sp": sp, "child": child, "dep": dep, "a": a, "gp": gp, "tp": tp}


def test_schema_version_wal_and_tables(mem, tmp_path):
    assert mem.schema_version() == SCHEMA_VERSION
    conn = sqlite3.connect(tmp_path / "memory.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"scene_programs", "diagnoses", "modes", "training_programs"} <= names
    conn.close()


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "future.db"
    conn = sqlite3.connect(p)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="schema version"):
        open_memory(p)


@pytest.mark.parametrize("table", EPISODIC_TABLES)
def test_episodic_tier_is_append_only(mem, tmp_path, table):
    _populate(mem)
    conn = sqlite3.connect(tmp_path / "memory.db")
    (n,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    assert n >= 1
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(f"UPDATE {table} SET round = 99")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(f"DELETE FROM {table}")
    assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == n
    conn.close()


def test_clustering_by_factor_phase_and_cause(mem):
    a = mem.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_A)
    assert a.created
    preview_id, score = mem.nearest_mode(factor="execution", phase="grasp", cause=GRASP_B)
    assert preview_id == a.mode_id and score > mem.threshold
    assert mem.get_mode(a.mode_id).n_diagnoses == 1  # preview wrote nothing
    b = mem.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_B)
    assert (b.mode_id, b.created) == (a.mode_id, False)
    c = mem.add_diagnosis(round=0, factor="execution", phase="grasp", cause=OCCLUDED)
    assert c.created and c.mode_id != a.mode_id
    d = mem.add_diagnosis(round=0, factor="spatial", phase="grasp", cause=GRASP_A)
    assert d.created  # same cause, different factor: never merged
    e = mem.add_diagnosis(round=0, factor="execution", phase="transport", cause=GRASP_A)
    assert e.created  # different phase: never merged
    m = mem.get_mode(a.mode_id)
    assert (m.factor, m.phase, m.n_diagnoses, m.status) == ("execution", "grasp", 2, "candidate")
    diags = mem.diagnoses_for_mode(a.mode_id)
    assert [x.cause for x in diags] == [GRASP_B, GRASP_A]
    assert mem.mode_of_diagnosis(b.diagnosis_id) == a.mode_id
    assert len(mem.modes(factor="execution", phase="grasp")) == 2


def test_retired_modes_do_not_absorb_new_diagnoses(mem):
    a = mem.add_diagnosis(round=0, factor="task", phase="approach", cause=GRASP_A)
    mem.set_mode_status(a.mode_id, "retired", round=1, reason="solved")
    b = mem.add_diagnosis(round=1, factor="task", phase="approach", cause=GRASP_A)
    assert b.created and b.mode_id != a.mode_id


def test_hardness_importance_and_status(mem):
    a = mem.add_diagnosis(round=0, factor="attribute", phase="lift", cause="mug too heavy to lift")
    m = mem.record_mode_outcome(a.mode_id, round=1, n_success=2, n_trials=8)
    assert m.hardness == pytest.approx(0.25, abs=1e-9)
    m = mem.record_mode_outcome(a.mode_id, round=1, n_success=4, n_trials=8)
    assert m.hardness == pytest.approx(6 / 16, abs=1e-9)  # same round accumulates
    m = mem.record_mode_outcome(a.mode_id, round=2, n_success=6, n_trials=8)
    assert (
        m.hardness == pytest.approx(0.75, abs=1e-9) and m.hardness_round == 2
    )  # new round replaces
    assert (m.n_trials, m.n_successes) == (24, 12)  # lifetime counts
    m = mem.record_learning_progress(a.mode_id, round=2, before=0.25, after=0.75)
    assert m.importance == pytest.approx(0.5, abs=1e-9) and m.last_progress == pytest.approx(
        0.5, abs=1e-9
    )
    m = mem.record_learning_progress(a.mode_id, round=3, before=0.75, after=0.75)
    assert m.importance == pytest.approx(0.7 * 0.5, abs=1e-9)  # EMA with rate 0.3
    assert mem.set_mode_status(a.mode_id, "validated", round=3).status == "validated"
    with pytest.raises(ValueError, match="cannot go from 'validated' to 'refuted'"):
        mem.set_mode_status(a.mode_id, "refuted", round=3)
    with pytest.raises(ValueError, match="valid"):
        mem.set_mode_status(a.mode_id, "great", round=3)
    assert [x.id for x in mem.modes(status="validated")] == [a.mode_id]
    kinds = [
        r[0]
        for r in mem._conn.execute(
            "SELECT kind FROM mode_events WHERE mode_id=? ORDER BY id", (a.mode_id,)
        )
    ]
    assert kinds == ["created", "outcome", "outcome", "outcome", "progress", "progress", "status"]


def test_bad_inputs_have_clear_errors(mem):
    with pytest.raises(ValueError, match="valid"):
        mem.add_diagnosis(round=0, factor="lighting", phase="grasp", cause="dark")
    with pytest.raises(ValueError, match="n_success"):
        mem.add_deployment(round=0, scene_program_id=None, n_rollouts=4, n_success=5)
    with pytest.raises(ValueError, match="valid"):
        open_memory(":memory:", mode="bogus")
    with pytest.raises(ValueError, match="valid"):
        get_similarity("bert")
    with pytest.raises(KeyError):
        mem.get_mode(12345)
    assert set(MEMORY_MODES) == {"full", "single_store", "none"}


def test_procedural_retrieval_by_mode_factor_phase_and_roles(mem):
    ids = _populate(mem)
    mode_id = ids["a"].mode_id
    other = mem.add_diagnosis(round=1, factor="spatial", phase="place", cause=OCCLUDED)
    mem.add_generation_program(
        round=1,
        mode_id=other.mode_id,
        parent_scene_program_id=ids["sp"],
        factor="spatial",
        variants=[],
        compile_checks=[],
        roles={"drawer": "d1"},
    )
    (g,) = mem.generation_programs(mode_id=mode_id)
    assert g.id == ids["gp"] and g.role_signature == "receptacle,target"
    assert g.roles["relations"] == [["inside", 0, 1]] and len(g.variants) == 2
    assert [x.id for x in mem.generation_programs(factor="execution", phase="grasp")] == [g.id]
    assert len(mem.generation_programs(role_signature="receptacle,target")) == 1
    assert len(mem.generation_programs(role_signature="drawer")) == 1
    assert len(mem.generation_programs()) == 2
    (t,) = mem.training_programs(role_signature=role_signature({"target": 1, "receptacle": 2}))
    assert t.tools["close gripper"] == "bc" and t.improved is None
    t = mem.record_training_evidence(t.id, round=2, before=0.2, after=0.5, mode_id=mode_id)
    assert t.improved is True and t.evidence[0]["after"] == 0.5
    assert mem.training_programs(mode_id=mode_id)[0].improved is True
    sp = mem.get_scene_program(ids["child"])
    assert sp.parent_id == ids["sp"] and sp.factor == "spatial"


def test_export_import_roundtrip_remaps_ids(mem, tmp_path):
    _populate(mem)
    mem.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_B)
    out = tmp_path / "mem.jsonl"
    n = mem.export_jsonl(out)
    assert n == sum(mem.counts().values())
    dst = open_memory(tmp_path / "other.db")
    dst.add_scene_program("pre-existing", round=0)  # ids collide with the export on purpose
    dst.import_jsonl(out)
    dst.import_jsonl(out)  # twice: everything doubles, nothing collides
    c_src, c_dst = mem.counts(), dst.counts()
    assert c_dst["scene_programs"] == 2 * c_src["scene_programs"] + 1
    assert c_dst["modes"] == 2 * c_src["modes"]
    assert c_dst["mode_members"] == 2 * c_src["mode_members"]
    assert dst.integrity_check() == "ok"
    # Foreign keys follow the remap: children point at the imported parents.
    mode_ids = [m.id for m in dst.modes()]
    for mid in mode_ids:
        for d in dst.diagnoses_for_mode(mid):
            assert d.factor == dst.get_mode(mid).factor
        for g in dst.generation_programs(mode_id=mid):
            parent = dst.get_scene_program(g.parent_scene_program_id)
            assert parent.source == "set_task('put mug in bowl')"
    # Clustering continues on imported modes: a similar diagnosis joins one of them.
    a = dst.add_diagnosis(round=5, factor="execution", phase="grasp", cause=GRASP_A)
    assert not a.created and a.mode_id in mode_ids
    # Corpus statistics were merged.
    assert int(dst._meta_get(dst._conn, "n_docs")) == 2 * 2 + 1
    dst.close()


def test_import_rejects_garbage_atomically(mem, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match="not a CoDA memory export"):
        mem.import_jsonl(bad)
    _populate(mem)
    good = tmp_path / "good.jsonl"
    mem.export_jsonl(good)
    lines = good.read_text().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:5] + ["{not json"] + lines[5:]) + "\n")
    before = mem.counts()
    with pytest.raises(ValueError, match="malformed"):
        mem.import_jsonl(broken)
    assert mem.counts() == before


def test_reopen_restores_corpus_statistics(tmp_path):
    p = tmp_path / "m.db"
    m = open_memory(p)
    a = m.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_A)
    m.add_diagnosis(round=0, factor="execution", phase="grasp", cause=OCCLUDED)
    before = m.nearest_mode(factor="execution", phase="grasp", cause=GRASP_B)
    m.close()
    m2 = open_memory(p)
    after = m2.nearest_mode(factor="execution", phase="grasp", cause=GRASP_B)
    assert after[0] == before[0] == a.mode_id
    assert after[1] == pytest.approx(before[1], abs=1e-9)
    m2.close()


def test_batch_rolls_back_on_error(mem):
    n_docs = mem.similarity.n_docs
    with pytest.raises(RuntimeError, match="boom"):
        with mem.batch():
            mem.add_scene_program("x", round=0)
            mem.add_diagnosis(round=0, factor="task", phase="grasp", cause=GRASP_A)
            raise RuntimeError("boom")
    assert mem.counts()["scene_programs"] == 0 and mem.counts()["modes"] == 0
    assert mem.similarity.n_docs == n_docs


def test_concurrent_writers_from_threads(mem):
    def work(k: int) -> None:
        for i in range(10):
            mem.add_diagnosis(round=0, factor="task", phase=f"p{k % 2}", cause=f"{GRASP_A} {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = mem.counts()
    assert c["diagnoses"] == 40 and c["mode_members"] == 40
    assert sum(m.n_diagnoses for m in mem.modes()) == 40


def test_single_store_ablation_is_undivided(tmp_path):
    m = open_memory(tmp_path / "s.db", mode="single_store")
    ids = _populate(m)
    b = m.add_diagnosis(round=0, factor="spatial", phase="place", cause=OCCLUDED)
    assert b.mode_id == ids["a"].mode_id and len(m.modes()) == 1
    assert len(m.modes(factor="task")) == 1  # keys do not partition
    assert len(m.generation_programs(mode_id=999, role_signature="nothing")) == 1
    assert len(m.scene_programs_for_mode(999)) == 2
    m.close()


def test_none_ablation_forgets_across_rounds():
    m = open_memory("ignored.db", mode="none")
    m.begin_round(0)
    a = m.add_diagnosis(round=0, factor="task", phase="grasp", cause=GRASP_A)
    b = m.add_diagnosis(round=0, factor="task", phase="grasp", cause=GRASP_B)
    assert a.mode_id == b.mode_id  # works within a round
    m.begin_round(1)
    assert all(n == 0 for t, n in m.counts().items() if t != "meta")
    assert m.similarity.n_docs == 0
    assert m.nearest_mode(factor="task", phase="grasp", cause=GRASP_A) == (None, 0.0)
    m.close()


def _bag_of_words_embed(texts):
    vocab = ["gripper", "handle", "mug", "bowl", "occluded", "shelf", "closes", "visible"]
    return np.array([[t.count(w) for w in vocab] for t in texts], np.float32)  # [N, 8]


def test_embedding_backend_behind_same_interface(tmp_path):
    m = open_memory(tmp_path / "e.db", similarity=EmbeddingSimilarity(_bag_of_words_embed))
    a = m.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_A)
    b = m.add_diagnosis(round=0, factor="execution", phase="grasp", cause=GRASP_B)
    c = m.add_diagnosis(round=0, factor="execution", phase="grasp", cause=OCCLUDED)
    assert b.mode_id == a.mode_id and c.mode_id != a.mode_id
    m.close()
    with pytest.raises(ValueError, match="similarity"):
        open_memory(tmp_path / "e.db")  # default tfidf cannot read embedding states


# ------------------------------------------------------------------ append-only, every statement
def _statements(conn: sqlite3.Connection, table: str) -> dict[str, tuple[str, tuple]]:
    """Every SQL form that could change an existing episodic row, aimed at the first row."""
    row = conn.execute(f"SELECT * FROM {table} ORDER BY id LIMIT 1").fetchone()
    cols = [d[0] for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
    vals = list(row)
    vals[cols.index("round")] = 99  # same id, rewritten content
    c, q = ", ".join(cols), ", ".join("?" for _ in cols)
    return {
        "update": (f"UPDATE {table} SET round = 99", ()),
        "update_or_replace": (f"UPDATE OR REPLACE {table} SET round = 99 WHERE id = ?", (row[0],)),
        "delete": (f"DELETE FROM {table}", ()),
        "replace": (f"REPLACE INTO {table} ({c}) VALUES ({q})", tuple(vals)),
        "insert_or_replace": (f"INSERT OR REPLACE INTO {table} ({c}) VALUES ({q})", tuple(vals)),
        "upsert": (
            f"INSERT INTO {table} ({c}) VALUES ({q}) ON CONFLICT(id) DO UPDATE SET round = 99",
            tuple(vals),
        ),
        "insert_or_ignore": (f"INSERT OR IGNORE INTO {table} ({c}) VALUES ({q})", tuple(vals)),
        "insert_same_id": (f"INSERT INTO {table} ({c}) VALUES ({q})", tuple(vals)),
    }


@pytest.mark.parametrize("table", EPISODIC_TABLES)
def test_no_statement_rewrites_episodic_history(mem, tmp_path, table):
    """REPLACE deletes the old row without firing DELETE triggers; it must still fail."""
    _populate(mem)
    conn = sqlite3.connect(tmp_path / "memory.db", isolation_level=None)
    before = conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
    assert before
    for name, (sql, args) in _statements(conn, table).items():
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(sql, args)
        assert conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall() == before, name
    cols = [d[0] for d in conn.execute(f"SELECT * FROM {table} LIMIT 0").description]
    vals = list(before[0])
    vals[0] = -1  # what an auto id reads as inside a BEFORE INSERT trigger: never stored
    q = ", ".join("?" for _ in cols)
    with pytest.raises(sqlite3.IntegrityError, match="must be positive"):
        conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({q})", vals)
    vals[0] = None  # appending still works, through SQL and through the store
    conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({q})", vals)
    assert len(conn.execute(f"SELECT id FROM {table}").fetchall()) == len(before) + 1
    conn.close()
    mem.add_scene_program("after", round=1)


def test_version_1_memory_is_upgraded_to_refuse_replace(tmp_path):
    from coda.memory.schema import MIGRATIONS

    p = tmp_path / "v1.db"
    conn = sqlite3.connect(p, isolation_level=None)
    conn.executescript("BEGIN;\n" + MIGRATIONS[1] + "\nPRAGMA user_version=1;\nCOMMIT;")
    conn.execute("INSERT INTO scene_programs (round, source, created_at) VALUES (0, 'g', 0.0)")
    conn.close()
    m = open_memory(p)
    assert m.schema_version() == SCHEMA_VERSION == 2
    m.close()
    conn = sqlite3.connect(p, isolation_level=None)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute(
            "REPLACE INTO scene_programs (id, round, source, created_at) VALUES (1, 5, 'h', 1.0)"
        )
    assert conn.execute("SELECT round, source FROM scene_programs").fetchall() == [(0, "g")]
    conn.close()


# ------------------------------------------------------------------ import: clear, all-or-nothing
BAD_RECORDS = {  # appended after a good export's last line -> text the error must contain
    "not_json": (b"{not json", "malformed record (not JSON"),
    "no_row": (b'{"table": "scene_programs"}', "malformed record (expected"),
    "unknown_table": (b'{"table": "users", "row": {}}', "unknown table 'users'"),
    "sql_in_column": (
        b'{"table": "modes", "row": {"id) VALUES (1); DROP TABLE modes; --": 1}}',
        "table modes has no column(s)",
    ),
    "wrong_type": (
        b'{"table": "scene_programs", "row": {"round": "three", "source": "g", "created_at": 0}}',
        "scene_programs.round must be INTEGER",
    ),
    "not_null": (
        b'{"table": "scene_programs", "row": {"round": 0, "created_at": 0}}',
        "scene_programs record refused: NOT NULL constraint failed: scene_programs.source",
    ),
    "bad_json_column": (
        b'{"table": "scene_programs", "row": {"round": 0, "source": "g", "meta": "{", '
        b'"created_at": 0}}',
        "scene_programs.meta is not JSON text",
    ),
    "bad_foreign_key": (
        b'{"table": "verifiers", "row": {"round": 0, "scene_program_id": "x", "source": "nu", '
        b'"created_at": 0}}',
        "verifiers.scene_program_id must be INTEGER",
    ),
    "bad_n_docs": (b'{"table": "meta", "row": {"key": "n_docs", "value": "many"}}', "n_docs"),
    "meta_no_value": (b'{"table": "meta", "row": {"key": "n_docs"}}', "needs key and value"),
    "not_utf8": (b'{"table": "meta", "row": {"key": "\xff\xfe"}}', "not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_import_of_a_malformed_record_names_the_line_and_imports_nothing(mem, tmp_path, case):
    bad, text = BAD_RECORDS[case]
    _populate(mem)
    good = tmp_path / "good.jsonl"
    mem.export_jsonl(good)
    lines = good.read_bytes().splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join([*lines, bad]) + b"\n")
    dst = open_memory(tmp_path / "dst.db")
    dst.add_diagnosis(round=0, factor="task", phase="grasp", cause=OCCLUDED)
    before, n_docs = dst.counts(), dst.similarity.n_docs
    with pytest.raises(MemoryImportError) as e:
        dst.import_jsonl(broken)
    msg = str(e.value)
    assert msg.startswith(f"{broken}:{len(lines) + 1}: ") and text in msg, msg
    assert "\n" not in msg
    assert dst.counts() == before and dst.similarity.n_docs == n_docs  # all rows rolled back
    assert dst.integrity_check() == "ok"
    dst.import_jsonl(good)  # the store is still usable, and a good file imports
    assert (
        dst.counts()["scene_programs"] == before["scene_programs"] + mem.counts()["scene_programs"]
    )
    dst.close()


@pytest.mark.parametrize(
    "header, text",
    [
        (b"", "not a CoDA memory export"),
        (b"{oops", "not a CoDA memory export"),
        (b'{"format": "coda-memory", "schema_version": "2"}', "schema_version must be an integer"),
        (b'{"format": "coda-memory", "schema_version": 99}', "schema version 99"),
        (b'{"format": "coda-memory", "schema_version": 2, "similarity": "x"}', "similarity 'x'"),
    ],
)
def test_import_header_errors_are_line_1(mem, tmp_path, header, text):
    p = tmp_path / "h.jsonl"
    p.write_bytes(header + b"\n")
    with pytest.raises(MemoryImportError, match=rf"^{re.escape(str(p))}:1: .*{re.escape(text)}"):
        mem.import_jsonl(p)


def test_reopen_refuted_after_new_diagnoses_once(mem):
    a = mem.add_diagnosis(round=0, factor="spatial", phase="grasp", cause=GRASP_A)
    b = mem.add_diagnosis(round=0, factor="attribute", phase="grasp", cause=OCCLUDED)
    mem.set_mode_status(a.mode_id, "refuted", round=1)
    mem.set_mode_status(b.mode_id, "refuted", round=1)
    # a diagnosis of round 1 came before the refutation decided in round 1: not new
    mem.add_diagnosis(round=1, factor="spatial", phase="grasp", cause=GRASP_A)
    assert mem.reopen_refuted(round=2, min_new=1) == []
    mem.add_diagnosis(round=2, factor="spatial", phase="grasp", cause=GRASP_A)
    assert mem.reopen_refuted(round=2, min_new=2) == []  # one new, two needed
    mem.add_diagnosis(round=3, factor="spatial", phase="grasp", cause=GRASP_A)
    assert mem.reopen_refuted(round=3, min_new=0) == []  # off
    assert mem.reopen_refuted(round=3, min_new=2) == [a.mode_id]
    assert mem.get_mode(a.mode_id).status == "candidate"
    assert mem.get_mode(b.mode_id).status == "refuted"  # no new diagnoses
    # refuted again: max_retests=1 is spent, however many diagnoses follow
    mem.set_mode_status(a.mode_id, "refuted", round=3)
    for r in (4, 5, 6):
        mem.add_diagnosis(round=r, factor="spatial", phase="grasp", cause=GRASP_A)
    assert mem.reopen_refuted(round=6, min_new=2) == []
    assert mem.reopen_refuted(round=6, min_new=2, max_retests=2) == [a.mode_id]
