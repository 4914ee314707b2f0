"""Allocation: hand-computed UCB shares, ε / replay fractions, pools, band actions, the adapter."""

from __future__ import annotations

import math

import pytest

from coda.engine.allocate import (
    Allocation,
    ModeStats,
    allocate,
    band_actions,
    largest_remainder,
    mode_stats,
    ucb_scores,
)
from coda.memory import MemoryStore

ATOL = 1e-12  # host float64 arithmetic

LN4 = math.log(4.0)  # 1.3862943611198906: ln(T + 1) with T = 3 allocations so far


def V(mode_id: int, p: float | None, **kw) -> ModeStats:
    return ModeStats(mode_id, "validated", p, **kw)


def test_largest_remainder_hand_cases():
    assert largest_remainder([1.0, 1.0, 1.0], 10) == [4, 3, 3]  # tie: the earlier entry
    assert largest_remainder([0.29, 0.71], 100) == [29, 71]  # 0.29·100 is not 28.99…
    assert largest_remainder([0.1, 0.2, 0.7], 7) == [1, 1, 5]  # .7 1.4 4.9 -> +1 to .9, .7
    assert largest_remainder([0.0, 0.0], 3) == [2, 1]  # all-zero weights: equal split
    assert largest_remainder([], 0) == []
    assert largest_remainder([2.0, 1.0], 0) == [0, 0]
    with pytest.raises(ValueError, match="cannot split 3 over no weights"):
        largest_remainder([], 3)
    with pytest.raises(ValueError, match="weights must be finite and >= 0"):
        largest_remainder([1.0, -1.0], 3)


def test_hardest_unexplored_validated_mode_gets_largest_share_and_others_nothing():
    modes = [
        V(1, 0.2),  # hardness 0.8, never allocated
        V(2, 0.5),  # hardness 0.5, never allocated
        V(3, 0.2, times_allocated=3),  # as hard as 1 but explored
        ModeStats(4, "refuted", 0.0),  # hardest of all, but refuted
        ModeStats(5, "candidate", None),
        ModeStats(6, "retired", 0.1),
    ]
    a = allocate(modes, 20, round=0, epsilon=0.0, replay_fraction=0.0, c_explore=1.0)
    # T = 0 + 0 + 3 = 3; bonus_j = sqrt(ln 4 / (n_j + 1))
    s1 = 0.8 + math.sqrt(LN4)  # 1.9774100225
    s2 = 0.5 + math.sqrt(LN4)  # 1.6774100225
    s3 = 0.8 + math.sqrt(LN4 / 4)  # 1.3887050113
    assert a.scores == pytest.approx({1: s1, 2: s2, 3: s3}, abs=ATOL)
    assert s1 == pytest.approx(1.9774100225154747, abs=ATOL)
    # quotas 20·s/Σs = 7.841, 6.652, 5.507 -> floors 7, 6, 5 (18); the 2 left go to .841, .652
    assert dict(a.ucb) == {1: 8, 2: 7, 3: 5}
    assert a.per_mode() == {1: 8, 2: 7, 3: 5}
    assert 4 not in a.per_mode() and 5 not in a.per_mode() and 6 not in a.per_mode()
    assert a.n_novel == 0 and a.n_replay == 0 and a.budget == 20


def test_ucb_score_formula_with_weights_and_learning_progress():
    modes = [V(1, 0.2), V(2, 0.2, learning_progress=-0.3), V(3, 0.2, learning_progress=0.3)]
    # c = 0: score = w_h (1 - p̂) + w_lp |LP| = 0.8, 1.1, 1.1 (a regression counts like a gain)
    a = allocate(modes, 30, round=0, epsilon=0.0, replay_fraction=0.0, c_explore=0.0)
    assert a.scores == pytest.approx({1: 0.8, 2: 1.1, 3: 1.1}, abs=ATOL)
    assert dict(a.ucb) == {1: 8, 2: 11, 3: 11}  # 30 · (0.8, 1.1, 1.1) / 3.0
    s = ucb_scores(
        [V(1, 0.25, learning_progress=0.1, times_allocated=1), V(2, None, times_allocated=2)],
        c_explore=0.5,
        w_hardness=2.0,
        w_progress=3.0,
    )
    # T = 3: 2·0.75 + 3·0.1 + 0.5·sqrt(ln4 / 2) and 2·1.0 (never evaluated) + 0.5·sqrt(ln4 / 3)
    assert s[1] == pytest.approx(1.5 + 0.3 + 0.5 * math.sqrt(LN4 / 2), abs=ATOL)
    assert s[2] == pytest.approx(2.0 + 0.5 * math.sqrt(LN4 / 3), abs=ATOL)
    # nothing allocated yet: T = 0, ln 1 = 0, no bonus at all
    s0 = ucb_scores([V(1, 0.4)], c_explore=1.0, w_hardness=1.0, w_progress=1.0)
    assert s0[1] == pytest.approx(0.6, abs=ATOL)


