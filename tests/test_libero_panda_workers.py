"""LIBERO's protocol on the Panda with the batches spread over worker processes
(`--config.panda.workers`): the same episodes, step for step, as one process."""

import importlib.util
import pathlib

import pytest

from coda.libero import evaluate as E
from coda.libero import evaluate_panda as EP

ROOT = pathlib.Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.usefixtures("libero_data")


def _config(**fields):
    spec = importlib.util.spec_from_file_location("libero_config", ROOT / "configs" / "libero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    for k, v in fields.items():
        node = cfg
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return cfg


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
