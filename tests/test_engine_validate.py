"""Control validation: hand-computed one-sided tests, calibration under H0, power, memory writes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from coda.engine.validate import (
    CORRECTIONS,
    TESTS,
    CriticRefutation,
    adjust_p_values,
    apply_validation,
    benjamini_hochberg,
    correct,
    decide,
    get_test,
    holm,
    one_sided_test,
    refutation_rates,
    refutation_rates_from_store,
    round_refutations,
)
from coda.memory import MemoryStore

ATOL = 1e-12  # the tests are float64 host arithmetic


def test_fisher_matches_hand_computed_hypergeometric_tail():
    # 2/10 targeted vs 8/10 control: N = 20, K = 10 successes, n_t = 10 targeted rollouts.
    # P(X <= 2) = [C(10,0)C(10,10) + C(10,1)C(10,9) + C(10,2)C(10,8)] / C(20,10)
    #           = (1 + 100 + 2025) / 184756 = 2126 / 184756
    expected = 2126 / 184756
    assert math.comb(20, 10) == 184756
    r = one_sided_test(2, 10, 8, 10, method="fisher")
    assert r.p_value == pytest.approx(expected, abs=ATOL)
    assert r.p_value == pytest.approx(0.0115070688, abs=1e-10)
    assert r.statistic == 2.0
    assert r.accepted and decide(r) == "validated"
    assert (r.targeted_rate, r.control_rate) == (0.2, 0.8)
    assert (r.targeted_successes, r.targeted_n, r.control_successes, r.control_n) == (2, 10, 8, 10)


def test_fisher_unequal_sizes_hand_computed():
    # 1/4 vs 3/3: N = 7, K = 4, n_t = 4; X >= K - n_c = 1, so P(X <= 1) = C(4,1)C(3,3) / C(7,4)
    r = one_sided_test(1, 4, 3, 3, method="fisher")
    assert r.p_value == pytest.approx(4 / 35, abs=ATOL)
    assert not r.accepted  # 0.114 > 0.05
    assert one_sided_test(1, 4, 3, 3, method="fisher", alpha=0.15).accepted


def test_two_proportion_matches_hand_computed_z():
    # 3/20 vs 9/20: pooled 12/40 = 0.3, se = sqrt(0.3 * 0.7 * (2/20)) = sqrt(0.021)
    # z = (0.15 - 0.45) / sqrt(0.021) = -2.0701966780..., p = Φ(z) = 0.5 erfc(-z/√2)
    z = -0.3 / math.sqrt(0.021)
    assert z == pytest.approx(-2.0701966780270626, abs=ATOL)
    r = one_sided_test(3, 20, 9, 20, method="two_proportion")
    assert r.statistic == pytest.approx(z, abs=ATOL)
    assert r.p_value == pytest.approx(0.5 * math.erfc(-z / math.sqrt(2.0)), abs=ATOL)
    assert r.p_value == pytest.approx(0.019217, abs=1e-6)  # Φ(-2.0702); table Φ(-2.07) = 0.0192
    assert r.accepted


@pytest.mark.parametrize("method", sorted(TESTS))
def test_equal_rates_not_accepted(method):
    r = one_sided_test(5, 10, 5, 10, method=method)
    assert not r.accepted and decide(r) == "refuted"
    assert r.p_value >= 0.5 - ATOL  # z = 0 gives exactly 0.5; Fisher's tail includes X = 5


@pytest.mark.parametrize("method", sorted(TESTS))
def test_targeted_better_than_control_not_accepted(method):
    r = one_sided_test(9, 10, 1, 10, method=method)
    assert not r.accepted
    assert r.p_value > 0.99


@pytest.mark.parametrize("s", [0, 10])
def test_degenerate_pooled_rates_give_p_one_not_nan(s):
    z = one_sided_test(s, 10, s, 10, method="two_proportion")
    assert z.p_value == 1.0 and z.statistic == 0.0 and not z.accepted
    f = one_sided_test(s, 10, s, 10, method="fisher")
    assert f.p_value == pytest.approx(1.0, abs=ATOL) and not f.accepted


def test_alpha_boundary_is_inclusive():
    p = one_sided_test(2, 10, 8, 10).p_value
    assert one_sided_test(2, 10, 8, 10, alpha=p).accepted


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="unknown validation test method 'chi2'.*fisher"):
        one_sided_test(1, 10, 5, 10, method="chi2")
    with pytest.raises(ValueError, match="two_proportion"):
        get_test("z")
    with pytest.raises(ValueError, match="targeted_successes must be in \\[0, targeted_n=10\\]"):
        one_sided_test(11, 10, 5, 10)
    with pytest.raises(ValueError, match="control_n must be > 0"):
        one_sided_test(1, 10, 0, 0)
    with pytest.raises(TypeError, match="control_successes must be an integer"):
        one_sided_test(1, 10, 0.5, 10)
    with pytest.raises(ValueError, match="alpha must be in \\(0, 1\\)"):
        one_sided_test(1, 10, 5, 10, alpha=0.0)
    # numpy integer counts are fine
    r = one_sided_test(np.int64(2), np.int32(10), np.int64(8), 10)
    assert r.p_value == pytest.approx(2126 / 184756, abs=ATOL)


def _simulate(method: str, p_t: float, p_c: float, n: int, trials: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    s_t = rng.binomial(n, p_t, size=trials)
    s_c = rng.binomial(n, p_c, size=trials)
    acc = [
        one_sided_test(int(a), n, int(b), n, method=method).accepted
        for a, b in zip(s_t, s_c, strict=True)
    ]
    return float(np.mean(acc))


@pytest.mark.parametrize("method", sorted(TESTS))
def test_calibration_under_null(method):
    # H0 true (both 0.5, N = 32): measured 0.034 (fisher) and 0.060 (two_proportion) at seed 0.
    rate = _simulate(method, 0.5, 0.5, n=32, trials=2000, seed=0)
    assert rate <= 0.05 + 0.02


@pytest.mark.parametrize("method", sorted(TESTS))
def test_power_at_n32(method):
    # 0.2 vs 0.6 at N = 32: measured 0.93 (fisher) and 0.955 (two_proportion) at seed 1.
    rate = _simulate(method, 0.2, 0.6, n=32, trials=2000, seed=1)
    assert rate >= 0.90


def test_apply_validation_writes_status_and_numbers(tmp_path):
    store = MemoryStore(tmp_path / "memory.db")
    try:
        a = store.add_diagnosis(
            round=0, factor="spatial", phase="grasp", cause="mug too far left", critic="offline"
        )
        b = store.add_diagnosis(
            round=0, factor="attribute", phase="lift", cause="the heavy bowl slips", critic="vlm"
        )
        r_ok = one_sided_test(2, 10, 8, 10)
        r_no = one_sided_test(6, 10, 5, 10, method="two_proportion")
        m = apply_validation(store, a.mode_id, r_ok, round=1, critic="offline")
        assert m.status == "validated"
        m = apply_validation(store, b.mode_id, r_no, round=1, critic="vlm")
        assert m.status == "refuted"
        # Only candidates can be decided: a second decision on a validated mode is refused.
        with pytest.raises(ValueError, match="cannot go from 'validated' to 'refuted'"):
            apply_validation(store, a.mode_id, r_no, round=2)
        store.export_jsonl(tmp_path / "memory.jsonl")  # public read-back of the status events
    finally:
        store.close()
    # The status event carries the test's numbers as JSON.
    with open(tmp_path / "memory.jsonl", encoding="utf-8") as f:
        recs = [json.loads(line) for line in f][1:]
    rows = [
        (r["row"]["mode_id"], r["row"]["payload"])
        for r in recs
        if r["table"] == "mode_events" and r["row"]["kind"] == "status"
    ]
    assert [r[0] for r in rows] == [a.mode_id, b.mode_id]
    reason = json.loads(json.loads(rows[0][1])["reason"])
    assert reason["critic"] == "offline"
    assert reason["validation"]["method"] == "fisher"
    assert reason["validation"]["p_value"] == pytest.approx(2126 / 184756, abs=ATOL)
    assert reason["validation"]["accepted"] is True
    assert reason["validation"]["targeted_successes"] == 2
    assert reason["validation"]["control_n"] == 10
    reason_b = json.loads(json.loads(rows[1][1])["reason"])
    assert reason_b["validation"]["accepted"] is False


def test_refutation_rates_per_critic(tmp_path):
    pairs = [
        ("vlm", "validated"),
        ("vlm", "refuted"),
        ("vlm", "refuted"),
        ("offline", "validated"),
        ("offline", "candidate"),  # undecided: skipped
        ("offline", "retired"),  # outcome unknown: skipped
    ]
    rates = refutation_rates(pairs)
    assert rates == {
        "offline": CriticRefutation("offline", 1, 0),
        "vlm": CriticRefutation("vlm", 1, 2),
    }
    assert rates["vlm"].rate == pytest.approx(2 / 3, abs=ATOL)
    assert rates["offline"].rate == 0.0 and rates["offline"].n_decided == 1
    assert CriticRefutation("x", 0, 0).rate == 0.0

    store = MemoryStore(tmp_path / "memory.db")
    try:
        a = store.add_diagnosis(
            round=0, factor="spatial", phase="grasp", cause="mug too far left", critic="offline"
        )
        # same (δ, p) and cause: joins mode a, so both backends proposed it
        a2 = store.add_diagnosis(
            round=0, factor="spatial", phase="grasp", cause="mug too far left", critic="vlm"
        )
        assert a2.mode_id == a.mode_id and not a2.created
        b = store.add_diagnosis(
            round=0, factor="attribute", phase="lift", cause="heavy bowl slips", critic="vlm"
        )
        store.add_diagnosis(round=0, factor="task", phase="reach", cause="wrong cup", critic="vlm")
        apply_validation(store, a.mode_id, one_sided_test(2, 10, 8, 10), round=1)
        apply_validation(store, b.mode_id, one_sided_test(5, 10, 5, 10), round=1)
        got = refutation_rates_from_store(store)
    finally:
        store.close()
    assert got == {
        "offline": CriticRefutation("offline", 1, 0),
        "vlm": CriticRefutation("vlm", 1, 1),  # the third (candidate) mode is undecided
    }


# ----------------------------------------------------------------------------- multiplicity

# m = 4 p-values, hand-worked. Sorted: 0.005 < 0.01 < 0.03 < 0.04.
# Holm: (m - j + 1) p_(j) = 4(0.005), 3(0.01), 2(0.03), 1(0.04) = 0.02, 0.03, 0.06, 0.04;
#   running max -> 0.02, 0.03, 0.06, 0.06.
# BH: m p_(j) / j = 0.02, 0.02, 0.04, 0.04; running min from the top -> 0.02, 0.02, 0.04, 0.04.
P4 = [0.01, 0.04, 0.03, 0.005]


def test_holm_and_bh_match_hand_worked_adjusted_p_values():
    assert holm(P4) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=ATOL)
    assert benjamini_hochberg(P4) == pytest.approx([0.02, 0.04, 0.04, 0.02], abs=ATOL)
    # BH's step-up min matters here: m p_(j) / j = 0.06, 0.045, 0.04 -> 0.04, 0.04, 0.04
    assert benjamini_hochberg([0.02, 0.03, 0.04]) == pytest.approx([0.04] * 3, abs=ATOL)
    # Holm's step-down max matters here: 3(0.01), 2(0.02), 1(0.5) -> 0.03, 0.04, 0.5
    assert holm([0.5, 0.01, 0.02]) == pytest.approx([0.5, 0.03, 0.04], abs=ATOL)
    # capped at 1; one test: unchanged
    assert holm([0.4, 0.6]) == pytest.approx([0.8, 0.8], abs=ATOL)
    assert benjamini_hochberg([0.9, 0.7]) == pytest.approx([0.9, 0.9], abs=ATOL)
    assert holm([0.7, 0.9, 0.8]) == [1.0, 1.0, 1.0]
    for fn in (holm, benjamini_hochberg):
        assert fn([0.03]) == [0.03] and fn([]) == []
    assert adjust_p_values(P4, "none") == P4
    assert sorted(CORRECTIONS) == ["bh", "holm", "none"]


def test_adjusted_p_values_are_monotone_bounded_and_ordered():
    """p <= BH <= Holm <= min(1, m p); adjusted p keep the raw p's order; ties stay tied."""
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 5, 8, 13):
        for _ in range(50):
            p = rng.uniform(0, 0.2, m).tolist()
            if m > 2:
                p[1] = p[0]  # a tie
            h, b = holm(p), benjamini_hochberg(p)
            for i in range(m):
                assert p[i] - ATOL <= b[i] <= h[i] + ATOL
                assert h[i] <= min(1.0, m * p[i]) + ATOL
            for i in range(m):
                for j in range(m):
                    if p[i] <= p[j]:
                        assert h[i] <= h[j] + ATOL and b[i] <= b[j] + ATOL
            if m > 2:
                assert h[0] == h[1] and b[0] == b[1]


