"""Paired method-minus-baseline comparisons of a study (`coda.study.paired`)."""

import math

import numpy as np
import pytest
from scipy import stats

from coda.study.paired import holm, ood_average, paired_differences, paired_family


def test_ood_average_is_the_mean_of_the_held_out_suites_rates():
    suites = {
        "id": {"n": 10, "successes": 9},
        "ood_layouts": {"n": 10, "successes": 5},
        "ood_tasks": {"n": 40, "successes": 4},
    }
    assert ood_average(suites) == pytest.approx((0.5 + 0.1) / 2, abs=1e-12)  # not 9/50 pooled
    assert math.isnan(ood_average({"id": {"n": 4, "successes": 1}}))


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06], abs=1e-12)
    got = holm([0.2, math.nan, 0.01])
    assert got[0] == pytest.approx(0.2, abs=1e-12) and math.isnan(got[1])
    assert got[2] == pytest.approx(0.02, abs=1e-12)


def test_paired_differences_use_shared_seeds_and_a_widened_t_interval():
    values = {
        "coda": {0: 0.30, 1: 0.25, 2: 0.40, 3: 0.35, 4: 0.20},
        "sft": {0: 0.10, 1: 0.12, 2: 0.15, 3: 0.18, 4: 0.05},
        "domain_randomization": {0: 0.28, 1: 0.27, 2: 0.41, 4: 0.22},  # seed 3 missing
    }
    got = paired_differences(values, "coda", ["sft", "domain_randomization"])
    d = np.array([0.20, 0.13, 0.25, 0.17, 0.15])
    r = got["sft"]
    assert r["seeds"] == [0, 1, 2, 3, 4] and r["n"] == 5
    assert r["mean"] == pytest.approx(d.mean(), abs=1e-12)
    se = d.std(ddof=1) / np.sqrt(5)
    assert r["se"] == pytest.approx(se, abs=1e-12)
    q = stats.t.ppf(1 - 0.05 / 4, 4)  # Bonferroni over 2 baselines
    assert r["ci"] == pytest.approx([d.mean() - q * se, d.mean() + q * se], abs=1e-12)
    assert r["p"] == pytest.approx(stats.ttest_rel(d + 0.1, np.full(5, 0.1)).pvalue, abs=1e-9)
    assert r["excludes_zero"] and r["ci"][0] > 0
    dr = got["domain_randomization"]
    assert dr["seeds"] == [0, 1, 2, 4] and not dr["excludes_zero"]  # -0.01 ± a lot
    assert dr["p_holm"] >= dr["p"] and r["p_holm"] == pytest.approx(2 * r["p"], abs=1e-12)
    one = paired_differences({"coda": {0: 0.3}, "sft": {0: 0.1}}, "coda", ["sft"])["sft"]
    assert one["n"] == 1 and math.isnan(one["se"]) and not one["excludes_zero"]


def test_a_registered_family_widens_for_every_metric_and_pair_and_holm_adjusts_over_all():
    """Two metrics x two pairs = a family of 4: the CI uses t at 1 - α/8 and the p-values are
    Holm-adjusted over all four (the LIBERO-PRO registration's family)."""
    swap = {
        "coda": {0: 0.3, 1: 0.4, 2: 0.35},
        "sft": {0: 0.1, 1: 0.2, 2: 0.1},
        "dr": {0: 0.3, 1: 0.38, 2: 0.36},
    }
    tasks = {
        "coda": {0: 0.1, 1: 0.1, 2: 0.2},
        "sft": {0: 0.0, 1: 0.1, 2: 0.1},
        "dr": {0: 0.1, 1: 0.2, 2: 0.1},
    }
    got = paired_family({"ood_swap": swap, "ood_tasks": tasks}, [("coda", "sft"), ("coda", "dr")])
    assert list(got) == [
        "ood_swap: coda − sft", "ood_swap: coda − dr", "ood_tasks: coda − sft", "ood_tasks: coda − dr",
    ]  # fmt: skip
    r = got["ood_swap: coda − sft"]
    d = np.array([0.2, 0.2, 0.25])
    se = d.std(ddof=1) / np.sqrt(3)
    q = stats.t.ppf(1 - 0.05 / 8, 2)
    np.testing.assert_allclose(r["ci"], [d.mean() - q * se, d.mean() + q * se], atol=1e-12)
    assert r["p"] == pytest.approx(2 * stats.t.sf(d.mean() / se, 2), abs=1e-12)
    ps = [got[k]["p"] for k in got]
    assert [got[k]["p_holm"] for k in got] == pytest.approx(holm(ps), abs=1e-12)
    assert got["ood_tasks: coda − dr"]["seeds"] == [0, 1, 2]


def test_the_same_difference_in_every_seed_is_not_a_test():
    """Three seeds that each differ by exactly one episode in 100 (the float subtraction
    leaves an s.e. of ~4e-18) have no spread to scale a t statistic by: p is NaN, the row is
    marked degenerate and nothing is rejected; equal arms give p = 1."""
    values = {"a": {0: 0.05, 1: 0.06, 2: 0.04}, "b": {0: 0.06, 1: 0.07, 2: 0.05}}
    row = paired_differences(values, "a", ["b"])["b"]
    assert row["se"] < 1e-12 and row["mean"] == pytest.approx(-0.01, abs=1e-9)
    assert math.isnan(row["p"]) and row["degenerate"] and not row["excludes_zero"]
    fam = paired_family({"m": values}, [("a", "b")])["m: a − b"]
    assert math.isnan(fam["p"]) and math.isnan(fam["p_holm"]) and not fam["excludes_zero"]
    same = paired_differences({"a": values["a"], "b": dict(values["a"])}, "a", ["b"])["b"]
    assert same["p"] == 1.0 and not same["excludes_zero"]