def test_all_zero_scores_split_equally():
    modes = [V(1, 1.0), V(2, 1.0), V(3, 1.0)]  # solved, no LP, no exploration bonus
    a = allocate(modes, 7, 0, epsilon=0.0, replay_fraction=0.0, c_explore=0.0, band=(0.1, 1.0))
    assert a.scores == pytest.approx({1: 0.0, 2: 0.0, 3: 0.0}, abs=ATOL)
    assert dict(a.ucb) == {1: 3, 2: 2, 3: 2}


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        (100, (10, 20, 70)),  # exact: 0.1·100, 0.2·100, 0.7·100
        (10, (1, 2, 7)),
        (7, (1, 1, 5)),  # quotas 0.7, 1.4, 4.9 -> floors 0, 1, 4; +1 to .9 (UCB), .7 (novel)
        (0, (0, 0, 0)),
    ],
)
def test_epsilon_and_replay_fractions(budget, expected):
    modes = [V(1, 0.5), V(2, 0.3, times_allocated=2)]  # both in the band: in both pools
    a = allocate(modes, budget, 3, epsilon=0.1, replay_fraction=0.2)
    assert (a.n_novel, a.n_replay, a.n_ucb) == expected
    assert a.n_novel + a.n_replay + a.n_ucb == budget
    assert len(set(a.novel_seeds)) == a.n_novel  # distinct seeds


def test_empty_mode_list_gives_all_budget_to_novel_seeds():
    a = allocate([], 12, 0, epsilon=0.1, replay_fraction=0.2)
    assert a.n_novel == 12 and len(set(a.novel_seeds)) == 12
    assert dict(a.ucb) == {} and dict(a.replay) == {} and a.per_mode() == {}
    assert all(0 <= s < 2**31 - 1 for s in a.novel_seeds)
    # only undecided / refuted modes: the same
    b = allocate([ModeStats(1, "candidate"), ModeStats(2, "refuted", 0.0)], 12, 0)
    assert b.n_novel == 12 and b.per_mode() == {}


def test_pools_band_flags_and_redirected_shares():
    band = (0.2, 0.8)
    modes = [
        V(1, 0.1),  # below the band: too hard, UCB only, flagged
        V(2, 0.2),  # at lo: in the band, both pools
        V(3, 0.5),  # in the band
        V(4, 0.8),  # at hi: still in the band
        V(5, 0.9),  # above: mastered, replay only
        V(6, None),  # never evaluated: UCB only (hardness 1), not flagged
    ]
    a = allocate(modes, 40, 1, epsilon=0.1, replay_fraction=0.2, band=band)
    assert a.too_hard == (1,)
    assert a.mastered == (5,)
    assert sorted(a.ucb) == [1, 2, 3, 4, 6]
    assert sorted(a.replay) == [2, 3, 4, 5]
    assert (a.n_novel, a.n_replay, a.n_ucb) == (4, 8, 28)
    assert dict(a.replay) == {2: 2, 3: 2, 4: 2, 5: 2}  # 8 split equally over 4 modes
    c = allocate(modes, 40, 1, epsilon=0.1, replay_fraction=0.25, band=band)
    assert dict(c.replay) == {2: 3, 3: 3, 4: 2, 5: 2}  # 10 over 4: ties to the lower ids

    # every mode mastered: nothing to explore, so the UCB share goes to novel seeds
    m = allocate([V(1, 0.95), V(2, 1.0)], 10, 0, epsilon=0.1, replay_fraction=0.2, band=band)
    assert (m.n_novel, m.n_replay, m.n_ucb) == (8, 2, 0)
    assert dict(m.replay) == {1: 1, 2: 1} and m.mastered == (1, 2)

    # nothing evaluated yet: no replay pool, so the replay share goes to UCB
    u = allocate([V(1, None), V(2, None)], 10, 0, epsilon=0.1, replay_fraction=0.2, band=band)
    assert (u.n_novel, u.n_replay, u.n_ucb) == (1, 0, 9)
    assert dict(u.ucb) == {1: 5, 2: 4}  # equal scores: the tie goes to the lower id


