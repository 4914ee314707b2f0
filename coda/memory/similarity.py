"""Similarity of diagnosis causes, used to cluster diagnoses into difficulty modes K_j.

Two backends share one interface (``CauseSimilarity``):

* ``tfidf`` (default, no model download): hashed word 1–2-grams plus character 3–5-grams of
  words, sublinear TF, IDF from document frequencies accumulated online in the memory DB. Each
  mode keeps the summed TF vector of its members; IDF is applied at query time, so mode
  summaries never go stale as the corpus grows.
* ``embedding``: any ``texts -> [N, D]`` function (e.g. a sentence-transformer's ``encode``);
  each mode keeps the sum of its members' unit vectors.

States are plain JSON-able dicts so they live in a SQLite column and survive export/import.
"""

from __future__ import annotations

import base64
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = [
    "CauseSimilarity",
    "EmbeddingSimilarity",
    "HashedTfidfSimilarity",
    "SIMILARITIES",
    "get_similarity",
]

_WORD = re.compile(r"[a-z0-9]+")


class CauseSimilarity(Protocol):
    """What the memory needs from a cause-similarity backend.

    Backends may keep corpus statistics (``observe``/``load_corpus``); the store persists the
    terms ``observe`` returns so statistics survive a restart.
    """

    name: str

    def featurize(self, text: str) -> dict[str, Any]:
        """Text -> JSON-able feature."""

    def observe(self, feature: dict[str, Any]) -> list[int]:
        """Count one document in the corpus statistics; return the terms to persist."""

    def load_corpus(self, df: Mapping[int, int], n_docs: int) -> None:
        """Restore corpus statistics saved by the store."""

    def empty_state(self) -> dict[str, Any]:
        """State of a mode with no members."""

    def add(self, state: dict[str, Any], feature: dict[str, Any]) -> dict[str, Any]:
        """State after a member joins; must not mutate ``state``."""

    def prepare(self, state: dict[str, Any]) -> Any:
        """Fast form of a state for repeated scoring (cached by the store)."""

    def prepare_query(self, feature: dict[str, Any]) -> Any:
        """Fast form of a query feature, computed once per clustering decision."""

    def score(self, query: Any, prepared: Any) -> float:
        """Cosine similarity in [-1, 1] of a prepared query to a prepared mode state."""


class HashedTfidfSimilarity:
    """Hashed n-gram TF-IDF cosine; deterministic across processes (crc32, not ``hash``)."""

    name = "tfidf"

    def __init__(
        self,
        n_features: int = 1 << 18,
        char_ngrams: tuple[int, int] = (3, 5),
        max_state_terms: int = 2048,
    ) -> None:
        if n_features <= 0 or n_features & (n_features - 1):
            raise ValueError(f"n_features must be a positive power of two, got {n_features}")
        self.n_features = n_features
        self.char_ngrams = char_ngrams
        self.max_state_terms = max_state_terms
        self.df = np.zeros(n_features, np.int64)  # [F] document frequencies
        self.n_docs = 0

    def _terms(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        terms = [f"w:{w}" for w in words]
        terms += [f"b:{a}_{b}" for a, b in zip(words, words[1:], strict=False)]
        lo, hi = self.char_ngrams
        for w in words:
            padded = f"<{w}>"
            for n in range(lo, hi + 1):
                terms += [f"c:{padded[i : i + n]}" for i in range(max(len(padded) - n + 1, 0))]
        return terms

    def featurize(self, text: str) -> dict[str, Any]:
        counts = Counter(zlib.crc32(t.encode()) & (self.n_features - 1) for t in self._terms(text))
        return {"tf": {int(k): 1.0 + math.log(v) for k, v in counts.items()}}

    def observe(self, feature: dict[str, Any]) -> list[int]:
        keys = [int(k) for k in feature["tf"]]
        self.df[keys] += 1
        self.n_docs += 1
        return keys

    def load_corpus(self, df: Mapping[int, int], n_docs: int) -> None:
        self.df[:] = 0
        if df:
            keys = np.fromiter(df.keys(), np.int64)
            self.df[keys] = np.fromiter(df.values(), np.int64)
        self.n_docs = int(n_docs)

    def empty_state(self) -> dict[str, Any]:
        return {"tf": {}, "n": 0}

    def add(self, state: dict[str, Any], feature: dict[str, Any]) -> dict[str, Any]:
        tf = {int(k): float(v) for k, v in state["tf"].items()}
        for k, v in feature["tf"].items():
            tf[int(k)] = tf.get(int(k), 0.0) + float(v)
        if len(tf) > self.max_state_terms:  # bound row size: keep the heaviest terms
            tf = dict(sorted(tf.items(), key=lambda kv: -kv[1])[: self.max_state_terms])
        return {"tf": tf, "n": int(state["n"]) + 1}

    def _idf(self, keys: np.ndarray) -> np.ndarray:
        return np.log((1.0 + self.n_docs) / (1.0 + self.df[keys])) + 1.0

    def prepare(self, state: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        tf = state["tf"]
        keys = np.fromiter((int(k) for k in tf), np.int64, len(tf))  # [T]
        vals = np.fromiter((float(v) for v in tf.values()), np.float64, len(tf))  # [T]
        order = np.argsort(keys)
        return keys[order], vals[order]

    def prepare_query(self, feature: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, float]:
        qk, qv = self.prepare(feature)
        qw = qv * self._idf(qk)  # [Q]
        return qk, qw, float(np.linalg.norm(qw))

    def score(
        self, query: tuple[np.ndarray, np.ndarray, float], prepared: tuple[np.ndarray, np.ndarray]
    ) -> float:
        qk, qw, nq = query
        mk, mv = prepared
        if mk.size == 0 or qk.size == 0 or nq == 0.0:
            return 0.0
        mw = mv * self._idf(mk)  # [T]
        pos = np.minimum(np.searchsorted(mk, qk), mk.size - 1)
        hit = mk[pos] == qk
        dot = float(np.dot(qw[hit], mw[pos[hit]]))
        nm = float(np.sqrt(np.dot(mw, mw)))
        return dot / (nq * nm) if nm > 0.0 else 0.0


def _pack(vec: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vec, np.float32).tobytes()).decode()


def _unpack(s: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), np.float32)


