"""A process may live long (runs in turn, a study, the suite in one process): what a run compiles
is released when it ends, caches are bounded, and nearing vm.max_map_count warns (coda.lifetime).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import pytest

from coda import lifetime


def test_run_cache_is_bounded_lru_and_registered():
    c = lifetime.RunCache("test.lru", maxsize=2)
    try:
        assert "test.lru" in lifetime.caches()
        built = []

        def make(k):
            return lambda: built.append(k) or k * 10

        assert c.get("a", make(1)) == 10 and c.get("b", make(2)) == 20
        assert c.get("a", make(99)) == 10  # hit: not rebuilt, now most recent
        c.get("c", make(3))  # evicts "b", the least recently used
        assert built == [1, 2, 3] and "a" in c and "c" in c and "b" not in c
        assert len(c) == 2 and (c.hits, c.misses) == (1, 3)
        with pytest.raises(ValueError, match="already registered"):
            lifetime.RunCache("test.lru", maxsize=1)
        with pytest.raises(ValueError, match="maxsize must be >= 1"):
            lifetime.RunCache("test.zero", maxsize=0)
        lifetime.release(jax_caches=False)
        assert len(c) == 0
    finally:
        lifetime._REGISTRY.pop("test.lru", None)


def test_release_frees_the_mappings_of_cached_executables():
    """Executables kept alive only by a registered cache are unmapped by `release`."""
    if lifetime.map_count() is None:
        pytest.skip("no /proc/self/maps on this platform")
    c = lifetime.RunCache("test.exes", maxsize=64)
    try:
        x = jnp.ones((8, 8))
        x.block_until_ready()
        start = lifetime.map_count()
        for i in range(20):
            fn = c.get(i, lambda i=i: jax.jit(lambda a: jnp.tanh(a @ a + i).sum()))
            fn(x).block_until_ready()
        del fn
        grown = lifetime.map_count() - start  # the executables' code, mapped
        assert grown >= 20, grown  # XLA:CPU maps each executable's code (3-18 mappings)
        out = lifetime.release(jax_caches=False, measure=True)
        assert out["freed"]["test.exes"] >= 0.9 * grown, (grown, out)
        assert lifetime.map_count() <= start + 0.1 * grown
        assert out["entries"]["test.exes"] == 20
    finally:
        lifetime._REGISTRY.pop("test.exes", None)


def test_check_warns_once_near_the_limit_and_rearms(tmp_path, monkeypatch, caplog):
    if lifetime.map_count() is None:
        pytest.skip("no /proc/self/maps on this platform")
    limit = tmp_path / "max_map_count"
    monkeypatch.setattr(lifetime, "_MAX_MAPS", str(limit))
    lifetime._warned.clear()
    now = lifetime.map_count()
    limit.write_text(str(int(now / 0.9)))  # ~90 % used
    with caplog.at_level(logging.WARNING, logger="coda.lifetime"):
        s = lifetime.check("round 7")
        lifetime.check("round 8")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    msg = warnings[0].getMessage()
    assert "round 7" in msg and "vm.max_map_count" in msg and "release" in msg
    assert "\n" not in msg and s.map_fraction > 0.8
    caplog.clear()
    limit.write_text(str(now * 10))  # back below the line: the warning re-arms
    with caplog.at_level(logging.WARNING, logger="coda.lifetime"):
        lifetime.check("round 9")
        limit.write_text(str(int(now / 0.9)))
        lifetime.check("round 10")
    assert [r.getMessage()[:8] for r in caplog.records] == ["round 10"]
    lifetime._warned.clear()


def test_stats_and_compile_log_see_a_recompile():
    lifetime.count_compiles()
    before = lifetime.executables()["executables"]
    x = jnp.arange(5.0)
    with lifetime.CompileLog() as log:
        for _ in range(2):  # a jitted function rebuilt per call: the same shapes compile twice
            jax.jit(lambda a: a * 3.0 + 1.0)(x).block_until_ready()
        jax.jit(lambda a: a * 3.0 + 1.0)(jnp.arange(6.0)).block_until_ready()
    assert lifetime.executables()["executables"] >= before + 3
    dup = log.duplicates()
    assert len(dup) == 1 and list(dup.values()) == [2]
    ((name, sig),) = dup
    assert "lambda" in name and "5" in sig
    s = lifetime.stats()
    assert s.peak_rss_mb > 0 and "XLA executables" in s.line()


# 220 s on a fresh clone (2-core AMD EPYC, cold compile cache): slow, run before resolving
@pytest.mark.slow
def test_three_smoke_runs_in_one_process_keep_mappings_flat(tmp_path):
    """The issue's reproduction: loop runs of three strategies in turn in one process. Before
    `coda.lifetime`, every run left its executables mapped (431 -> 8.4k -> 14.7k -> 18.7k
    mappings); now each run releases what it compiled, so the third run ends where the first
    did, and rounds write their numbers to process.jsonl."""
    import json

    from coda import loop
    from configs import coda as cc

    if lifetime.map_count() is None:
        pytest.skip("no /proc/self/maps on this platform")
    after = []
    for i, strategy in enumerate(("coda", "sft", "domain_randomization")):
        cfg = cc.get_config("smoke", strategy=strategy)
        cfg.loop.rounds = 1
        wd = tmp_path / f"run{i}"
        loop.run(cfg, str(wd))
        after.append(lifetime.map_count())
        rows = [json.loads(line) for line in (wd / "process.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rows] == [0, 1]
        # while the run lived it held far more than it leaves behind
        assert rows[-1]["maps"] > after[-1] + 1000, (rows[-1], after)
    assert abs(after[2] - after[0]) <= max(300, 0.05 * after[0]), after