def test_deterministic_given_inputs_and_seeded_novel_seeds():
    modes = [V(3, 0.4, times_allocated=1), V(1, 0.6), V(2, 0.05, learning_progress=0.2)]
    kw = dict(epsilon=0.25, replay_fraction=0.25, rng_seed=7)
    a = allocate(modes, 16, 2, **kw)
    assert a == allocate(list(reversed(modes)), 16, 2, **kw)  # input order does not matter
    b = allocate(modes, 16, 2, **{**kw, "rng_seed": 8})
    c = allocate(modes, 16, 3, **kw)
    assert a.novel_seeds != b.novel_seeds and a.novel_seeds != c.novel_seeds
    assert (dict(a.ucb), dict(a.replay)) == (dict(b.ucb), dict(b.replay))
    assert isinstance(a, Allocation) and a.n_novel == 4


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="duplicate mode ids in allocate\\(\\): \\[1\\]"):
        allocate([V(1, 0.5), V(1, 0.3)], 10, 0)
    with pytest.raises(ValueError, match="epsilon \\+ replay_fraction must be <= 1"):
        allocate([], 10, 0, epsilon=0.6, replay_fraction=0.5)
    with pytest.raises(ValueError, match="epsilon must be in \\[0, 1\\]"):
        allocate([], 10, 0, epsilon=-0.1)
    with pytest.raises(ValueError, match="budget must be an integer >= 0"):
        allocate([], -1, 0)
    with pytest.raises(ValueError, match="c_explore must be finite and >= 0"):
        allocate([], 10, 0, c_explore=-1.0)
    with pytest.raises(ValueError, match="band must satisfy 0 <= lo < hi <= 1"):
        allocate([], 10, 0, band=(0.9, 0.1))
    with pytest.raises(ValueError, match="band must be a pair"):
        band_actions([], band=(0.1,))
    with pytest.raises(ValueError, match="ModeStats\\(mode_id=4\\).status 'bogus' unknown"):
        ModeStats(4, "bogus")
    with pytest.raises(ValueError, match="ModeStats\\(mode_id=4\\).success_rate must be in"):
        ModeStats(4, "validated", 1.5)
    with pytest.raises(ValueError, match="ModeStats\\(mode_id=4\\).times_allocated must be"):
        ModeStats(4, "validated", 0.5, times_allocated=-1)


def test_band_actions_rule():
    band = (0.2, 0.8)
    modes = [
        V(1, 0.1),  # below the band, no Ω: keep (too hard, nothing to add yet)
        V(2, 0.1, has_program=True),  # regressed below the band: keep its Ω
        V(3, 0.2),  # entered the band from below, no Ω: add
        V(4, 0.8),  # at hi, no Ω: add
        V(5, 0.5, has_program=True),  # in the band with Ω: keep
        V(6, 0.9, has_program=True),  # mastered with Ω: retire
        V(7, 0.9),  # mastered, no Ω: keep
        V(8, None),  # never evaluated: keep
        ModeStats(9, "refuted", 0.5, has_program=True),  # not validated: retire its Ω
        ModeStats(10, "candidate", 0.5),  # not validated, no Ω: keep (never add)
    ]
    assert band_actions(modes, band) == [
        (1, "keep"),
        (2, "keep"),
        (3, "add"),
        (4, "add"),
        (5, "keep"),
        (6, "retire"),
        (7, "keep"),
        (8, "keep"),
        (9, "retire"),
        (10, "keep"),
    ]
    # idempotent: once the actions are applied, the rule asks for nothing more
    applied = [
        ModeStats(
            m.mode_id,
            m.status,
            m.success_rate,
            has_program=(a == "add" or m.has_program) and a != "retire",
        )
        for m, (_, a) in zip(modes, band_actions(modes, band), strict=True)
    ]
    assert all(a == "keep" for _, a in band_actions(applied, band))


def test_mode_stats_adapter_reads_memory_numbers(tmp_path):
    store = MemoryStore(tmp_path / "memory.db")
    try:
        a = store.add_diagnosis(round=0, factor="spatial", phase="grasp", cause="mug far left")
        fresh = mode_stats(store.get_mode(a.mode_id))
        assert fresh.success_rate is None and fresh.hardness == 1.0
        assert fresh.learning_progress == 0.0 and fresh.status == "candidate"
        store.record_mode_outcome(a.mode_id, round=1, n_success=3, n_trials=10)
        store.record_learning_progress(a.mode_id, round=1, before=0.2, after=0.5)
        store.set_mode_status(a.mode_id, "validated", round=1)
        s = mode_stats(store.get_mode(a.mode_id), times_allocated=4, has_program=True)
    finally:
        store.close()
    assert s.mode_id == a.mode_id and s.status == "validated"
    assert s.success_rate == pytest.approx(0.3, abs=ATOL)
    assert s.hardness == pytest.approx(0.7, abs=ATOL)
    assert s.learning_progress == pytest.approx(0.3, abs=ATOL)  # first LP: w_j = 0.5 - 0.2
    assert s.times_allocated == 4 and s.has_program
