"""An openpi pi0.5 checkpoint evaluated on LIBERO's Panda with LIBERO's protocol
(`coda.libero.openpi_policy`, `coda.libero.evaluate_panda`, `launch.libero --config.robot=panda
--config.policy=openpi:<dir>`), end to end on the tiny openpi fixture: a checkpoint directory in
openpi's layout assembled in tmp (the fixture's orbax params, synthetic quantile norm stats, a
small SentencePiece model in the tokenizer's place: the tiny model's vocabulary is 512)."""

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from libero_configs import libero_config as _config
from openpi_fixtures import ACTION_Q, FIX, STATE_Q, libero_checkpoint, write_norm_stats

from coda.libero import evaluate as E
from coda.libero import evaluate_panda as EP
from coda.libero import openpi_policy as OP
from coda.libero import scene as S
from coda.libero import suites
from coda.libero.panda_env import PandaEnv

ROOT = pathlib.Path(__file__).resolve().parent.parent
ORBAX = os.path.join(FIX, "pi05_tiny_orbax", "params")
pytestmark = pytest.mark.usefixtures("libero_data")

TINY = dict(action_horizon=4, replan_steps=3, state_in_prompt=True, max_token_len=64,
            sample_steps=3, dtype="float32")  # fmt: skip


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> pathlib.Path:
    """<tmp>/ckpt in openpi's layout: params/ (the tiny fixture), assets/physical-intelligence/
    libero/norm_stats.json, paligemma_tokenizer.model (a 400-piece SentencePiece model)."""
    if not os.path.isdir(ORBAX):
        pytest.skip("openpi fixtures not available")
    return libero_checkpoint(tmp_path_factory.mktemp("openpi"))


@pytest.fixture(scope="module")
def policy(ckpt) -> OP.OpenpiLiberoPolicy:
    cfg = _config(**{f"openpi.{k}": v for k, v in TINY.items()})
    return OP.OpenpiLiberoPolicy(OP.find_parts(f"openpi:{ckpt}"), cfg.openpi)


def _panda_config(policy: str, **fields):
    base = {"robot": "panda", "policy": policy, "tasks": "0", "init_states": 2,
            "panda.batch": 2, "panda.image_size": 64, "panda.max_steps": 7,
            "panda.wait_steps": 2, "gifs": 0}  # fmt: skip
    base.update({f"openpi.{k}": v for k, v in TINY.items()})
    base.update(fields)
    return _config(**base)


# ----------------------------------------------------------------------------- the model config


def test_config_is_inferred_from_the_param_shapes(policy):
    """The tiny fixture's sizes come from its params; the horizon and the state-in-prompt flag
    are configured. On pi05_libero's recorded shapes the inference gives openpi's pi0.5."""
    c = policy.config
    assert (c.vocab_size, c.action_dim, c.siglip.image_size, c.siglip.patch_size) == (
        512,
        8,
        56,
        14,
    )
    assert dict(c.vlm) == dict(width=64, depth=2, mlp_dim=128, num_heads=2, num_kv_heads=1,
                               head_dim=16)  # fmt: skip
    assert c.expert.width == 32 and c.expert.mlp_dim == 64
    assert c.action_horizon == 4 and c.discrete_state_input and policy.image_size == 56
    rec = json.loads(pathlib.Path(FIX, "pi05_libero_param_shapes.json").read_text())["params"]
    shapes = {k: tuple(v["shape"]) for k, v in rec.items()}
    got = OP.infer_config(shapes, _config().openpi)
    from coda.policy import get_config

    want = get_config("pi05_libero")
    for field in ("vocab_size", "vlm", "expert", "siglip", "action_dim", "action_horizon",
                  "discrete_state_input", "max_token_len", "num_sample_steps", "dtype"):  # fmt: skip
        assert got[field] == want[field], field


# ----------------------------------------------------------------------------- inputs


