"""Content-addressed record/replay of provider calls in the run folder.

Every exchange is stored as ``<root>/<h[:2]>/<h>.json`` where ``h`` is the SHA-256 of the
canonical JSON of (backend, model, request). A rerun in ``replay`` mode serves each call from
its file at zero cost and stops loudly on a miss, because a miss means the rerun has diverged
from the recorded run and its numbers would no longer be regenerated from the run folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from typing import Any

from coda.llm.types import CompletionRequest

__all__ = ["RECORD_MODES", "RecordStore", "ReplayMissError", "request_hash"]

# off: never touch the store · record: call the provider, store every outcome ·
# replay: serve from the store only, miss = ReplayMissError · reuse: serve hits, record misses.
RECORD_MODES = ("off", "record", "replay", "reuse")


class ReplayMissError(RuntimeError):
    """A replayed run asked for a request that was never recorded."""


def request_hash(backend: str, request: CompletionRequest) -> str:
    body = {"backend": backend, "model": request.model, "request": request.to_json()}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest()


class RecordStore:
    """Directory of recorded exchanges, safe for concurrent writers (atomic renames)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        os.makedirs(self.root, exist_ok=True)

    def path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            with open(self.path(key), encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        path = self.path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        entry = {"key": key, "recorded_at": time.time(), **entry}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def __len__(self) -> int:
        n = 0
        for _, _, files in os.walk(self.root):
            n += sum(1 for f in files if f.endswith(".json"))
        return n
