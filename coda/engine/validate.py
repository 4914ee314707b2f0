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

A round tests up to `loop.max_validations` candidate modes, so the decisions are corrected for
multiplicity over that round's tests (`correct`, `loop.validation_correction`): ``holm``
(step-down Holm–Bonferroni: family-wise error rate <= α over the round's tests, any dependence)
or ``bh`` (Benjamini–Hochberg step-up: false-discovery rate <= α, for independent or positively
dependent tests); ``none`` decides each test on its own raw p (the rule before corrections).
Each corrected result keeps the raw p and carries the adjusted p, the method, the number of
tests corrected over, and the decision (adjusted p <= α).

Host-side and dependency-free (``math`` only): these run once per mode per round.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "CORRECTIONS",
    "DEFAULT_ALPHA",
    "TESTS",
    "CriticRefutation",
    "TestResult",
    "adjust_p_values",
    "apply_validation",
    "benjamini_hochberg",
    "correct",
    "decide",
    "fisher_one_sided",
    "get_test",
    "holm",
    "one_sided_test",
    "refutation_rates",
    "refutation_rates_from_store",
    "round_refutations",
    "two_proportion_one_sided",
]

DEFAULT_ALPHA = 0.05
Decision = Literal["validated", "refuted"]


@dataclass(frozen=True)
class TestResult:
    """Outcome of one targeted-vs-control test; ``accepted`` means the diagnosis is validated.

    ``statistic`` is z for ``two_proportion`` and the observed targeted success count X (whose
    hypergeometric lower tail is the p-value) for ``fisher``. ``p_value`` is always the raw
    p; ``p_adjusted`` the p the decision compared with α (= ``p_value`` when ``correction`` is
    ``none``, e.g. straight from `one_sided_test`; see `correct`), over ``n_tests`` tests.
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
    p_adjusted: float | None = None  # None: uncorrected (read as p_value)
    correction: str = "none"
    n_tests: int = 1

    @property
    def decided_by(self) -> str:
        """Which p the decision compared with α: ``p_adjusted`` (a correction) or ``p_value``."""
        return "p_value" if self.correction == "none" else "p_adjusted"

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
        p_adjusted=float(p),
        statistic=float(stat),
        accepted=bool(p <= alpha),
        targeted_successes=s_t,
        targeted_n=n_t,
        control_successes=s_c,
        control_n=n_c,
        targeted_rate=s_t / n_t,
        control_rate=s_c / n_c,
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input order.

    With p_(1) <= ... <= p_(m) sorted: p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    Rejecting every test with p~ <= α is Holm's procedure (FWER <= α).
    """
    p = _check_p_values(p_values)
    m, out, running = len(p), [0.0] * len(p), 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda k: p[k])):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini–Hochberg step-up adjusted p-values (q-values), in the input order.

    With p_(1) <= ... <= p_(m) sorted: p~_(i) = min_{j >= i} min(1, m p_(j) / j).
    Rejecting every test with p~ <= α is the BH procedure (FDR <= α).
    """
    p = _check_p_values(p_values)
    m, out, running = len(p), [0.0] * len(p), 1.0
    order = sorted(range(m), key=lambda k: p[k])
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, min(1.0, m * p[i] / (rank + 1)))
        out[i] = running
    return out


def _no_correction(p_values: Sequence[float]) -> list[float]:
    return _check_p_values(p_values)


def _check_p_values(p_values: Sequence[float]) -> list[float]:
    out = []
    for v in p_values:
        f = float(v)
        if not 0.0 <= f <= 1.0:  # also NaN
            raise ValueError(f"p-values must be in [0, 1], got {v!r}")
        out.append(f)
    return out


# loop.validation_correction -> adjusted p-values of a round's tests
CORRECTIONS: dict[str, Callable[[Sequence[float]], list[float]]] = {
    "holm": holm,
    "bh": benjamini_hochberg,
    "none": _no_correction,
}


def adjust_p_values(p_values: Sequence[float], method: str = "holm") -> list[float]:
    """Adjusted p-values by `method` (``holm`` | ``bh`` | ``none``), in the input order."""
    try:
        fn = CORRECTIONS[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown multiplicity correction {method!r}; valid: {sorted(CORRECTIONS)}"
        ) from None
    return fn(p_values)


def correct(results: Sequence[TestResult], method: str = "holm") -> list[TestResult]:
    """A round's tests decided together: each result with its adjusted p, the method, the number
    of tests, and ``accepted`` = adjusted p <= its α (``none``: the raw p decides, as before).
    The raw ``p_value`` is kept. All results must share one α."""
    results = list(results)
    if len({r.alpha for r in results}) > 1:
        raise ValueError("the tests of one correction must share one alpha")
    adj = adjust_p_values([r.p_value for r in results], method)
    return [
        dataclasses.replace(
            r, p_adjusted=a, correction=method, n_tests=len(results), accepted=bool(a <= r.alpha)
        )
        for r, a in zip(results, adj, strict=True)
    ]


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


def round_refutations(
    store: _ModeStore, decided: Iterable[tuple[int, bool]], critic: str | None = None
) -> dict[str, CriticRefutation]:
    """Refutations per critic backend among one round's tests: ``decided`` is (mode id,
    accepted) per test. Counted like `refutation_rates_from_store` (once for every backend that
    contributed a diagnosis of the mode); a mode without diagnoses counts for ``critic``."""
    pairs: list[tuple[str, str]] = []
    for mode_id, accepted in decided:
        critics = sorted({d.critic for d in store.diagnoses_for_mode(int(mode_id))})
        if not critics and critic is not None:
            critics = [critic]
        pairs += [(c, "validated" if accepted else "refuted") for c in critics]
    return refutation_rates(pairs)