def test_images_are_turned_by_180_degrees_and_padded():
    """robosuite's frame (bottom row first) turned by 180 deg: its first row's first pixel ends
    in the last row's last pixel; a wide frame is resized keeping its aspect, zero padded."""
    frame = np.zeros((1, 8, 8, 3), np.uint8)
    frame[0, 0, 0, 0] = 255
    obs = {"agentview_image": frame, "robot0_eye_in_hand_image": frame}
    images, masks = OP.model_images(obs, 8)
    assert images["base_0_rgb"][0, -1, -1, 0] == 255 and images["base_0_rgb"].sum() == 255
    assert not images["right_wrist_0_rgb"].any() and not masks["right_wrist_0_rgb"][0]
    assert masks["base_0_rgb"][0] and masks["left_wrist_0_rgb"][0]
    wide = np.full((2, 4, 8, 3), 200, np.uint8)
    out = OP.resize_with_pad(wide, 4)  # 8 x 4 -> 4 x 2, centred rows 1-2
    assert out.shape == (2, 4, 4, 3)
    assert not out[:, 0].any() and not out[:, 3].any() and (out[:, 1:3] == 200).all()


def test_prompt_is_liberos_task_language(libero_data):
    """openpi sends LIBERO's `task.language` (from the file name, not the BDDL's, no
    lowercasing); LIBERO-PRO's lan / task files carry their own instruction."""
    assert OP.libero_language("put_the_bowl_on_the_plate") == "put the bowl on the plate"
    assert OP.libero_language("LIVING_ROOM_SCENE2_put_both_x_in_the_basket") == (
        "put both x in the basket"
    )
    assert OP.libero_language("KITCHEN_SCENE10_put_the_butter_away") == "put the butter away"
    name = "pick_up_the_black_bowl_next_to_the_ramekin_and_place_it_on_the_plate"
    want = "pick up the black bowl next to the ramekin and place it on the plate"
    assert OP.prompt_for("libero_spatial", name) == want
    assert OP.prompt_for("libero_spatial_swap", name) == want
    lan = OP.prompt_for("libero_spatial_lan", name)
    assert lan != want and lan == S.load_task("libero_spatial_lan", name).problem.language


# ----------------------------------------------------------------------------- end to end


def test_openpi_checkpoint_on_the_panda_end_to_end(policy, ckpt, tmp_path, monkeypatch, gl):
    """1 task x 2 initial states of libero_spatial, 2 wait steps, a 7-step cap, chunks of 4
    with 3 executed: every model input and output checked against a hand computation."""
    calls, executed, seen = [], [], []
    infer, step = policy.infer, PandaEnv.step

    def spy_infer(obs, prompt, rng):
        actions = infer(obs, prompt, rng)
        calls.append({"obs": obs, "prompt": prompt, **policy.last})
        return actions

    def spy_step(env, actions):
        executed.append(np.array(actions))
        out = step(env, actions)
        seen.append(out[0]["state"].copy())
        return out

    monkeypatch.setattr(policy, "infer", spy_infer)
    monkeypatch.setattr(PandaEnv, "step", spy_step)
    res = EP.evaluate(_panda_config(f"openpi:{ckpt}"), tmp_path, policy=policy)

    steps = [e["steps"] for e in res["per_episode"]]
    assert len(calls) == math.ceil(max(steps) / 3)  # one inference per 3 executed actions
    q01s, q99s = (np.asarray(q, np.float32) for q in STATE_Q)
    q01a, q99a = (np.asarray(q, np.float32) for q in ACTION_Q)
    for c in calls:
        state = np.asarray(c["obs"]["state"], np.float32)
        assert state.shape == (2, 8)
        hand = (state - q01s) / (q99s - q01s + 1e-6) * 2.0 - 1.0
        np.testing.assert_allclose(c["state"], hand, rtol=1e-6, atol=1e-6)
        tokens, _ = policy.tokenizer.tokenize_batch([c["prompt"]] * 2, hand)  # state as text
        np.testing.assert_array_equal(c["tokens"], tokens)
        assert c["raw"].shape == (2, 4, 8) and c["actions"].shape == (2, 4, 7)
        un = (c["raw"][..., :7] + 1.0) / 2.0 * (q99a - q01a + 1e-6) + q01a
        np.testing.assert_allclose(c["actions"], un, rtol=1e-6, atol=1e-6)
        for cam in ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"):
            assert c["images"][cam].shape == (2, 56, 56, 3) and c["images"][cam].dtype == np.uint8
        assert c["images"]["base_0_rgb"].any() and not c["images"]["right_wrist_0_rgb"].any()
    assert calls[0]["prompt"] == OP.libero_language(suites.tasks("libero_spatial")[0])
    # 2 no-ops, then the first 3 actions of each chunk in order, up to the cap
    assert len(executed) == 2 + max(steps)
    np.testing.assert_array_equal(executed[:2], np.broadcast_to(EP.NOOP, (2, 2, 7)))
    plan = np.concatenate([c["actions"][:, :3] for c in calls], axis=1)  # [B, 3 * calls, 7]
    np.testing.assert_allclose(np.stack(executed[2:], 1), plan[:, : max(steps)], atol=1e-6)
    for i, c in enumerate(calls):  # each inference reads the observation of the step before it
        np.testing.assert_array_equal(c["obs"]["state"], seen[2 + 3 * i - 1])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert [(e["init"], e["task_id"]) for e in saved["per_episode"]] == [(0, 0), (1, 0)]
    assert all(set(e) == {"task_id", "task", "init", "success", "steps"}
               for e in saved["per_episode"])  # fmt: skip
    assert saved["per_task"][0]["episodes"] == 2 and saved["robot"] == "panda"
    assert saved["max_steps"] == 7 and saved["replan_steps"] == 3
    assert saved["openpi"]["action_dim"] == 8 and saved["openpi"]["siglip"]["image_size"] == 56
    assert "robot panda" in (tmp_path / "results.md").read_text().splitlines()[0]