def test_adjusted_decisions_equal_the_classical_procedures():
    """Holm (step-down) and BH (step-up) as textbooks state them reject exactly the tests whose
    adjusted p is <= α."""
    rng = np.random.default_rng(1)
    alpha = 0.05
    for _ in range(300):
        m = int(rng.integers(1, 9))
        p = (rng.uniform(0, 0.08, m) ** rng.uniform(0.5, 2)).tolist()
        order = sorted(range(m), key=lambda k: p[k])
        holm_rej = set()
        for rank, i in enumerate(order):  # stop at the first p_(j) > α / (m - j + 1)
            if p[i] > alpha / (m - rank):
                break
            holm_rej.add(i)
        k = max((r + 1 for r, i in enumerate(order) if p[i] <= (r + 1) * alpha / m), default=0)
        bh_rej = set(order[:k])  # the largest k with p_(k) <= k α / m, and all below it
        assert {i for i, a in enumerate(holm(p)) if a <= alpha} == holm_rej
        assert {i for i, a in enumerate(benjamini_hochberg(p)) if a <= alpha} == bh_rej


def test_bad_p_values_and_unknown_corrections_fail():
    with pytest.raises(ValueError, match="p-values must be in"):
        holm([0.1, 1.5])
    with pytest.raises(ValueError, match="p-values must be in"):
        benjamini_hochberg([float("nan")])
    with pytest.raises(ValueError, match="unknown multiplicity correction 'bonf'; valid"):
        adjust_p_values([0.1], "bonf")


