"""Replies recorded to one portable file and served again: compare critics / engines offline.

`coda.llm.record` keeps a run folder's exchanges content-addressed by the whole request, images
included, so a replay must render bit-identical keyframes. A comparison made against a provider
on one machine should replay on another, whose GL driver renders a few pixels differently; a
*reply file* therefore keys each exchange by its messages with every image replaced by a
placeholder (`reply_key`): the text (instruction, phases, scene factors, the state table, the
attempt history) decides which reply is served, the pictures do not.

A reply file is JSON lines, one exchange per line: ``key``, ``role``, ``model``, ``text``,
``prompt_tokens``, ``completion_tokens``, ``finish_reason``, ``images`` (how many the request
carried). `RecordingBackend` wraps any backend and appends each exchange; `ReplayBackend` serves
them (the k-th request with a key gets the k-th recorded reply of that key, the last one again
after that) and raises `ReplayMissError` on a key it never saw; `ReplyFile.answer` serves a
request body the same way (a local OpenAI-compatible server, e.g. tests/chat_server.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from coda.llm.backends import Backend
from coda.llm.record import ReplayMissError
from coda.llm.types import CompletionRequest, RawCompletion

__all__ = ["RecordingBackend", "ReplayBackend", "ReplyFile", "reply_key"]

IMAGE = "<image>"


def _strip_images(content: Any) -> tuple[Any, int]:
    if not isinstance(content, list):
        return content, 0
    out, n = [], 0
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "image_url":
            out.append({"type": "image_url", "image_url": IMAGE})
            n += 1
        else:
            out.append(part)
    return out, n


def reply_key(messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """(SHA-256 of the messages with images replaced by a placeholder, number of images)."""
    msgs, n = [], 0
    for m in messages:
        content, k = _strip_images(m.get("content"))
        msgs.append({**m, "content": content})
        n += k
    canon = json.dumps(msgs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canon.encode()).hexdigest(), n


class ReplyFile:
    """A reply file (module docstring): read, appended to, served by key."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self.entries: list[dict[str, Any]] = []
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.entries = [json.loads(line) for line in f if line.strip()]
        self._by_key: dict[str, list[dict[str, Any]]] = {}
        for e in self.entries:
            self._by_key.setdefault(e["key"], []).append(e)
        self._served: dict[str, int] = {}
        self.misses = 0

    def append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry, sort_keys=True) + "\n")
            self.entries.append(entry)
            self._by_key.setdefault(entry["key"], []).append(entry)

    def lookup(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The next recorded reply for these messages, or `ReplayMissError`."""
        key, _ = reply_key(messages)
        with self._lock:
            hits = self._by_key.get(key)
            if not hits:
                self.misses += 1
                raise ReplayMissError(
                    f"no recorded reply for request {key[:16]} in {self.path}: the run diverged "
                    "from the recorded one (another flaw set, seed or size?)"
                )
            k = self._served.get(key, 0)
            self._served[key] = k + 1
            return hits[min(k, len(hits) - 1)]

    def answer(self, body: Mapping[str, Any]) -> str:
        """The recorded reply text for an OpenAI chat-completions request body."""
        return str(self.lookup(body["messages"])["text"])

    def tokens(self) -> dict[str, dict[str, int]]:
        """Recorded tokens and calls per role."""
        out: dict[str, dict[str, int]] = {}
        for e in self.entries:
            r = out.setdefault(e["role"], {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            r["calls"] += 1
            r["prompt_tokens"] += int(e.get("prompt_tokens", 0))
            r["completion_tokens"] += int(e.get("completion_tokens", 0))
        return out


class RecordingBackend:
    """A backend that appends every completed exchange of `inner` to a reply file."""

    def __init__(self, inner: Backend, replies: ReplyFile) -> None:
        self.inner, self.replies = inner, replies
        self.name, self.networked = inner.name, inner.networked

    def complete(self, request: CompletionRequest, *, role: str, timeout_s: float) -> RawCompletion:
        raw = self.inner.complete(request, role=role, timeout_s=timeout_s)
        key, n = reply_key(request.messages)
        self.replies.append(
            {
                "key": key,
                "role": role,
                "model": raw.model or request.model,
                "text": raw.text,
                "prompt_tokens": raw.prompt_tokens,
                "completion_tokens": raw.completion_tokens,
                "finish_reason": raw.finish_reason,
                "images": n,
            }
        )
        return raw


class ReplayBackend:
    """Serves a reply file; no network. A miss raises `ReplayMissError` (the client turns it
    into a failed call; `ReplyFile.misses` counts them)."""

    name = "replay"
    networked = False

    def __init__(self, replies: ReplyFile) -> None:
        self.replies = replies

    def complete(self, request: CompletionRequest, *, role: str, timeout_s: float) -> RawCompletion:
        del role, timeout_s
        e = self.replies.lookup(request.messages)
        return RawCompletion(
            text=str(e["text"]),
            prompt_tokens=int(e.get("prompt_tokens", 0)),
            completion_tokens=int(e.get("completion_tokens", 0)),
            finish_reason=str(e.get("finish_reason", "stop")),
            model=str(e.get("model", request.model)),
        )
