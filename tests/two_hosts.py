"""Two hosts of a run simulated in one process: each host runs a split computation until its
all-gather, where its share is captured; the tests then run every host again with a gather
that returns all the captured shares (what the real all-gather would)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Captured(Exception):
    pass


def shares(
    call: Callable[[tuple[int, int, Callable]], Any],
    hosts: int = 2,
    wire: Callable[[Any], Any] = lambda v: v,
) -> list:
    """Each host's share: `call(split)` with split = (host, hosts, gather), stopped at the gather
    (which must come); `wire` is what the value goes through between hosts (e.g. pickling)."""
    out: list = [None] * hosts
    for h in range(hosts):

        def gather(value, h=h):
            out[h] = wire(value)
            raise Captured

        try:
            call((h, hosts, gather))
        except Captured:
            continue
        raise AssertionError(f"host {h} never reached its all-gather")
    return out
