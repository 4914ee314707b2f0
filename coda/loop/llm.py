"""The loop's LLM client (VLM critic, LLM engine) and its spend in the run's budgets.

Host code only. The client records every exchange under ``<workdir>/llm/records``; with the
default ``record_mode="reuse"`` a resumed run replays the calls the interrupted round already
made (same answers, no second bill) and calls the backend for the rest. Spend is folded into
`Budgets` at every round end from the client's ledger, replayed calls included, so a resumed
run reports the same totals as an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

from ml_collections import ConfigDict

from coda import runconfig
from coda.llm import DEFAULT_CRITIC_MODEL, LLMClient, LLMConfig, RoleConfig
from coda.llm.types import ROLES
from coda.loop.state import Budgets


def needs_llm(config: ConfigDict) -> bool:
    return runconfig.uses_llm(config)


def make_client(config: ConfigDict, workdir: str) -> Any:
    """An `LLMClient` with every role on `config.llm`'s backend (validated by coda.runconfig)."""
    lc = config.llm
    kwargs: dict[str, Any] = {}
    if lc.backend != "offline":
        kwargs["api_key_env"] = str(lc.api_key_env)
        if lc.base_url:
            kwargs["base_url"] = str(lc.base_url)
    networked = lc.backend != "offline"
    roles = {
        role: RoleConfig(
            backend=str(lc.backend),
            model=str(lc.model) or (DEFAULT_CRITIC_MODEL if networked else ""),
            backend_kwargs=kwargs,
            timeout_s=float(lc.timeout_s),
            seed=int(config.seed) if networked else None,
        )
        for role in ROLES
    }
    cfg = LLMConfig(
        roles=roles, record_mode=str(lc.record_mode), max_concurrency=int(lc.max_concurrency)
    )
    return LLMClient(cfg, run_dir=workdir, seed=int(config.seed))


class UsageSync:
    """Adds the ledger's growth since the last call to `Budgets` (tokens, $, calls per role)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._seen: dict[str, tuple[int, int, float]] = {}

    def __call__(self, budgets: Budgets) -> Budgets:
        """`budgets` with the ledger's growth since the last call added (itself if none)."""
        if self.client is None:
            return budgets
        llm = {role: dict(v) for role, v in budgets.llm.items()}
        tokens_added, usd_added = 0, 0.0
        for role, t in self.client.usage_summary()["by_role"].items():
            calls = int(t["calls"])
            tokens = int(
                t["prompt_tokens"]
                + t["completion_tokens"]
                + t["replayed_prompt_tokens"]
                + t["replayed_completion_tokens"]
            )
            usd = float(t["cost_usd"])
            c0, k0, u0 = self._seen.get(role, (0, 0, 0.0))
            self._seen[role] = (calls, tokens, usd)
            row = llm.setdefault(role, {"calls": 0, "tokens": 0, "usd": 0.0})
            row["calls"] += calls - c0
            row["tokens"] += tokens - k0
            row["usd"] += usd - u0
            tokens_added += tokens - k0
            usd_added += usd - u0
        return budgets.plus(llm_tokens=tokens_added, llm_usd=usd_added, set_llm=llm)
