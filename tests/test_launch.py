"""Configs load; the CLI rejects typos (the smoke loop itself runs once in tests/test_loop.py)."""

import glob
import importlib.util
import os
import subprocess
import sys

import pytest

from coda import registries, runconfig
from coda.loop.strategies import STRATEGIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# configs of launch.main (configs/libero.py belongs to launch.libero: tests/test_libero.py;
# configs/table1.py, configs/focused.py and configs/libero_study.py to launch.study:
# tests/test_study.py, tests/test_regions.py and tests/test_loop_libero.py)
CONFIGS = sorted(
    p
    for p in glob.glob(os.path.join(ROOT, "configs", "*.py"))
    if not p.endswith(("libero.py", "table1.py", "focused.py", "libero_study.py"))
)


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_every_config_loads_with_its_variants(path):
    from coda.sim import tasks

    mod = _load(path)
    for arg in (None, "smoke", "gpu", "selfimit"):
        cfg = mod.get_config(arg)
        assert cfg.sim.families and cfg.sim.num_chunks > 0
        runconfig.validate(cfg, families=tasks.FAMILIES)
    with pytest.raises(ValueError, match="valid"):
        mod.get_config("nonsense")


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_strategy_validates_from_the_main_config(name):
    """Baselines and ablations have no config files: `--config=configs/coda.py
    --config.strategy=NAME` selects each registry entry, and every variant validates with it
    (the focused experiment's arms once `sim.hard_regions` are declared; without, one line)."""
    from coda.sim import tasks

    mod = _load(os.path.join(ROOT, "configs", "coda.py"))
    regions = bool(getattr(STRATEGIES[name].allocator, "where", ""))
    for arg in (None, "smoke", "gpu", "selfimit"):
        cfg = mod.get_config(arg)
        cfg.strategy = name
        if regions:
            with pytest.raises(runconfig.ConfigError, match="sim.hard_regions, which is empty"):
                runconfig.validate(cfg, families=tasks.FAMILIES)
            cfg.sim.hard_regions = ("object.y > 0.15",)
        runconfig.validate(cfg, families=tasks.FAMILIES)


