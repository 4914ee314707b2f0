"""SQLite schema of the shared memory M, versioned through ``PRAGMA user_version``.

Version 1 — tables by tier (JSON columns hold UTF-8 JSON text; times are UNIX seconds):

Episodic tier B (append-only; triggers abort every UPDATE and DELETE, and — since version 2 —
every INSERT that names an existing id: REPLACE / INSERT OR REPLACE delete the old row without
firing DELETE triggers, so they would otherwise rewrite history; ids are positive):
  scene_programs     id, round, mode_id?, parent_id? (-> scene_programs), factor?, source g, meta
  verifiers          id, round, scene_program_id, source ν, meta
  generation_traces  id, round, scene_program_id, violated [constraints], repair_steps [..],
                     outcome (e.g. "verified", "rejected"), meta
  deployments        id, round, scene_program_id, n_rollouts N, n_success, success_rate p̂(s),
                     learning_progress LV(s)?, policy (tag of the policy evaluated), meta
  diagnoses          id, round, scene_program_id?, deployment_id?, factor δ ∈ {task, spatial,
                     attribute, execution}, phase p, cause c, evidence e {rollout ids, frames,
                     state summaries}, critic (which critic), model (which LLM/VLM)
  mode_events        id, round, mode_id, kind (created | joined | outcome | progress | status),
                     payload — the audit log from which every semantic-tier value can be rebuilt

Semantic tier (difficulty modes K_j; mutable summaries):
  modes              id, factor δ, phase p, label, status (candidate | validated | refuted |
                     retired), created_round, n_diagnoses, n_trials/n_successes (lifetime),
                     hardness p̂_j (success rate in hardness_round), hardness_round,
                     round_trials/round_successes, importance w_j, n_progress, last_progress,
                     cause_state (similarity backend state), updated_at
  mode_members       diagnosis_id (PK) -> mode_id, similarity at assignment time
  cause_df           feature (hashed term) -> document frequency (TF-IDF corpus statistics)
  meta               key -> value (similarity backend name, document count, memory mode)

Procedural tier (indexed by mode; ``role_signature`` = sorted symbolic role names joined by ","):
  generation_programs  Ω: id, round, mode_id, parent_scene_program_id, factor varied, variants
                       [validated variant sources/params], compile_checks [..], roles {relational
                       structure over symbolic roles}, role_signature, meta
  training_programs    Φ: id, round, mode_id, phase, subgoals [..], potential_source, tools
                       {subgoal -> learning tool}, evidence [{round, before, after, ...}],
                       improved (NULL until evaluated), role_signature, meta
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 2

EPISODIC_TABLES = (
    "scene_programs",
    "verifiers",
    "generation_traces",
    "deployments",
    "diagnoses",
    "mode_events",
)
SEMANTIC_TABLES = ("modes", "mode_members", "cause_df", "meta")
PROCEDURAL_TABLES = ("generation_programs", "training_programs")

_DDL_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE IF NOT EXISTS scene_programs (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, mode_id INTEGER, parent_id INTEGER,
  factor TEXT, source TEXT NOT NULL, meta TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS scene_programs_mode ON scene_programs(mode_id);

CREATE TABLE IF NOT EXISTS verifiers (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, scene_program_id INTEGER, source TEXT NOT NULL,
  meta TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS verifiers_scene ON verifiers(scene_program_id);

CREATE TABLE IF NOT EXISTS generation_traces (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, scene_program_id INTEGER,
  violated TEXT NOT NULL, repair_steps TEXT NOT NULL, outcome TEXT NOT NULL,
  meta TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS generation_traces_scene ON generation_traces(scene_program_id);

CREATE TABLE IF NOT EXISTS deployments (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, scene_program_id INTEGER,
  n_rollouts INTEGER NOT NULL, n_success INTEGER NOT NULL, success_rate REAL NOT NULL,
  learning_progress REAL, policy TEXT NOT NULL DEFAULT '', meta TEXT NOT NULL DEFAULT '{}',
  created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS deployments_scene ON deployments(scene_program_id);

CREATE TABLE IF NOT EXISTS diagnoses (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, scene_program_id INTEGER, deployment_id INTEGER,
  factor TEXT NOT NULL, phase TEXT NOT NULL, cause TEXT NOT NULL, evidence TEXT NOT NULL,
  critic TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS diagnoses_fp ON diagnoses(factor, phase);

CREATE TABLE IF NOT EXISTS mode_events (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, mode_id INTEGER NOT NULL, kind TEXT NOT NULL,
  payload TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS mode_events_mode ON mode_events(mode_id);

CREATE TABLE IF NOT EXISTS modes (
  id INTEGER PRIMARY KEY, factor TEXT NOT NULL, phase TEXT NOT NULL, label TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'candidate', created_round INTEGER NOT NULL,
  n_diagnoses INTEGER NOT NULL DEFAULT 0, n_trials INTEGER NOT NULL DEFAULT 0,
  n_successes INTEGER NOT NULL DEFAULT 0, hardness REAL, hardness_round INTEGER,
  round_trials INTEGER NOT NULL DEFAULT 0, round_successes INTEGER NOT NULL DEFAULT 0,
  importance REAL NOT NULL DEFAULT 0.0, n_progress INTEGER NOT NULL DEFAULT 0,
  last_progress REAL, cause_state TEXT NOT NULL, updated_at REAL NOT NULL,
  CHECK (status IN ('candidate', 'validated', 'refuted', 'retired')));
CREATE INDEX IF NOT EXISTS modes_fp ON modes(factor, phase);

CREATE TABLE IF NOT EXISTS mode_members (
  diagnosis_id INTEGER PRIMARY KEY, mode_id INTEGER NOT NULL, similarity REAL NOT NULL);
CREATE INDEX IF NOT EXISTS mode_members_mode ON mode_members(mode_id);

CREATE TABLE IF NOT EXISTS cause_df (feature INTEGER PRIMARY KEY, df INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS generation_programs (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, mode_id INTEGER,
  parent_scene_program_id INTEGER, factor TEXT, variants TEXT NOT NULL,
  compile_checks TEXT NOT NULL, roles TEXT NOT NULL, role_signature TEXT NOT NULL,
  meta TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS generation_programs_mode ON generation_programs(mode_id);
CREATE INDEX IF NOT EXISTS generation_programs_sig ON generation_programs(role_signature);

CREATE TABLE IF NOT EXISTS training_programs (
  id INTEGER PRIMARY KEY, round INTEGER NOT NULL, mode_id INTEGER, phase TEXT,
  subgoals TEXT NOT NULL, potential_source TEXT NOT NULL, tools TEXT NOT NULL,
  evidence TEXT NOT NULL, improved INTEGER, role_signature TEXT NOT NULL,
  meta TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS training_programs_mode ON training_programs(mode_id);
CREATE INDEX IF NOT EXISTS training_programs_sig ON training_programs(role_signature);
"""


