"""Evaluation suites (training layouts, held-out layouts / instances / categories) that report
success with a standard error; the loop reuses them as its evaluation suites."""

from coda.eval.suites import (
    SUITES,
    Suite,
    SuiteResult,
    build_bucket,
    build_buckets,
    evaluate,
    evaluate_all,
    heldout_category_programs,
    heldout_instance_programs,
    heldout_seeds,
    make_suites,
    planner_agent,
    policy_agent,
    pooled,
    program_objects,
    random_agent,
    split_map,
)

__all__ = [
    "SUITES",
    "Suite",
    "SuiteResult",
    "build_bucket",
    "build_buckets",
    "evaluate",
    "evaluate_all",
    "heldout_category_programs",
    "heldout_instance_programs",
    "heldout_seeds",
    "make_suites",
    "planner_agent",
    "policy_agent",
    "pooled",
    "program_objects",
    "random_agent",
    "split_map",
]
