"""Step 4's control experiments (`coda.loop.steps.critique.validate`): all of a round's
targeted / control experiments run first, in candidate order with the keys fold_in(k_val, i),
then they are decided together with `loop.validation_correction` over the round's p-values.
Rollouts are faked (fixed success arrays), so no physics runs."""

import importlib.util
import json
import os
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from coda import runconfig
from coda.engine.programs import Program, load_programs
from coda.loop.records import scalars
from coda.loop.steps import critique
from coda.memory import MemoryStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIDER = {"factor": "attributes", "edit": "scale_width", "role": "target", "range": [0.8, 1.22]}
# targeted / control successes out of 10 per candidate mode, in candidate order. Raw one-sided
# Fisher p: 2126/184756 = 0.0115, 5291/184756 = 0.0286, 0.67 (tests/test_engine_validate.py).
# Holm over the three: 0.0345, 0.0573, 0.67 -> only the first validates; BH: 0.0345, 0.0430,
# 0.67 -> the first two; none (raw p): the first two.
COUNTS = [(2, 8), (1, 6), (5, 5)]
N = 10


def _config(correction: str):
    spec = importlib.util.spec_from_file_location("coda_cfg", os.path.join(ROOT, "configs/coda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke")
    cfg.loop.max_validations = 3
    cfg.loop.validation_correction = correction
    return cfg


def _run(monkeypatch, correction: str):
    memory = MemoryStore(":memory:")
    diagnoses = [
        ("attribute", "grasp", "object_too_wide", "offline"),
        ("spatial", "grasp", "collision_with_distractor", "offline"),
        ("attribute", "place", "object_too_slippery", "vlm"),
    ]
    ids = [
        memory.add_diagnosis(round=0, factor=f, phase=p, cause=c, critic=who).mode_id
        for f, p, c, who in diagnoses
    ]
    assert len(set(ids)) == 3
    calls, keys = [], []

    def batches(svc, m, parents, seed):
        calls.append(("batches", m.id, seed))
        j = ids.index(m.id)
        side = lambda kind: [  # noqa: E731
            SimpleNamespace(compiled=(j, kind, i), record=lambda: {"kind": kind}) for i in range(N)
        ]
        prog = Program.from_dict(WIDER)
        return SimpleNamespace(
            targeted=side("targeted"), control=side("control"), program=prog,
            control_factor="layout", pairing="nested",
        )  # fmt: skip

    def success_of(backend, variants, agents, key, nc, size, split):
        j, kind, _ = variants[0]
        calls.append(("rollout", ids[j], kind))
        keys.append(np.asarray(jax.random.key_data(key)).tolist())
        k = COUNTS[j][0 if kind == "targeted" else 1]
        return np.arange(N) < k, 7

    monkeypatch.setattr(critique, "_batches", batches)
    monkeypatch.setattr(critique.collect, "success_of", success_of)
    cfg = _config(correction)
    runconfig.validate(cfg)
    svc = SimpleNamespace(config=cfg, memory=memory, backend=None, agents=None)
    state = SimpleNamespace(mode_parents={i: [] for i in ids})
    k_val = jax.random.PRNGKey(5)
    out = critique.validate(svc, state, 2, k_val)
    # every experiment ran before any decision, in candidate order, with the same keys as ever
    assert calls == [
        x
        for i, m in enumerate(ids)
        for x in (("batches", m, 2000 + i), ("rollout", m, "targeted"), ("rollout", m, "control"))
    ]
    want = []
    for i in range(3):
        for k in jax.random.split(jax.random.fold_in(k_val, i)):
            want.append(np.asarray(jax.random.key_data(k)).tolist())
    assert keys == want
    assert out.spend.env_steps == 6 * 7
    return memory, ids, out.row


@pytest.mark.parametrize(
    "correction, validated",
    [("holm", [True, False, False]), ("bh", [True, True, False]), ("none", [True, True, False])],
)
def test_validate_decides_the_rounds_tests_with_the_correction(
    monkeypatch, tmp_path, correction, validated
):
    memory, ids, row = _run(monkeypatch, correction)
    try:
        status = [memory.get_mode(i).status for i in ids]
        assert status == ["validated" if v else "refuted" for v in validated]
        pairs = list(zip(ids, validated, strict=True))
        assert [t["mode"] for t in row["validated"]] == [i for i, v in pairs if v]
        assert [t["mode"] for t in row["refuted"]] == [i for i, v in pairs if not v]
        tests = {t["mode"]: t for t in row["validated"] + row["refuted"]}
        raw = [2126 / 184756, 5291 / 184756]
        adj = {
            "holm": [3 * raw[0], 2 * raw[1]],
            "bh": [3 * raw[0], 1.5 * raw[1]],
            "none": raw,
        }[correction]
        for i, (t, c) in enumerate(COUNTS):
            x = tests[ids[i]]
            assert (x["targeted"], x["control"], x["n"]) == (t, c, N)
            assert x["correction"] == correction and x["n_tests"] == 3 and x["alpha"] == 0.05
            assert x["decided_by"] == ("p_value" if correction == "none" else "p_adjusted")
            if i < 2:
                assert x["p_value"] == pytest.approx(raw[i], abs=1e-12)
                assert x["p_adjusted"] == pytest.approx(adj[i], abs=1e-12)
        # memory's record of each decision carries raw and adjusted p and the method
        memory.export_jsonl(tmp_path / "memory.jsonl")
        with open(tmp_path / "memory.jsonl", encoding="utf-8") as f:
            recs = [json.loads(line) for line in f][1:]
        events = {
            r["row"]["mode_id"]: json.loads(r["row"]["payload"])
            for r in recs
            if r["table"] == "mode_events" and r["row"]["kind"] == "status"
        }
        for i in ids:
            reason = json.loads(events[i]["reason"])["validation"]
            assert reason["p_value"] == tests[i]["p_value"]
            assert reason["p_adjusted"] == tests[i]["p_adjusted"]
            assert reason["correction"] == correction
        # Ω only for the validated modes
        assert [bool(load_programs(memory, mode_id=i)) for i in ids] == validated
        # the round's own tests per critic (modes 1, 2 diagnosed by offline, mode 3 by vlm)
        n_off = sum(validated[:2])
        assert row["round_refutations"] == {
            "offline": {"validated": n_off, "refuted": 2 - n_off, "rate": (2 - n_off) / 2},
            "vlm": {"validated": 0, "refuted": 1, "rate": 1.0},
        }
        flat = scalars({"round": 2, "critique": row})  # metrics.jsonl / TensorBoard
        assert (flat["round_validated/offline"], flat["round_refuted/vlm"]) == (n_off, 1)
    finally:
        memory.close()


def test_a_round_without_tests_adds_no_refutation_counts(monkeypatch):
    monkeypatch.setattr(critique, "_batches", lambda *a: None)
    memory = MemoryStore(":memory:")
    try:
        m = memory.add_diagnosis(
            round=0, factor="attribute", phase="grasp", cause="object_too_wide", critic="offline"
        ).mode_id
        svc = SimpleNamespace(config=_config("holm"), memory=memory, backend=None, agents=None)
        out = critique.validate(svc, SimpleNamespace(mode_parents={m: []}), 1, jax.random.key(0))
        assert out.row == {"validated": [], "refuted": [], "reopened": []}
        assert memory.get_mode(m).status == "candidate"
    finally:
        memory.close()


def test_validation_correction_is_checked_before_the_run():
    cfg = _config("holm")
    assert _config("holm").loop.validation_correction == "holm"
    cfg.loop.validation_correction = "bonferroni"
    with pytest.raises(runconfig.ConfigError, match="validation_correction='bonferroni'"):
        runconfig.validate(cfg)
    assert runconfig.VALIDATION_CORRECTIONS == ("holm", "bh", "none")
    assert runconfig.with_added_defaults({"loop": {}})["loop"]["validation_correction"] == "none"


def test_the_loop_makes_recreate_pairs_by_default(monkeypatch):
    """`loop.validation_pairing` (default "recreate" since issue 28: targeted = the failures'
    neighbourhood, control = the diagnosed factor redrawn; was "nested"), `validation_rest` and
    `loop.validation_control` reach `make_validation_batches` with the mode's failures as the
    evidence; typos and a recreate pairing with a matched control fail before the run."""
    seen = []

    def batches(mode, bases, n, seed, **kw):
        seen.append((n, seed, kw["control"], kw["pairing"], kw["rest"], kw["evidence"]))
        raise critique.GenerationError("none verified")

    from coda.engine import kinds

    monkeypatch.setattr(kinds, "make_validation_batches", batches)  # our families' kind's
    monkeypatch.setattr(critique, "validation_bases", lambda svc, parents: [parents])
    cfg = _config("holm")
    assert cfg.loop.validation_pairing == "recreate" and cfg.loop.validation_rest == "keep"
    svc = SimpleNamespace(config=cfg, memory=None, engine=None)
    parents = [SimpleNamespace(task={"family": "pick_place"})]
    assert critique._batches(svc, SimpleNamespace(id=1), parents, 7) is None
    cfg.loop.validation_pairing = "nested"
    critique._batches(svc, SimpleNamespace(id=1), parents, 8)
    assert critique._batches(svc, SimpleNamespace(id=1), [], 9) is None  # no parent: no test
    n = cfg.loop.validate_n
    assert seen == [
        (n, 7, "outside", "recreate", "keep", parents),
        (n, 8, "outside", "nested", "keep", parents),
    ]
    cfg.loop.validation_pairing = "twins"
    with pytest.raises(runconfig.ConfigError, match="validation_pairing='twins'"):
        runconfig.validate(cfg)
    cfg.loop.validation_pairing, cfg.loop.validation_control = "recreate", "matched"
    with pytest.raises(runconfig.ConfigError, match="does not go with validation_pairing"):
        runconfig.validate(cfg)
    added = runconfig.with_added_defaults({"loop": {}})["loop"]
    assert (added["validation_pairing"], added["validation_rest"]) == ("sibling", "keep")
