"""LIBERO's protocol on the Panda with the batches spread over worker processes
(`--config.panda.workers`): the same episodes, step for step, as one process; and an
interrupted evaluation, run again, going on after its last finished batch (`units.jsonl`)."""

import pytest
from libero_configs import libero_config as _config

from coda.libero import evaluate as E
from coda.libero import evaluate_panda as EP
from coda.libero import unit_store as US

pytestmark = pytest.mark.usefixtures("libero_data")


def test_workers_run_the_same_episodes_as_one_process(tmp_path, gl):
    """libero_spatial task 0, states 0-2 in batches of 2 (two units), the planner until its
    first successes (~90 steps): per-episode outcomes and step counts identical, the GIF of
    the first episode written by the worker that ran it."""
    fields = {"robot": "panda", "policy": "planner", "tasks": "0", "init_states": 3,
              "panda.batch": 2, "panda.max_steps": 110, "panda.wait_steps": 10, "gifs": 1}  # fmt: skip
    one = EP.evaluate(_config(**fields), tmp_path / "one")
    two = EP.evaluate(_config(**fields, **{"panda.workers": 2}), tmp_path / "two")
    assert one["workers"] == 1 and two["workers"] == 2
    assert [e["init"] for e in two["per_episode"]] == [0, 1, 2]
    assert two["per_episode"] == one["per_episode"]
    assert one["successes"] >= 2  # the comparison covers episodes that end at their own step
    assert len({e["steps"] for e in one["per_episode"]}) >= 2
    assert two["per_task"][0]["successes"] == one["per_task"][0]["successes"]
    gifs = two["per_task"][0]["gifs"]
    assert gifs == one["per_task"][0]["gifs"] and len(gifs) == 1
    assert (tmp_path / "two" / gifs[0]).read_bytes() == (tmp_path / "one" / gifs[0]).read_bytes()


def test_worker_count_and_refusals():
    cfg = _config(**{"robot": "panda", "panda.workers": 0})
    assert 1 <= EP.worker_count(cfg, 1000) and EP.worker_count(cfg, 1) == 1
    assert EP.worker_count(_config(**{"panda.workers": 8}), 3) == 3
    bad = E.config_problems(_config(**{"robot": "panda", "panda.workers": -1}))
    assert bad == ["panda.workers=-1 must be an integer >= 0"]
    bad = E.config_problems(
        _config(**{"robot": "panda", "panda.workers": 2, "policy": "openpi:/nonexistent"})
    )
    assert any(b.startswith("panda.workers=2: an openpi checkpoint evaluates in one") for b in bad)


def test_an_interrupted_evaluation_goes_on_after_its_last_finished_unit(tmp_path, monkeypatch):
    """3 units (batch 1); the run dies in its third; run again it runs that one alone and its
    results are the uninterrupted run's. Another config in that folder is refused; a line cut
    short by a crash is dropped."""
    fields = {"robot": "panda", "policy": "random", "tasks": "0", "init_states": 3,
              "panda.batch": 1, "panda.max_steps": 12, "panda.wait_steps": 2, "gifs": 0}  # fmt: skip
    whole = EP.evaluate(_config(**fields), tmp_path / "whole")
    assert whole["resumed_units"] == 0
    real, calls = EP.run_unit, []

    def dies_in_the_third(*args):
        calls.append(args[1])
        if len(calls) == 3:
            raise RuntimeError("killed")
        return real(*args)

    monkeypatch.setattr(EP, "run_unit", dies_in_the_third)
    with pytest.raises(RuntimeError, match="killed"):
        EP.evaluate(_config(**fields), tmp_path / "cut")
    lines = (tmp_path / "cut" / "units.jsonl").read_text().splitlines()
    assert len(lines) == 1 + 2  # the header and the two finished units
    monkeypatch.setattr(EP, "run_unit", real)
    again = EP.evaluate(_config(**fields), tmp_path / "cut")
    assert again["resumed_units"] == 2 and again["per_episode"] == whole["per_episode"]
    assert again["per_task"][0]["successes"] == whole["per_task"][0]["successes"]

    with open(tmp_path / "cut" / "units.jsonl", "a") as f:  # a crash in the middle of a line
        f.write('{"key": [0, 2, [2]], "resu')
    store = US.UnitStore(tmp_path / "cut", _config(**fields))
    assert len(store.load()) == 3
    assert (tmp_path / "cut" / "units.jsonl").read_text().endswith("}\n")
    with pytest.raises(US.OtherEvaluation, match=r"differs in init_states, panda\.max_steps;"):
        EP.evaluate(_config(**{**fields, "init_states": 2, "panda.max_steps": 9}), tmp_path / "cut")
    # what changes no outcome: more workers, no GIFs
    EP.evaluate(_config(**{**fields, "panda.workers": 2, "gifs": 1}), tmp_path / "cut")
