"""The five LIBERO suites (task lists in LIBERO's own order: task id = position) and their
episode step caps."""

from __future__ import annotations

from coda.libero import data

SUITES = data.SUITES
# LIBERO's evaluation step caps per suite (control steps at 20 Hz)
STEP_CAPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}


def _check(suite: str) -> None:
    if suite not in SUITES:
        raise KeyError(f"unknown LIBERO suite {suite!r}; suites: {list(SUITES)}")


def tasks(suite: str) -> list[str]:
    """Task names of a suite, in LIBERO's order."""
    _check(suite)
    return list(data.suite_task_map()[suite])


def step_cap(suite: str) -> int:
    _check(suite)
    return STEP_CAPS[suite]