def _append_only_triggers() -> str:
    out = []
    for t in EPISODIC_TABLES:
        for op in ("UPDATE", "DELETE"):
            out.append(
                f"CREATE TRIGGER IF NOT EXISTS {t}_no_{op.lower()} BEFORE {op} ON {t} "
                f"BEGIN SELECT RAISE(ABORT, 'episodic tier is append-only: {op} on {t}'); END;"
            )
    return "\n".join(out)


def _no_rewrite_triggers() -> str:
    """Version 2: an INSERT naming an existing id aborts before SQLite's REPLACE conflict
    resolution deletes the old row (BEFORE INSERT runs first; an auto-assigned id reads as -1
    there, so an AFTER INSERT trigger keeps ids positive and -1 never matches a stored row)."""
    out = []
    for t in EPISODIC_TABLES:
        out.append(
            f"CREATE TRIGGER IF NOT EXISTS {t}_no_replace BEFORE INSERT ON {t} "
            f"WHEN EXISTS (SELECT 1 FROM {t} WHERE id = NEW.id) "
            f"BEGIN SELECT RAISE(ABORT, 'episodic tier is append-only: id exists in {t} "
            f"(REPLACE / INSERT OR REPLACE / duplicate id)'); END;"
        )
        out.append(
            f"CREATE TRIGGER IF NOT EXISTS {t}_positive_id AFTER INSERT ON {t} WHEN NEW.id < 1 "
            f"BEGIN SELECT RAISE(ABORT, 'episodic tier: ids in {t} must be positive'); END;"
        )
    return "\n".join(out)


# version -> script that upgrades from version-1 to version.
MIGRATIONS: dict[int, str] = {
    1: _DDL_V1 + _append_only_triggers(),
    2: _no_rewrite_triggers(),
}


def apply_schema(conn: sqlite3.Connection) -> int:
    """Create or upgrade the schema in place; refuse a database from a newer code version."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"memory database has schema version {version}; this code knows up to "
            f"{SCHEMA_VERSION}. Upgrade the code rather than opening it with an older one."
        )
    for v in range(version + 1, SCHEMA_VERSION + 1):
        conn.executescript(
            "BEGIN IMMEDIATE;\n" + MIGRATIONS[v] + f"\nPRAGMA user_version={v};\nCOMMIT;"
        )
    return SCHEMA_VERSION