def test_correct_decides_on_the_adjusted_p_and_keeps_the_raw_p():
    # a round's three tests: raw p = 2126/184756 (2/10 vs 8/10), 5291/184756 (1/10 vs 6/10:
    # [C(7,0)C(13,10) + C(7,1)C(13,9)] / C(20,10) = (286 + 5005) / 184756), and 5/10 vs 5/10
    raw = [one_sided_test(2, 10, 8, 10), one_sided_test(1, 10, 6, 10), one_sided_test(5, 10, 5, 10)]
    assert [r.accepted for r in raw] == [True, True, False]
    assert raw[0].p_adjusted == raw[0].p_value and raw[0].correction == "none"
    assert raw[0].decided_by == "p_value" and raw[0].n_tests == 1
    p = [r.p_value for r in raw]
    assert p[:2] == pytest.approx([2126 / 184756, 5291 / 184756], abs=ATOL)
    h = correct(raw, "holm")
    assert [x.p_value for x in h] == p  # raw p kept
    want = [3 * p[0], 2 * p[1], max(2 * p[1], p[2])]
    assert [x.p_adjusted for x in h] == pytest.approx(want, abs=ATOL)
    assert [x.accepted for x in h] == [True, False, False]  # 3 p[0] = 0.035, 2 p[1] = 0.057
    assert all(x.correction == "holm" and x.n_tests == 3 for x in h)
    assert h[0].decided_by == "p_adjusted" and decide(h[1]) == "refuted"
    b = correct(raw, "bh")
    assert [x.p_adjusted for x in b] == pytest.approx([3 * p[0], 1.5 * p[1], p[2]], abs=ATOL)
    assert [x.accepted for x in b] == [True, True, False]  # 1.5 p[1] = 0.043 <= 0.05
    n = correct(raw, "none")
    assert [x.accepted for x in n] == [r.accepted for r in raw]
    assert [x.p_adjusted for x in n] == p and n[0].decided_by == "p_value"
    assert correct([], "holm") == []
    d = h[1].as_dict()
    assert (d["p_adjusted"], d["correction"], d["n_tests"]) == (2 * p[1], "holm", 3)
    with pytest.raises(ValueError, match="share one alpha"):
        correct([raw[0], one_sided_test(2, 10, 8, 10, alpha=0.1)], "holm")


def test_round_refutations_count_the_rounds_tests_per_critic():
    store = MemoryStore(":memory:")
    try:
        a = store.add_diagnosis(
            round=0, factor="spatial", phase="grasp", cause="mug too far left", critic="offline"
        ).mode_id
        store.add_diagnosis(
            round=0, factor="spatial", phase="grasp", cause="mug too far left", critic="vlm"
        )
        b = store.add_diagnosis(
            round=0, factor="attribute", phase="grasp", cause="object_too_wide", critic="vlm"
        ).mode_id
        got = round_refutations(store, [(a, True), (b, False)], "offline")
        assert got == {
            "offline": CriticRefutation("offline", 1, 0),
            "vlm": CriticRefutation("vlm", 1, 1),
        }
        assert round_refutations(store, [], "offline") == {}
        assert round_refutations(store, [(999, False)], "offline") == {
            "offline": CriticRefutation("offline", 0, 1)
        }
    finally:
        store.close()