def test_hold_and_random_act_on_the_panda(tmp_path, libero_data):
    """hold is LIBERO's no-op; random is seeded per (seed, task, batch); both run the protocol."""

    class Env:
        n_envs = 3

    a = EP.RandomActor(5)
    a.start(0, 1)
    x = a.chunk(Env(), {}, "")
    a.start(0, 1)
    np.testing.assert_array_equal(x, a.chunk(Env(), {}, ""))
    assert x.shape == (3, 1, 7) and np.abs(x).max() <= 1 and set(np.abs(x[..., 6]).ravel()) == {1}
    a.start(1, 1)
    assert not np.array_equal(x, a.chunk(Env(), {}, ""))
    np.testing.assert_array_equal(EP.HoldActor().chunk(Env(), {}, ""), [[EP.NOOP]] * 3)
    res = EP.evaluate(_panda_config("random", **{"init_states": 1, "panda.max_steps": 3}), tmp_path)
    assert res["per_episode"] == [
        {"task_id": 0, "task": suites.tasks("libero_spatial")[0], "init": 0, "success": False,
         "steps": 3}
    ]  # fmt: skip


def test_planner_acts_on_the_panda(tmp_path, libero_data):
    """policy=planner on robot=panda: `panda_chain.PandaPlanner` under LIBERO's protocol
    (libero_object's first task succeeds; libero_10's last, cut at 5 steps, fails and the
    evaluation goes on). The first episode's GIF runs from the settled start to its success."""
    from PIL import Image

    fields = {"suite": "libero_object", "init_states": 1, "panda.batch": 1, "gifs": 1,
              "panda.max_steps": 200, "panda.wait_steps": 10}  # fmt: skip
    res = EP.evaluate(_panda_config("planner", **fields), tmp_path)
    assert [r["success"] for r in res["per_episode"]] == [True]
    name = "gifs/task00_ep00_success.gif"
    assert res["gif_note"] is None and res["per_task"][0]["gifs"] == [name]
    gif = Image.open(tmp_path / name)
    frames = len(range(0, res["per_episode"][0]["steps"] + 1, EP.GIF_STRIDE)) + 1
    assert gif.size == (128, 128) and 2 <= gif.n_frames <= frames  # equal frames merge
    first = np.asarray(gif.convert("RGB"))
    gif.seek(gif.n_frames - 1)
    last = np.asarray(gif.convert("RGB"))
    assert np.abs(first.astype(int) - last).mean() > 1.0  # the arm moved and the object too
    lit = EP.evaluate(_panda_config("planner", **fields, perturbation="light3"), tmp_path / "lit")
    assert lit["per_episode"] == res["per_episode"]  # frames only: the state policy is unmoved
    assert lit["observation_perturbation"] == {"kind": "light", "level": 3, "seed": 0}
    lit_first = np.asarray(Image.open(tmp_path / "lit" / name).convert("RGB"))
    assert np.abs(lit_first.astype(int) - first).mean() > 1.0
    fields.update({"suite": "libero_10", "tasks": "9", "panda.max_steps": 5})
    res = EP.evaluate(_panda_config("planner", **fields), tmp_path / "door")
    assert [r["success"] for r in res["per_episode"]] == [False]


