"""Control validation of a candidate mode (§3.3): is targeted success really lower than control?

A diagnosis ψ = (δ, p, c, e) claims the policy fails when factor δ moves in a direction. The engine
rolls the current policy out on a targeted batch (vary δ that way) and on a control batch of the
same size (vary another factor by a comparable amount). The mode is validated only if targeted
success is lower than control by a one-sided test at level α; otherwise it is refuted. Refuted
modes never enter procedural memory (Ω, Φ), and the refutation rate per critic backend measures
how often each critic blames the wrong factor.

Two tests, both of H0: p_targeted = p_control against H1: p_targeted < p_control:

* ``fisher``: exact conditional test. Given the margins, the targeted success count X is
  hypergeometric, P(X = x) = C(K, x) C(N - K, n_t - x) / C(N, n_t) with N = n_t + n_c and
  K = s_t + s_c; the p-value is the lower tail P(X <= s_t), summed in exact integer arithmetic.
  Conservative (false-acceptance rate <= α) at any N; the default.
* ``two_proportion``: pooled z-test. p̄ = K / N, z = (s_t/n_t - s_c/n_c) / sqrt(p̄(1-p̄)(1/n_t +
  1/n_c)), p = Φ(z). A pooled rate of 0 or 1 carries no evidence: z = 0, p = 1.

Host-side and dependency-free (``math`` only): these run once per mode per round.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "DEFAULT_ALPHA",
    "TESTS",
    "CriticRefutation",
    "TestResult",
    "apply_validation",
    "decide",
    "fisher_one_sided",
    "get_test",
    "one_sided_test",
    "refutation_rates",
    "refutation_rates_from_store",
    "two_proportion_one_sided",
]

DEFAULT_ALPHA = 0.05
Decision = Literal["validated", "refuted"]


@dataclass(frozen=True)
class TestResult:
    """Outcome of one targeted-vs-control test; ``accepted`` means the diagnosis is validated.

    ``statistic`` is z for ``two_proportion`` and the observed targeted success count X (whose
    hypergeometric lower tail is the p-value) for ``fisher``.
    """

    __test__ = False  # not a pytest test class despite the name

    method: str
    alpha: float
    p_value: float
    statistic: float
    accepted: bool
    targeted_successes: int
    targeted_n: int
    control_successes: int
    control_n: int
    targeted_rate: float
    control_rate: float

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready numbers (what memory stores as the status reason)."""
        return asdict(self)


class _Test(Protocol):
    def __call__(self, s_t: int, n_t: int, s_c: int, n_c: int) -> tuple[float, float]: ...


def _check_counts(name: str, successes: Any, n: Any) -> tuple[int, int]:
    for field, v in ((f"{name}_successes", successes), (f"{name}_n", n)):
        if isinstance(v, bool) or not (isinstance(v, int) or _is_integral(v)):
            raise TypeError(f"{field} must be an integer count, got {v!r}")
    s, n = int(successes), int(n)
    if n <= 0:
        raise ValueError(f"{name}_n must be > 0 rollouts, got {n}")
    if not 0 <= s <= n:
        raise ValueError(f"{name}_successes must be in [0, {name}_n={n}], got {s}")
    return s, n


def _is_integral(v: Any) -> bool:
    """numpy integer scalars and the like (anything with an exact ``__index__``)."""
    try:
        v.__index__()
    except (AttributeError, TypeError):
        return False
    return True


def fisher_one_sided(s_t: int, n_t: int, s_c: int, n_c: int) -> tuple[float, float]:
    """(p, X): Fisher exact lower tail P(X <= s_t) of the hypergeometric targeted count."""
    n, k = n_t + n_c, s_t + s_c
    lo = max(0, k - n_c)  # fewest targeted successes the margins allow
    tail = sum(math.comb(k, x) * math.comb(n - k, n_t - x) for x in range(lo, s_t + 1))
    p = tail / math.comb(n, n_t)  # exact integers; one correctly rounded division
    return min(1.0, p), float(s_t)


def two_proportion_one_sided(s_t: int, n_t: int, s_c: int, n_c: int) -> tuple[float, float]:
    """(p, z): pooled two-proportion z-test, p = Φ(z); degenerate pooled rate -> (1, 0)."""
    pooled = (s_t + s_c) / (n_t + n_c)
    var = pooled * (1.0 - pooled) * (1.0 / n_t + 1.0 / n_c)
    if var <= 0.0:  # all failures or all successes: no evidence either way
        return 1.0, 0.0
    z = (s_t / n_t - s_c / n_c) / math.sqrt(var)
    return 0.5 * math.erfc(-z / math.sqrt(2.0)), z