class EmbeddingSimilarity:
    """Cosine over sentence embeddings from any ``embed(texts) -> [N, D]`` function."""

    name = "embedding"

    def __init__(self, embed: Callable[[Sequence[str]], Any]) -> None:
        if not callable(embed):
            raise TypeError("EmbeddingSimilarity needs a callable embed(texts) -> [N, D]")
        self.embed = embed

    def featurize(self, text: str) -> dict[str, Any]:
        v = np.asarray(self.embed([text]), np.float32).reshape(-1)  # [D]
        n = float(np.linalg.norm(v))
        if not np.isfinite(n):
            raise ValueError("embedding contains non-finite values")
        return {"v": _pack(v / n if n > 0 else v)}

    def observe(self, feature: dict[str, Any]) -> list[int]:
        return []

    def load_corpus(self, df: Mapping[int, int], n_docs: int) -> None:
        return None

    def empty_state(self) -> dict[str, Any]:
        return {"sum": None, "n": 0}

    def add(self, state: dict[str, Any], feature: dict[str, Any]) -> dict[str, Any]:
        v = _unpack(feature["v"])
        s = v if state["sum"] is None else _unpack(state["sum"]) + v
        return {"sum": _pack(s), "n": int(state["n"]) + 1}

    def prepare(self, state: dict[str, Any]) -> np.ndarray | None:
        return None if state["sum"] is None else _unpack(state["sum"])

    def prepare_query(self, feature: dict[str, Any]) -> np.ndarray:
        return _unpack(feature["v"])

    def score(self, query: np.ndarray, prepared: np.ndarray | None) -> float:
        if prepared is None:
            return 0.0
        q, m = query, prepared
        if q.shape != m.shape:
            raise ValueError(f"embedding size changed: {q.shape} vs stored {m.shape}")
        nq, nm = float(np.linalg.norm(q)), float(np.linalg.norm(m))
        return 0.0 if nq == 0.0 or nm == 0.0 else float(q @ m) / (nq * nm)


SIMILARITIES: dict[str, Callable[..., CauseSimilarity]] = {
    "tfidf": HashedTfidfSimilarity,
    "embedding": EmbeddingSimilarity,
}


def get_similarity(name: str, **kwargs: Any) -> CauseSimilarity:
    """Build a similarity backend by name (``tfidf`` or ``embedding``)."""
    if name not in SIMILARITIES:
        raise ValueError(f"unknown cause similarity {name!r}; valid: {sorted(SIMILARITIES)}")
    return SIMILARITIES[name](**kwargs)