# ----------------------------------------------------------------------------- refusals


def test_config_refusals_are_one_line(ckpt, tmp_path):
    assert E.config_problems(_panda_config(f"openpi:{ckpt}")) == []
    assert E.config_problems(_panda_config("hold")) == []
    assert not E.is_run_path(f"openpi:{ckpt}")
    no_stats = tmp_path / "no_stats"
    no_stats.mkdir()
    (no_stats / "params").symlink_to(ORBAX, target_is_directory=True)
    no_params = tmp_path / "no_params"
    write_norm_stats(no_params / "assets" / "x" / "norm_stats.json")
    for fields, says in (
        ({"robot": "floating"}, "acts on LIBERO's Panda: add --config.robot=panda"),
        ({"robot": "pandas"}, "robot='pandas' is unknown (valid: floating, panda)"),
        ({"policy": f"openpi:{tmp_path}/nope"}, f"no directory {tmp_path}/nope"),
        ({"policy": f"openpi:{no_stats}"}, f"no norm_stats.json under {no_stats}/assets/ nor at"),
        ({"policy": f"openpi:{no_params}"}, f"no orbax params at {no_params}/params/"),
        ({"policy": f"openpi:{no_params}"}, f"no PaliGemma tokenizer (paligemma_tokenizer.model) "
                                            f"at {no_params}/paligemma_tokenizer.model"),
        ({"tokenizer": f"{tmp_path}/tok.model"}, f"tokenizer='{tmp_path}/tok.model' is not a file"),
        ({"policy": "runs/some_run"}, "policy='runs/some_run' is a CoDA run, trained on our floating gripper: add --config.robot=floating"),
        ({"openpi.replan_steps": 5}, "openpi.replan_steps=5 must be in [1, openpi.action_horizon=4]"),
        ({"panda.batch": 0}, "panda.batch=0 must be an integer >= 1"),
        ({"panda.fixture_seed": -2}, "panda.fixture_seed=-2 must be an integer >= -1"),
        ({"panda.fixture_chain": True}, "panda.fixture_chain=True needs panda.fixture_seed >= 0"),
    ):  # fmt: skip
        fields = {"policy": f"openpi:{ckpt}", **fields}
        got = E.config_problems(_panda_config(**fields))
        assert len(got) == 1 and says in got[0] and "\n" not in got[0], (fields, got)


