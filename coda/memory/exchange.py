"""Export and import of the shared memory as JSON lines (a header, then one record per row).

Import adds an export to an existing memory: ids are remapped, every record is checked against
the schema, and a malformed file changes nothing (one transaction).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

from coda.memory.base import StoreBase
from coda.memory.records import _EXPORT_ORDER, _JSON_COLS
from coda.memory.schema import SCHEMA_VERSION

__all__ = ["EXPORT_FORMAT", "ExportImport", "MemoryImportError"]

EXPORT_FORMAT = "coda-memory"

# table -> {column: table its ids refer to}
_FOREIGN = {
    "scene_programs": {"mode_id": "modes", "parent_id": "scene_programs"},
    "verifiers": {"scene_program_id": "scene_programs"},
    "generation_traces": {"scene_program_id": "scene_programs"},
    "deployments": {"scene_program_id": "scene_programs"},
    "diagnoses": {"scene_program_id": "scene_programs", "deployment_id": "deployments"},
    "mode_members": {"diagnosis_id": "diagnoses", "mode_id": "modes"},
    "mode_events": {"mode_id": "modes"},
    "generation_programs": {"mode_id": "modes", "parent_scene_program_id": "scene_programs"},
    "training_programs": {"mode_id": "modes"},
}


class MemoryImportError(ValueError):
    """An export file is malformed; the message names the file, line and field. Nothing of the
    file was imported."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class ExportImport(StoreBase):
    """``export_jsonl`` / ``import_jsonl`` (mixin of ``MemoryStore``)."""

    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write the whole memory as JSON lines (header first); returns the number of records."""
        n = 0
        tmp = f"{os.fspath(path)}.tmp"
        with self._lock, open(tmp, "w", encoding="utf-8") as f:
            header = {
                "format": EXPORT_FORMAT,
                "schema_version": SCHEMA_VERSION,
                "memory_mode": self.memory_mode,
                "similarity": self.similarity.name,
            }
            f.write(json.dumps(header) + "\n")
            for table in _EXPORT_ORDER:
                for row in self._conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                    f.write(json.dumps({"table": table, "row": dict(row)}) + "\n")
                    n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return n

    def import_jsonl(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Add an exported memory to this one (ids are remapped; nothing existing changes).

        Use it to reuse a memory in another run, task family or policy backbone. All-or-nothing:
        a malformed file raises `MemoryImportError` naming the file, line and field, and leaves
        this memory untouched (one transaction; in-memory corpus statistics are reloaded).
        """
        where = os.fspath(path)
        remap: dict[str, dict[int, int]] = {t: {} for t in _EXPORT_ORDER}
        counts = dict.fromkeys(_EXPORT_ORDER, 0)
        with open(path, "rb") as f:  # decoded per line, so an encoding error has a line number
            header = self._import_header(f.readline(), where)
            if int(header["schema_version"]) > SCHEMA_VERSION:
                raise MemoryImportError(
                    f"{where}:1: schema version {header['schema_version']}; "
                    f"this code knows up to {SCHEMA_VERSION}"
                )
            if header.get("similarity") != self.similarity.name:
                raise MemoryImportError(
                    f"{where}:1: built with similarity {header.get('similarity')!r}, "
                    f"this memory uses {self.similarity.name!r}"
                )
            with self.batch():
                for lineno, raw in enumerate(f, start=2):
                    if raw.strip():
                        counts[self._import_line(raw, remap, f"{where}:{lineno}")] += 1
                self._load_corpus(self._conn)
        return counts

    @staticmethod
    def _import_header(raw: bytes, where: str) -> dict[str, Any]:
        try:
            header = json.loads(raw.decode("utf-8") or "null")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MemoryImportError(f"{where}:1: not a CoDA memory export ({e})") from None
        if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
            raise MemoryImportError(f"{where}:1: not a CoDA memory export (bad header {header!r})")
        if not _is_int(header.get("schema_version")):
            raise MemoryImportError(
                f"{where}:1: header schema_version must be an integer, "
                f"got {header.get('schema_version')!r}"
            )
        return header

    def _columns(self, table: str) -> dict[str, str]:
        """{column: declared type} of a table (cached; the schema is fixed per version)."""
        if table not in self._column_types:
            info = self._conn.execute(f"PRAGMA table_info({table})").fetchall()
            self._column_types[table] = {r[1]: str(r[2]).upper() for r in info}
        return self._column_types[table]

    def _import_line(self, raw: bytes, remap: dict[str, dict[int, int]], where: str) -> str:
        """Checks one export record against the schema and inserts it; returns its table."""
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise MemoryImportError(f"{where}: malformed record (not UTF-8: {e.reason})") from None
        except json.JSONDecodeError as e:
            raise MemoryImportError(
                f"{where}: malformed record (not JSON: {e.msg} at column {e.colno})"
            ) from None
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("table"), str)
            and isinstance(rec.get("row"), dict)
        ):
            raise MemoryImportError(
                f'{where}: malformed record (expected {{"table": name, "row": {{...}}}})'
            )
        table, row = rec["table"], dict(rec["row"])
        if table not in remap:
            raise MemoryImportError(
                f"{where}: unknown table {table!r}; valid: {', '.join(_EXPORT_ORDER)}"
            )
        cols = self._columns(table)
        unknown = sorted(set(row) - set(cols))
        if unknown:
            raise MemoryImportError(
                f"{where}: table {table} has no column(s) {unknown}; columns: {sorted(cols)}"
            )
        for col, v in row.items():
            kind = cols[col]
            ok = (
                v is None
                or (kind == "INTEGER" and _is_int(v))
                or (kind == "REAL" and (_is_int(v) or isinstance(v, float)))
                or (kind == "TEXT" and isinstance(v, str))
            )
            if not ok:
                raise MemoryImportError(f"{where}: {table}.{col} must be {kind}, got {v!r:.80}")
            if col in _JSON_COLS and isinstance(v, str):
                try:
                    json.loads(v)
                except json.JSONDecodeError:
                    raise MemoryImportError(
                        f"{where}: {table}.{col} is not JSON text: {v!r:.80}"
                    ) from None
        if table == "meta" and not ({"key", "value"} <= set(row)):
            raise MemoryImportError(f"{where}: meta record needs key and value, got {sorted(row)}")
        if table == "meta" and row["key"] == "n_docs" and not str(row["value"]).isdigit():
            raise MemoryImportError(f"{where}: meta n_docs must be a count, got {row['value']!r}")
        try:
            self._import_row(table, row, remap)
        except sqlite3.Error as e:  # NOT NULL, CHECK, the append-only triggers, ...
            raise MemoryImportError(f"{where}: {table} record refused: {e}") from None
        return table

    def _import_row(
        self, table: str, row: dict[str, Any], remap: dict[str, dict[int, int]]
    ) -> None:
        if table == "meta":
            if row["key"] == "n_docs":
                self._conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('n_docs', ?) ON CONFLICT(key) DO "
                    "UPDATE SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT)",
                    (str(int(row["value"])), int(row["value"])),
                )
            return
        if table == "cause_df":
            self._conn.execute(
                "INSERT INTO cause_df(feature, df) VALUES (?, ?) "
                "ON CONFLICT(feature) DO UPDATE SET df = df + excluded.df",
                (int(row["feature"]), int(row["df"])),
            )
            return
        for col, ref in _FOREIGN.get(table, {}).items():
            if row.get(col) is not None:
                row[col] = remap[ref].get(int(row[col]))
        if table == "modes":
            row["updated_at"] = time.time()
        old_id = row.pop("id", None)
        if table == "mode_members":
            if row["diagnosis_id"] is None or row["mode_id"] is None:
                return
            self._insert(table, row)
            return
        new_id = self._insert(table, row)
        if old_id is not None:
            remap[table][int(old_id)] = new_id
