"""The study runner (coda.study, launch.study, configs/table1.py) with a fake cell runner; one
slow test runs `configs/table1.py:smoke` for real."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import pytest

from coda import runconfig, study

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def table1(arg=None):
    path = os.path.join(ROOT, "configs", "table1.py")
    spec = importlib.util.spec_from_file_location("table1_cfg_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def fake_summary(ood, id_, accepted=10, tokens=0, env_steps=9000, wall=2.0):
    """A summary.json as coda.report writes it: (successes, n) of pooled OOD and of ID at the
    last round; round 0 carries other numbers, which the table must not read."""

    def suite(k, n):
        return {"suite": "x", "n": n, "successes": k, "rate": k / n, "se": 0.0}

    return {
        "rounds": 1,
        "stopped": "1 rounds done",
        "wall_seconds": wall,
        "costs": {
            "accepted_environments": accepted,
            "llm_tokens": tokens,
            "env_steps": env_steps,
            "sim_hours": env_steps * 0.004 / 3600,
        },
        "history": [
            {"round": 0, "suites": {"id": suite(0, 8)}, "ood": suite(0, 8)},
            {"round": 1, "update": {}},  # a round without evaluation: skipped
            {"round": 2, "suites": {"id": suite(*id_)}, "ood": suite(*ood)},
        ],
    }


class FakeRunner:
    """Writes what loop.run leaves behind (config.json, summary.json); counts its calls."""

    def __init__(self, numbers, fail=()):
        self.numbers, self.fail, self.calls = numbers, set(fail), []

    def __call__(self, cfg, workdir):
        self.calls.append((cfg.strategy, cfg.seed))
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(cfg.to_json_best_effort(indent=2))
        if (cfg.strategy, cfg.seed) in self.fail:
            raise RuntimeError(f"boom in {cfg.strategy}/{cfg.seed}")
        s = self.numbers[(cfg.strategy, cfg.seed)]
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump(s, f)
        return s


def two_by_three():
    c = table1("smoke")
    c.study.seeds = (0, 1, 2)
    c.study.transfer = ()  # the strategy rows only (the transfer pair has its own tests)
    numbers = {
        ("coda", 0): fake_summary((2, 8), (8, 8), accepted=10, tokens=100, env_steps=3600),
        ("coda", 1): fake_summary((4, 8), (4, 8), accepted=20, tokens=200, env_steps=3600),
        ("coda", 2): fake_summary((6, 8), (0, 8), accepted=30, tokens=300, env_steps=3600),
        ("sft", 0): fake_summary((1, 4), (1, 4), wall=4.0),
        ("sft", 1): fake_summary((1, 4), (1, 4), wall=6.0),
        ("sft", 2): fake_summary((1, 4), (3, 4), wall=8.0),
    }
    return c, numbers


def test_aggregation_means_seed_level_se_pooled_counts_and_costs(tmp_path):
    c, numbers = two_by_three()
    table = study.run_study(c, str(tmp_path), command="cmd", runner=FakeRunner(numbers))
    coda, sft = table["rows"]["coda"], table["rows"]["sft"]
    # OOD rates 0.25, 0.5, 0.75: mean 0.5, sample std 0.25, s.e. 0.25 / sqrt(3)
    assert coda["ood"]["mean"] == pytest.approx(0.5, abs=1e-12)
    assert coda["ood"]["se"] == pytest.approx(0.25 / math.sqrt(3), abs=1e-12)
    assert (coda["ood"]["pooled_successes"], coda["ood"]["pooled_episodes"]) == (12, 24)
    # ID 1, 0.5, 0: mean 0.5, s.e. 0.5 / sqrt(3)
    assert coda["id"]["mean"] == pytest.approx(0.5, abs=1e-12)
    assert coda["id"]["se"] == pytest.approx(0.5 / math.sqrt(3), abs=1e-12)
    # 600 tokens over 60 accepted envs; 3 x 3600 steps x 4 ms = 0.012 sim-hours over 60
    assert coda["llm_tokens_per_1000"] == pytest.approx(10000.0, abs=1e-6)
    assert coda["sim_hours_per_1000"] == pytest.approx(0.012 / 60 * 1000, abs=1e-9)
    assert sft["ood"]["mean"] == pytest.approx(0.25, abs=1e-12)
    assert sft["ood"]["se"] == pytest.approx(0.0, abs=1e-12)
    assert sft["id"]["mean"] == pytest.approx(5 / 12, abs=1e-12)
    assert sft["wall_seconds_per_cell"] == pytest.approx(6.0, abs=1e-12)
    assert coda["paper_ood_percent"] == pytest.approx(27.6, abs=1e-9)
    assert table["ordering"] == ["coda", "sft"]
    assert table["command"] == "cmd"
    on_disk = json.loads((tmp_path / "table1.json").read_text())
    assert on_disk["rows"]["coda"]["ood"]["pooled_episodes"] == 24
    md = (tmp_path / "table1.md").read_text()
    assert "| coda | method | 50.0 ± 14.4 (seeds 3) | 12/24 |" in md
    assert "OOD ordering, paper: coda 27.6 > no_memory 19.2" not in md  # only rows present
    assert "OOD ordering, paper: coda 27.6 > sft 5.3" in md
    assert "`cmd`" in md


def test_one_seed_has_no_standard_error():
    m, se = study.mean_se([0.3])
    assert m == pytest.approx(0.3, abs=1e-12) and math.isnan(se)
    assert all(math.isnan(x) for x in study.mean_se([]))


def test_rerun_skips_finished_cells_and_reruns_unfinished_ones(tmp_path):
    c, numbers = two_by_three()
    first = FakeRunner(numbers, fail={("sft", 2)})
    t1 = study.run_study(c, str(tmp_path), runner=first)
    assert len(first.calls) == 6 and t1["cells_failed"] == 1
    again = FakeRunner(numbers)
    t2 = study.run_study(c, str(tmp_path), runner=again)
    assert again.calls == [("sft", 2)]  # only the unfinished cell runs again
    assert t2["cells_failed"] == 0
    status = {(r["strategy"], r["seed"]): r["status"] for r in t2["cells"]}
    assert status[("coda", 0)].startswith("skipped") and status[("sft", 2)] == "ran"
    assert t2["rows"]["coda"]["ood"]["mean"] == pytest.approx(0.5, abs=1e-12)
    # a cell whose config changed is not "finished": it goes back to the loop (resume / refuse)
    c.study.base.loop.budget += 1
    third = FakeRunner(numbers)
    study.run_study(c, str(tmp_path), runner=third)
    assert len(third.calls) == 6


def test_a_failing_cell_is_recorded_and_the_study_goes_on(tmp_path):
    c, numbers = two_by_three()
    c.study.seeds = (0, 1)
    runner = FakeRunner(numbers, fail={("coda", 0), ("coda", 1), ("sft", 1)})
    table = study.run_study(c, str(tmp_path), runner=runner)
    assert len(runner.calls) == 4 and table["cells_failed"] == 3
    assert table["rows"]["coda"]["seeds"] == []
    assert table["rows"]["coda"]["failed"]["0"] == "RuntimeError: boom in coda/0"
    assert table["rows"]["coda"]["ood"]["mean"] is None  # JSON null, not a made-up number
    assert table["rows"]["sft"]["seeds"] == [0]
    assert "Traceback" in (tmp_path / "coda" / "seed0" / "error.txt").read_text()
    md = (tmp_path / "table1.md").read_text()
    assert "| coda | method | failed: seed 0: RuntimeError: boom in coda/0" in md
    assert "sft (1 seed(s) failed)" in md
    assert table["ordering"][0] == "sft"


def test_cells_run_in_this_process_unless_cell_process(tmp_path, monkeypatch):
    """The default runner runs every cell in this process (a run releases what it compiled:
    coda.lifetime); `study.cell_process=True` spawns a process per cell; a non-bool is refused."""
    c, numbers = two_by_three()
    c.study.seeds = (0,)
    used = []
    for name in ("_in_process_runner", "_process_runner"):
        fake = FakeRunner(numbers)
        monkeypatch.setattr(
            study, name, lambda cfg, wd, f=fake, n=name: used.append(n) or f(cfg, wd)
        )
    study.run_study(c, str(tmp_path / "a"))
    assert used == ["_in_process_runner"] * 2
    used.clear()
    c.study.cell_process = True
    study.run_study(c, str(tmp_path / "b"))
    assert used == ["_process_runner"] * 2
    del c.study.cell_process  # a typed field: replaced as a command line cannot
    c.study.cell_process = "yes"
    with pytest.raises(study.StudyError, match="study.cell_process='yes' must be True"):
        study.check_study(c)


def test_unknown_strategy_lists_the_valid_ones(tmp_path):
    c = table1("smoke")
    c.study.strategies = ("coda", "cdoa")
    runner = FakeRunner({})
    with pytest.raises(study.StudyError, match=r"unknown \['cdoa'\].*valid: coda, zero_shot"):
        study.run_study(c, str(tmp_path), runner=runner)
    assert runner.calls == [] and not os.listdir(tmp_path)
    c.study.strategies = ("coda",)
    c.study.seeds = (0, 0)
    with pytest.raises(study.StudyError, match="distinct"):
        study.check_study(c)


@pytest.mark.parametrize("arg", [None, "smoke", "gpu", "prereg", "curve"])
def test_every_variant_loads_and_every_cell_config_is_valid(arg):
    from coda.loop.strategies import STRATEGIES
    from coda.sim import tasks

    c = table1(arg)
    study.check_study(c)
    got = study.cells(c)
    assert len(got) == len(c.study.strategies) * len(c.study.seeds)
    for strategy, seed in got:
        cfg = study.cell_config(c, strategy, seed)
        assert (cfg.strategy, cfg.seed) == (strategy, seed) and strategy in STRATEGIES
        runconfig.validate(cfg, families=tasks.FAMILIES)
    pair = study.transfer_cells(c)  # oft from scratch / with coda's memory; off when registered
    assert len(pair) == (0 if arg in ("prereg", "curve") else 2 * len(c.study.seeds))
    for name, seed in pair:
        cfg = study.transfer_cell_config(c, name, seed)
        assert (cfg.strategy, cfg.policy.name, cfg.seed) == ("coda", "oft", seed)
        runconfig.validate(cfg, families=tasks.FAMILIES)
    assert c.study.base.strategy == "coda"  # the cells are copies: the base is untouched
    if arg is None:
        assert len(got) == 27 and set(study.PAPER_OOD) <= set(c.study.strategies)
    if arg == "prereg":  # the registration's arms and seeds; coda learns by the method's rule
        assert len(got) == 45 and set(study.PAPER_OOD) <= set(c.study.strategies)
        assert c.study.base.loop.advantage == "critic" and c.study.base.loop.num_candidates == 4


def test_bc_start_cells_adopt_the_first_bc_cells_round_0_at_their_seed(tmp_path):
    c = table1(None)
    w = str(tmp_path)
    assert study.cell_config(c, "coda", 1, w).loop.start_from == ""  # trains the start
    assert study.cell_config(c, "sft", 1, w).loop.start_from == study.cell_dir(w, "coda", 1)
    assert study.cell_config(c, "zero_shot", 1, w).loop.start_from == ""  # no BC: own round 0
    assert study.cell_config(c, "sft", 1).loop.start_from == ""  # no workdir: nothing shared
    c.study.share_start = False
    assert study.cell_config(c, "sft", 1, w).loop.start_from == ""


def test_unknown_variant_lists_the_valid_ones():
    with pytest.raises(
        ValueError, match="valid: '', 'smoke', 'gpu', 'transfer', 'prereg', 'curve'"
    ):
        table1("smok")


def test_transfer_variant_trains_the_pair_on_the_cube_programs():
    c = table1("transfer")
    assert tuple(c.study.strategies) == ("coda",) and tuple(c.study.transfer) == ("oft", "coda")
    cell = study.transfer_cell_config(c, "oft_memory", 1, "/w")
    assert cell.policy.name == "oft" and len(cell.sim.programs) == 2
    assert cell.loop.memory_from == study.cell_dir("/w", "coda", 1)
    assert tuple(study.cell_config(c, "coda", 1, "/w").sim.programs) == tuple(cell.sim.programs)
    runconfig.validate(study.transfer_cell_config(c, "oft_scratch", 1))


def test_cli_rejects_an_unknown_strategy_before_anything_runs(tmp_path):
    work = tmp_path / "w"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.study",
            "--config=configs/table1.py:smoke",
            "--config.study.strategies=('coda','cdoa')",
            f"--workdir={work}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "unknown ['cdoa']" in out.stderr and "success_rate_guided" in out.stderr
    assert not work.exists()


# with the transfer pair (4 cells): first run 93 s (coda 31 s, sft 13, oft_scratch 19, oft_memory 17;
# warm JAX cache) and ~200 s cold (93 / 35 / 34 / 39 s) on the 2-core machine at load ~8;
# before the pair: 178 s (coda 110 s, sft 55 s; rerun ~2 s) at load ~6
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_table1_smoke_runs_for_real_and_resumes(tmp_path):
    """`launch.study` on table1.py:smoke (2 strategies x 1 seed of the smoke loop), then the same
    command again: every cell is read back."""
    cmd = [
        sys.executable,
        "-m",
        "launch.study",
        "--config=configs/table1.py:smoke",
        f"--workdir={tmp_path}",
    ]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3500)
    first = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    table = json.loads((tmp_path / "table1.json").read_text())
    assert table["cells_failed"] == 0 and table["cells_total"] == 4, table["cells"]
    for s in ("coda", "sft", "oft_scratch", "oft_memory"):
        row = table["rows"][s]
        assert row["seeds"] == [0] and row["ood"]["pooled_episodes"] > 0
        assert 0.0 <= row["ood"]["mean"] <= 1.0 and row["id"]["pooled_episodes"] > 0
        assert row["sim_hours_per_1000"] > 0 and row["accepted_environments"] > 0
        assert (tmp_path / s / "seed0" / "summary.json").exists()
    assert "launch.study --config=configs/table1.py:smoke" in table["command"]
    # the transfer pair: oft from scratch, and oft seeded with the coda cell's final memory
    (mem,) = [c for c in table["cells"] if c["strategy"] == "oft_memory"]
    assert mem["memory_transfer"]["source"]["run"] == str(tmp_path / "coda" / "seed0")
    assert mem["memory_transfer"]["source"]["policy"] == "small"
    cfg = json.loads((tmp_path / "oft_memory" / "seed0" / "config.json").read_text())
    assert cfg["policy"]["name"] == "oft" and cfg["strategy"] == "coda"
    assert cfg["loop"]["start_from"] == str(tmp_path / "oft_scratch" / "seed0")
    assert "## Memory transfer across backbones" in (tmp_path / "table1.md").read_text()
    # every cell ran in the study's one process, and the mappings did not pile up cell by cell
    rows = [
        json.loads(line)
        for s in ("coda", "sft", "oft_scratch", "oft_memory")
        for line in (tmp_path / s / "seed0" / "process.jsonl").read_text().splitlines()
    ]
    assert len({r["pid"] for r in rows}) == 1
    assert max(r["maps"] for r in rows) < 0.5 * rows[0]["max_maps"], rows
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    again = json.loads((tmp_path / "table1.json").read_text())
    assert all(c["status"].startswith("skipped") for c in again["cells"])
    assert again["rows"]["coda"]["ood"] == table["rows"]["coda"]["ood"]
    print(f"table1:smoke first run {first:.0f} s")


def test_the_table_is_written_after_every_cell(tmp_path):
    c, numbers = two_by_three()
    seen = []

    class Peek(FakeRunner):
        def __call__(self, cfg, workdir):
            path = tmp_path / "table1.json"
            seen.append(json.loads(path.read_text())["cells_total"] if path.exists() else 0)
            return super().__call__(cfg, workdir)

    study.run_study(c, str(tmp_path), runner=Peek(numbers))
    assert seen == [0, 1, 2, 3, 4, 5]
    md = (tmp_path / "table1.md").read_text()
    assert "LLM tokens are 0" not in md  # the fake coda cells spent tokens


class PairRunner(FakeRunner):
    """FakeRunner keyed by the cell folder's name (transfer cells run the coda strategy); the
    memory cell's summary carries round 0's memory_transfer record as the loop writes it."""

    def __call__(self, cfg, workdir):
        name = os.path.basename(os.path.dirname(workdir))
        self.calls.append(
            (name, cfg.seed, cfg.policy.name, cfg.loop.memory_from, cfg.loop.start_from)
        )
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(cfg.to_json_best_effort(indent=2))
        s = json.loads(json.dumps(self.numbers[(name, cfg.seed)]))
        if name.endswith("_memory"):
            s["history"][0]["memory_transfer"] = {
                "mode_map": {"3": 1, "5": 2},
                "counts": {"generation_programs": 2, "training_programs": 1},
                "source": {"run": cfg.loop.memory_from, "round": 2, "policy": "small"},
                "skipped": {"7": "no generation parent"},
                "validated_in_source": 3,
                "parents": 9,
            }
        with open(os.path.join(workdir, "summary.json"), "w") as f:
            json.dump(s, f)
        return s


def test_the_transfer_pair_runs_after_its_sources_and_gets_rows(tmp_path):
    c = table1("smoke")
    c.study.seeds = (0, 1)
    numbers = {}
    for k in (0, 1):
        numbers[("coda", k)] = fake_summary((4, 8), (4, 8))
        numbers[("sft", k)] = fake_summary((1, 8), (1, 8))
        numbers[("oft_scratch", k)] = fake_summary((1, 8), (2, 8))
        numbers[("oft_memory", k)] = fake_summary((3, 8), (2 + 2 * k, 8))
    runner = PairRunner(numbers)
    w = str(tmp_path)
    table = study.run_study(c, w, runner=runner)
    order = [(n, k) for n, k, *_ in runner.calls]
    assert order == [  # seed-major: a partial study holds whole seeds
        ("coda", 0),
        ("sft", 0),
        ("coda", 1),
        ("sft", 1),
        ("oft_scratch", 0),
        ("oft_memory", 0),
        ("oft_scratch", 1),
        ("oft_memory", 1),
    ]
    calls = {(n, k): rest for n, k, *rest in runner.calls}
    assert calls[("oft_scratch", 1)] == ["oft", "", ""]  # fresh memory, its own round 0
    assert calls[("oft_memory", 1)] == [
        "oft",
        study.cell_dir(w, "coda", 1),  # the finished source cell of the same seed
        study.cell_dir(w, "oft_scratch", 1),  # the same start as its scratch twin
    ]
    assert table["cells_total"] == table["cells_planned"] == 8
    assert table["transfer"] == {"backbone": "oft", "source": "coda"}
    rows = table["rows"]
    assert rows["oft_scratch"]["kind"] == rows["oft_memory"]["kind"] == "transfer"
    assert rows["oft_scratch"]["ood"]["mean"] == pytest.approx(1 / 8, abs=1e-12)
    assert rows["oft_memory"]["ood"]["mean"] == pytest.approx(3 / 8, abs=1e-12)
    assert rows["oft_memory"]["id"]["mean"] == pytest.approx(3 / 8, abs=1e-12)
    assert rows["oft_memory"]["paper_transfer_percent"] == pytest.approx(21.1, abs=1e-9)
    mem = [x for x in table["cells"] if x["strategy"] == "oft_memory"]
    assert [x["memory_transfer"]["modes"] for x in mem] == [2, 2]
    md = (tmp_path / "table1.md").read_text()
    assert "| oft_memory | transfer | 37.5 ± 0.0 (seeds 2) | 6/16 |" in md
    assert "## Memory transfer across backbones: `oft` from scratch vs. seeded with `coda`" in md
    assert "| memory - scratch | 25.0 | 12.5 |" in md
    assert "3.8 % -> 21.1 %" in md
    assert "8 of 8 cells (2 strategies + the transfer pair x 2 seeds [0, 1])" in md
    assert f"- seed 1: 2 of 3 validated modes from {study.cell_dir(w, 'coda', 1)}" in md
    # resumable like the other cells
    again = PairRunner(numbers)
    study.run_study(c, w, runner=again)
    assert again.calls == []


def test_transfer_config_errors_name_the_field():
    c = table1("smoke")
    for bad, match in (
        (("pi0", "coda"), r"backbone 'pi0' unknown \(valid: small, oft\)"),
        (("oft", "uniform_variants"), "not one of study.strategies"),
        (("oft",), r"must be \(backbone, source_strategy\)"),
    ):
        c.study.transfer = bad
        with pytest.raises(study.StudyError, match=match):
            study.check_study(c)
    c.study.strategies = ("coda", "no_memory")
    c.study.transfer = ("oft", "no_memory")
    with pytest.raises(study.StudyError, match="keeps no full memory"):
        study.check_study(c)
    c.study.transfer = ()
    study.check_study(c)
    assert study.transfer_cells(c) == []


def test_every_cell_records_the_commit_it_ran_at(tmp_path):
    """A registered study runs at one commit: a cell that runs writes the process's commit
    beside it, a finished cell read back on resume keeps the one it ran at."""
    c = table1("smoke")
    c.study.transfer = ()
    numbers = {(s, 0): fake_summary((1, 8), (1, 8)) for s in c.study.strategies}
    w = str(tmp_path)
    table = study.run_study(c, w, runner=PairRunner(numbers))
    here = study.code_commit()
    assert here != "unknown" and table["commits"] == [here]
    assert {r["commit"] for r in table["cells"]} == {here}
    cell = study.cell_dir(w, c.study.strategies[0], 0)
    with open(os.path.join(cell, "commit.txt"), "w") as f:
        f.write("0123abc\n")  # as if it had run at another commit
    again = study.run_study(c, w, runner=PairRunner(numbers))
    assert again["commits"] == sorted({"0123abc", here})
    assert "code: " in (tmp_path / "table1.md").read_text()