@pytest.mark.parametrize(
    "robot,policy,says",
    [("floating", "openpi:{ckpt}", "add --config.robot=panda"),
     ("panda", "{ckpt}", "add --config.robot=floating")],  # a folder: read as a CoDA run
)  # fmt: skip
def test_launch_answers_a_policy_the_robot_cannot_take_in_one_line(ckpt, robot, policy, says):
    out = subprocess.run(
        [sys.executable, "-m", "launch.libero", f"--config.robot={robot}",
         f"--config.policy={policy.format(ckpt=ckpt)}", "--workdir=/nonexistent/never-written"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr
    line = [x for x in out.stderr.splitlines() if x.startswith("policy=")]
    assert len(line) == 1 and says in line[0], out.stderr[-2000:]


def _copy_checkpoint(ckpt: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    import shutil

    shutil.copytree(ckpt, dst, symlinks=False)  # the params' link resolved: files to spoil
    return dst


def _truncated_params(ckpt: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """The checkpoint with its largest params data file cut to 1000 bytes."""
    out = _copy_checkpoint(ckpt, dst)
    biggest = max((p for p in (out / "params").rglob("*") if p.is_file()), key=os.path.getsize)
    with open(biggest, "r+b") as f:
        f.truncate(1000)
    return out


def test_unreadable_checkpoint_files_are_refused_in_one_line(ckpt, tmp_path):
    """Files that are there but not what they claim: caught when the config is checked (the
    params' _METADATA, the tokenizer) or when the policy loads (the arrays, another model's
    params), each as one line naming the file, never a traceback."""
    bad_meta = _copy_checkpoint(ckpt, tmp_path / "bad_meta")
    (bad_meta / "params" / "_METADATA").write_text("garbage")
    bad_tok = _copy_checkpoint(ckpt, tmp_path / "bad_tok")
    (bad_tok / OP.TOKENIZER_FILE).write_bytes(b"not a model" * 10)
    for root, says in (
        (bad_meta, f"orbax params {bad_meta}/params/_METADATA unreadable (JSONDecodeError"),
        (bad_tok, f"tokenizer {bad_tok}/{OP.TOKENIZER_FILE} is not a SentencePiece model"),
    ):
        got = E.config_problems(_panda_config(f"openpi:{root}"))
        assert len(got) == 1 and says in got[0] and "\n" not in got[0], got

    from coda.policy import load_openpi
    from coda.policy.train import save_params

    no_proj = _copy_checkpoint(ckpt, tmp_path / "no_proj")
    params = load_openpi(str(no_proj / "params"))
    del params["action_in_proj"]  # another model's params: pi0.5's action input is missing
    import shutil

    shutil.rmtree(no_proj / "params")
    save_params(str(no_proj / "params"), params)
    trunc = _truncated_params(ckpt, tmp_path / "trunc")
    settings = _config(**{f"openpi.{k}": v for k, v in TINY.items()}).openpi
    for root, says in (
        (no_proj, "not a pi0.5 checkpoint: no parameter action_in_proj/kernel"),
        (trunc, f"params {trunc}/params unreadable ("),
    ):
        assert E.config_problems(_panda_config(f"openpi:{root}")) == []  # only the load knows
        with pytest.raises(OP.CheckpointError) as e:
            OP.OpenpiLiberoPolicy(OP.find_parts(f"openpi:{root}"), settings)
        assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_launch_answers_corrupt_params_in_one_line_and_writes_nothing(ckpt, tmp_path):
    trunc = _truncated_params(ckpt, tmp_path / "trunc")
    workdir = tmp_path / "never-written"
    out = subprocess.run(
        [sys.executable, "-m", "launch.libero", f"--config.policy=openpi:{trunc}",
         "--config.openpi.action_horizon=4", "--config.openpi.replan_steps=3",
         f"--workdir={workdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    line = [x for x in out.stderr.splitlines() if x.startswith("policy=")]
    assert len(line) == 1 and f"params {trunc}/params unreadable (" in line[0], out.stderr[-2000:]
    assert not workdir.exists()


def test_a_failed_restore_silences_only_its_own_abandoned_reads(ckpt, tmp_path, caplog):
    """The other arrays' reads of a failed restore end later, each as asyncio's "Task exception
    was never retrieved" when its task is collected (when depends on the garbage collector, so the
    launch test above cannot pin it): those records name the checkpoint and are dropped; the same
    record for another path, and any other asyncio record, are still logged."""
    import asyncio
    import logging

    from coda.policy import load_openpi

    trunc = _truncated_params(ckpt, tmp_path / "trunc")
    with pytest.raises(ValueError):
        load_openpi(str(trunc / "params"))
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for where in (trunc / "params", tmp_path / "elsewhere"):
                error = ValueError(f'OUT_OF_RANGE: Error reading "x" at local file "{where}/"')
                loop.call_exception_handler(
                    {"message": "Task exception was never retrieved", "exception": error}
                )
            loop.call_exception_handler({"message": "something else", "exception": ValueError()})
    finally:
        loop.close()
    records = [r for r in caplog.records if r.name == "asyncio"]
    logged = [r.getMessage() for r in records]
    assert len(logged) == 2 and "something else" in logged[1], logged
    assert str(records[0].exc_info[1]).endswith(f'"{tmp_path}/elsewhere/"')
