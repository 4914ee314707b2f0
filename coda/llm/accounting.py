"""Token and cost accounting per role and per round, from a price table in configuration.

Prices are USD per million tokens. A model missing from the table is counted as *unpriced*
(tokens still tallied, cost unknown) rather than guessed. Replayed calls cost nothing; their
tokens are tallied separately so a rerun still reports what the original run consumed.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DEFAULT_PRICES", "CostLedger", "Price", "estimate_cost"]


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float


# Published list prices (USD / 1M tokens) at the time of writing; override in the run config.
# The method's default critic "gpt-5.5" is deliberately absent: set its price in the config.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-5": Price(1.25, 10.00),
    "gpt-5-mini": Price(0.25, 2.00),
}


def _price_of(model: str, prices: Mapping[str, Price | Mapping[str, float]]) -> Price | None:
    p = prices.get(model)
    if p is None:
        return None
    if isinstance(p, Price):
        return p
    return Price(float(p["input_per_mtok"]), float(p["output_per_mtok"]))


def estimate_cost(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    prices: Mapping[str, Price | Mapping[str, float]],
) -> float | None:
    """USD for one call, or ``None`` if the model has no price."""
    p = _price_of(model, prices)
    if p is None:
        return None
    return (prompt_tokens * p.input_per_mtok + completion_tokens * p.output_per_mtok) / 1e6


@dataclass
class Tally:
    calls: int = 0
    failures: int = 0
    replayed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    replayed_prompt_tokens: int = 0
    replayed_completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    failure_kinds: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
        replayed: bool,
        failure_kind: str | None,
    ) -> None:
        self.calls += 1
        if replayed:
            self.replayed_calls += 1
            self.replayed_prompt_tokens += prompt_tokens
            self.replayed_completion_tokens += completion_tokens
        else:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            if cost_usd is None:
                self.unpriced_calls += 1
            else:
                self.cost_usd += cost_usd
        if failure_kind is not None:
            self.failures += 1
            self.failure_kinds[failure_kind] = self.failure_kinds.get(failure_kind, 0) + 1


class CostLedger:
    """Thread-safe tallies keyed by (role, round); one provider request = one call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, int | None], Tally] = {}

    def add(
        self,
        role: str,
        round: int | None,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
        replayed: bool = False,
        failure_kind: str | None = None,
    ) -> None:
        with self._lock:
            t = self._tallies.setdefault((role, round), Tally())
            t.add(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost_usd,
                replayed=replayed,
                failure_kind=failure_kind,
            )

    def _merge(self, keep: Any) -> dict[Any, Tally]:
        out: dict[Any, Tally] = {}
        for (role, rnd), t in self._tallies.items():
            k = keep(role, rnd)
            acc = out.setdefault(k, Tally())
            for f in (
                "calls",
                "failures",
                "replayed_calls",
                "prompt_tokens",
                "completion_tokens",
                "replayed_prompt_tokens",
                "replayed_completion_tokens",
                "cost_usd",
                "unpriced_calls",
            ):
                setattr(acc, f, getattr(acc, f) + getattr(t, f))
            for kind, n in t.failure_kinds.items():
                acc.failure_kinds[kind] = acc.failure_kinds.get(kind, 0) + n
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-ready totals: overall, by role, by round, and by (role, round)."""
        with self._lock:
            total = self._merge(lambda r, n: "total").get("total", Tally())
            by_role = self._merge(lambda r, n: r)
            by_round = self._merge(lambda r, n: "none" if n is None else str(n))
            rows = [
                {"role": r, "round": n, **asdict(t)}
                for (r, n), t in sorted(
                    self._tallies.items(),
                    key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1]),
                )
            ]
        return {
            "total": asdict(total),
            "by_role": {k: asdict(v) for k, v in sorted(by_role.items())},
            "by_round": {k: asdict(v) for k, v in by_round.items()},
            "by_role_round": rows,
        }

    def to_markdown(self) -> str:
        """A table for the run report."""
        s = self.summary()
        lines = [
            "| role | round | calls | failures | prompt tok | completion tok | cost (USD) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in s["by_role_round"]:
            cost = f"{r['cost_usd']:.4f}" + (" (+unpriced)" if r["unpriced_calls"] else "")
            lines.append(
                f"| {r['role']} | {r['round']} | {r['calls']} | {r['failures']} | "
                f"{r['prompt_tokens']} | {r['completion_tokens']} | {cost} |"
            )
        t = s["total"]
        lines.append(
            f"| **total** | | {t['calls']} | {t['failures']} | {t['prompt_tokens']} | "
            f"{t['completion_tokens']} | {t['cost_usd']:.4f} |"
        )
        if t["replayed_calls"]:
            lines.append(
                f"\n{t['replayed_calls']} calls were replayed from the record at zero cost "
                f"({t['replayed_prompt_tokens']} + {t['replayed_completion_tokens']} tokens)."
            )
        return "\n".join(lines)

    def save(self, path: str | os.PathLike[str]) -> None:
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.summary(), f, indent=2, sort_keys=True)
        os.replace(tmp, path)