TESTS: dict[str, _Test] = {
    "fisher": fisher_one_sided,
    "two_proportion": two_proportion_one_sided,
}


def get_test(method: str) -> Callable[[int, int, int, int], tuple[float, float]]:
    """The one-sided test registered under ``method``; a clear error lists the valid names."""
    try:
        return TESTS[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown validation test method {method!r}; valid: {sorted(TESTS)}"
        ) from None


def one_sided_test(
    targeted_successes: int,
    targeted_n: int,
    control_successes: int,
    control_n: int,
    *,
    method: str = "fisher",
    alpha: float = DEFAULT_ALPHA,
) -> TestResult:
    """Test H1: targeted success < control success; accepted iff p <= alpha.

    Counts are successes out of rollouts of the current policy on each batch.
    """
    test = get_test(method)
    if not (isinstance(alpha, (int, float)) and 0.0 < float(alpha) < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    s_t, n_t = _check_counts("targeted", targeted_successes, targeted_n)
    s_c, n_c = _check_counts("control", control_successes, control_n)
    p, stat = test(s_t, n_t, s_c, n_c)
    return TestResult(
        method=method,
        alpha=float(alpha),
        p_value=float(p),
        statistic=float(stat),
        accepted=bool(p <= alpha),
        targeted_successes=s_t,
        targeted_n=n_t,
        control_successes=s_c,
        control_n=n_c,
        targeted_rate=s_t / n_t,
        control_rate=s_c / n_c,
    )


def decide(result: TestResult) -> Decision:
    """Memory status the test implies: ``validated`` if accepted, else ``refuted``."""
    return "validated" if result.accepted else "refuted"


class _StatusStore(Protocol):
    def set_mode_status(
        self, mode_id: int, status: str, *, round: int, reason: str = ""
    ) -> Any: ...


def apply_validation(
    store: _StatusStore,
    mode_id: int,
    result: TestResult,
    *,
    round: int,
    critic: str | None = None,
) -> Any:
    """Write the decision into memory: ``set_mode_status`` with the test's numbers as JSON reason.

    Returns what the store returns (the updated ``Mode``). The reason is
    ``{"validation": TestResult.as_dict(), "critic": critic}`` so the status event carries the
    evidence for the decision.
    """
    reason = json.dumps(
        {"validation": result.as_dict(), "critic": critic}, sort_keys=True, allow_nan=False
    )
    return store.set_mode_status(int(mode_id), decide(result), round=int(round), reason=reason)


@dataclass(frozen=True)
class CriticRefutation:
    """Decided modes a critic backend proposed, and the share the control test refuted."""

    critic: str
    n_validated: int
    n_refuted: int

    @property
    def n_decided(self) -> int:
        return self.n_validated + self.n_refuted

    @property
    def rate(self) -> float:
        """n_refuted / n_decided (NaN-free: 0 decided -> 0.0)."""
        return self.n_refuted / self.n_decided if self.n_decided else 0.0


def refutation_rates(decisions: Iterable[tuple[str, str]]) -> dict[str, CriticRefutation]:
    """Per critic backend: validated / refuted counts from ``(critic, status)`` pairs.

    Statuses other than validated / refuted (candidate, retired) are not decisions and are skipped.
    """
    counts: dict[str, list[int]] = {}
    for critic, status in decisions:
        if status not in ("validated", "refuted"):
            continue
        c = counts.setdefault(str(critic), [0, 0])
        c[status == "refuted"] += 1
    return {k: CriticRefutation(k, v[0], v[1]) for k, v in sorted(counts.items())}


class _ModeStore(Protocol):
    def modes(self, *, status: Any = None, factor: Any = None, phase: Any = None) -> list[Any]: ...

    def diagnoses_for_mode(self, mode_id: int, *, limit: int | None = None) -> list[Any]: ...


def refutation_rates_from_store(store: _ModeStore) -> dict[str, CriticRefutation]:
    """Refutation rate per critic backend over the store's validated and refuted modes.

    A mode counts once for every backend that contributed at least one of its diagnoses (a mode
    both backends proposed is evidence about both). Retired modes no longer say how their test
    went and are not counted.
    """
    pairs: list[tuple[str, str]] = []
    for m in store.modes(status=["validated", "refuted"]):
        critics = sorted({d.critic for d in store.diagnoses_for_mode(m.id)})
        pairs += [(c, m.status) for c in critics]
    return refutation_rates(pairs)