def test_cli_rejects_a_misspelt_override(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.main",
            "--config=configs/coda.py:smoke",
            "--config.sim.bakend=mjx",
            f"--workdir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "bakend" in out.stderr


# A user's typo: one line with the valid choices (absl UsageError), before JAX is imported and
# before anything is written to the run folder. The probe runs launch.main in a subprocess and
# reports whether `jax` was ever imported.
_PROBE = """
import runpy, sys
sys.argv = ["launch.main", *sys.argv[1:]]
try:
    runpy.run_module("launch.main", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as e:
    code = e.code
print("jax imported:", "jax" in sys.modules)
sys.exit(code)
"""

BAD_INPUTS = {
    "missing_config": (["--config=configs/nope.py"], "no config file 'configs/nope.py'"),
    "unknown_variant": (["--config=configs/coda.py:smok"], "valid: '', 'smoke', 'gpu'"),
    "unknown_split": (
        ["--config=configs/coda.py:smoke", "--config.sim.split=heldot"],
        "sim.split='heldot' is unknown (valid: train, heldout, all)",
    ),
    "unknown_backend": (
        ["--config=configs/coda.py:smoke", "--config.sim.backend=warp"],
        "sim.backend='warp' is unknown (valid: auto, native, mjx)",
    ),
    "zero_chunks": (
        ["--config=configs/coda.py:smoke", "--config.sim.num_chunks=0"],
        "sim.num_chunks=0 must be an integer >= 1",
    ),
    "unknown_strategy": (
        ["--config=configs/coda.py:smoke", "--config.strategy=cod"],
        "strategy='cod' is unknown (valid: coda, zero_shot,",
    ),
    "unknown_critic": (
        ["--config=configs/coda.py:smoke", "--config.critic.name=oracle"],
        "critic.name='oracle' is unknown (valid: offline, vlm)",
    ),
    "unknown_engine": (
        ["--config=configs/coda.py:smoke", "--config.engine.name=gpt"],
        "engine.name='gpt' is unknown (valid: offline, llm)",
    ),
    "unknown_family": (
        ["--config=configs/coda.py:smoke", "--config.sim.families=('pick_place','pick_plac')"],
        "sim.families: unknown ['pick_plac'] (valid: articulated, pick_place, put_inside,",
    ),
    "bad_band": (
        ["--config=configs/coda.py:smoke", "--config.loop.band=(0.9,0.1)"],
        "loop.band=(0.9, 0.1) must be (lo, hi) with 0 <= lo < hi <= 1",
    ),
    "misspelt_field": (
        ["--config=configs/coda.py:smoke", "--config.sim.bakend=mjx"],
        "config.sim has no field 'bakend'; did you mean 'backend'? (valid: backend, families,",
    ),
    "unknown_field": (
        ["--config=configs/coda.py:smoke", "--config.eval.random_policy=False"],
        "config.eval has no field 'random_policy' (valid: before_bc, episodes,",
    ),
    "field_below_a_value": (
        ["--config=configs/coda.py:smoke", "--config.seed.x", "1"],
        "--config.seed.x: config.seed is a value, not a section",
    ),
    "workdir_is_a_file": (["--config=configs/coda.py:smoke"], "is a file, not a folder"),
    "unknown_data_parallel": (
        ["--config=configs/coda.py:smoke", "--config.loop.data_parallel=maybe"],
        "loop.data_parallel='maybe' is unknown (valid: auto, on, off)",
    ),
    "processes_without_coordinator": (
        ["--config=configs/coda.py:smoke", "--num_processes=2"],
        "--num_processes > 1 needs --coordinator_address=host:port",
    ),
    "process_id_out_of_range": (
        [
            "--config=configs/coda.py:smoke",
            "--num_processes=2",
            "--process_id=2",
            "--coordinator_address=127.0.0.1:1234",
        ],
        "--process_id=2 must be < --num_processes=2",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_cli_bad_input_is_one_line_before_jax_and_writes_nothing(case, tmp_path):
    args, expected = BAD_INPUTS[case]
    workdir = tmp_path / "run"
    if case == "workdir_is_a_file":
        workdir.write_text("not a folder")
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args, f"--workdir={workdir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    last = [line for line in out.stderr.splitlines() if line.strip()][-1]
    assert expected in last, out.stderr[-2000:]
    assert "jax imported: False" in out.stdout, out.stdout
    if case == "workdir_is_a_file":
        assert workdir.read_text() == "not a folder"
    else:
        assert not workdir.exists()


def test_validate_lists_every_bad_field_and_accepts_good_ones():
    cfg = _load(os.path.join(ROOT, "configs", "coda.py")).get_config("smoke")
    runconfig.validate(cfg, families=("pick_place", "articulated", "put_inside", "stack_or_insert"))
    cfg.sim.split = "tarin"
    cfg.sim.horizon = 0
    cfg.sim.families = ("pick_place", "pick_plcae")
    with pytest.raises(runconfig.ConfigError) as e:
        runconfig.validate(cfg, families=("pick_place", "articulated"))
    msg = str(e.value)
    assert "\n" not in msg
    assert "sim.split='tarin' is unknown (valid: train, heldout, all)" in msg
    assert "sim.horizon=0 must be an integer >= 1" in msg
    assert "sim.families: unknown ['pick_plcae'] (valid: articulated, pick_place)" in msg
    assert runconfig.problems({"sim": {}})[0].startswith("sim.backend: missing")
    cfg = _load(os.path.join(ROOT, "configs", "coda.py")).get_config("smoke")
    cfg.loop.advantage, cfg.loop.demo_dart, cfg.loop.policy_ema = "td", (0.1, -1.0), 1.0
    cfg.loop.collect_noise_scale, cfg.loop.finetune_ema = -0.5, 1.5
    got = runconfig.problems(cfg)
    assert "loop.collect_noise_scale=-0.5 must be a number >= 0" in got
    assert "loop.advantage='td' is unknown (valid: critic, mc, nstep, success)" in got
    assert "loop.demo_dart=(0.1, -1.0) must be a list of noise sigmas > 0 (or empty)" in got
    assert "loop.policy_ema=1.0 must be a number in [0, 1)" in got
    assert "loop.finetune_ema=1.5 must be -1 (as loop.policy_ema) or in [0, 1)" in got


def test_config_choices_match_the_code_they_name():
    from coda.sim import assets, rollout
    from coda.train import learner

    assert rollout.BACKENDS is registries.PHYSICS_BACKENDS  # what sim.backend is checked against
    assert runconfig.ADVANTAGES is learner.ADVANTAGES is registries.ADVANTAGES
    for split in runconfig.SPLITS:
        assert assets.instances_for("cube", split)
    with pytest.raises(ValueError, match="valid: train, heldout, all"):
        assets.instances_for("cube", "tarin")


def test_loop_checks_families_before_writing(tmp_path):
    from coda import loop

    cfg = _load(os.path.join(ROOT, "configs", "coda.py")).get_config("smoke")
    cfg.sim.families = ("pick_place", "warp_drive")
    with pytest.raises(runconfig.ConfigError, match="unknown \\['warp_drive'\\]"):
        loop.run(cfg, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_compile_cache_folder_is_configurable_and_outside_the_run(tmp_path, monkeypatch):
    cfg = _load(os.path.join(ROOT, "configs", "coda.py")).get_config()
    monkeypatch.delenv(runconfig.CACHE_ENV, raising=False)
    assert runconfig.cache_dir(cfg) == os.path.expanduser("~/.cache/coda/jax")
    monkeypatch.setenv(runconfig.CACHE_ENV, str(tmp_path / "env"))
    assert runconfig.cache_dir(cfg) == str(tmp_path / "env")
    cfg.cache_dir = str(tmp_path / "cfg")
    assert runconfig.cache_dir(cfg) == str(tmp_path / "cfg")
