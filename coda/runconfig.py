"""Checks of a run config (`configs/*.py`) and where a run keeps its caches; pure Python.

`launch.main` calls `validate` before JAX is imported and before anything is written to the
run folder, so a typo is one line naming the field and its valid choices instead of a crash
minutes into the run (or, worse, a run that silently does something else: an unknown split
used to mean "all"). `loop.run` calls it again for configs built in code. Every name a config
can hold (families, strategies, critics, engines, compilers, backends) is checked against
`coda.registries`, which names them without importing them. No JAX / MuJoCo imports here: that
is the point.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable
from typing import Any

from coda import registries

SPLITS = ("train", "heldout", "all")  # object instances / categories a run may sample
CACHE_ENV = "CODA_CACHE_DIR"
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "coda", "jax")

_MISSING = object()


class ConfigError(ValueError):
    """A run config field is missing or has an invalid value; the message names the field."""


def _get(config: Any, dotted: str) -> Any:
    obj = config
    for part in dotted.split("."):
        try:
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        except (AttributeError, KeyError):
            return _MISSING
    return obj


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def problems(config: Any, families: Iterable[str] | None = None) -> list[str]:
    """Every invalid field of `config` as 'field: why (valid: ...)'; empty when it is valid.

    `families`: the task family names to accept; None: every registered one
    (`coda.registries.FAMILIES`, including families registered at run time).
    """
    out: list[str] = []

    def choice(field: str, valid: tuple[str, ...]) -> None:
        v = _get(config, field)
        if v is _MISSING:
            out.append(f"{field}: missing (valid: {', '.join(valid)})")
        elif v not in valid:
            out.append(f"{field}={v!r} is unknown (valid: {', '.join(valid)})")

    def integer(field: str, lo: int) -> None:
        v = _get(config, field)
        if v is _MISSING:
            out.append(f"{field}: missing (an integer >= {lo})")
        elif not _is_int(v) or v < lo:
            out.append(f"{field}={v!r} must be an integer >= {lo}")

    choice("sim.backend", ("auto", *registries.PHYSICS_BACKENDS))
    choice("sim.split", SPLITS)
    integer("seed", 0)
    integer("sim.num_chunks", 1)
    integer("sim.horizon", 1)
    integer("sim.programs_per_family", 1)
    integer("sim.seeds_per_program", 1)
    integer("sim.nthread", 0)
    fams = _get(config, "sim.families")
    if fams is _MISSING:
        out.append("sim.families: missing (a non-empty list of task family names)")
    elif isinstance(fams, str) or not fams or not all(isinstance(f, str) for f in fams):
        out.append(f"sim.families={fams!r} must be a non-empty list of task family names")
    else:
        dup = sorted({f for f in fams if list(fams).count(f) > 1})
        if dup:
            out.append(f"sim.families lists {dup} more than once")
        known = sorted(registries.FAMILIES if families is None else families)
        unknown = [f for f in fams if f not in known]
        if unknown:
            out.append(f"sim.families: unknown {unknown} (valid: {', '.join(known)})")
    progs = _get(config, "sim.programs")
    if progs is not _MISSING and progs:
        if isinstance(progs, str) or not all(isinstance(p, str) and p.strip() for p in progs):
            out.append("sim.programs must be a list of scene-program sources (() = proposed)")
        elif isinstance(fams, list | tuple):
            for i, p in enumerate(progs):
                m = re.search(r'set_task\(\s*"([^"]+)"', p)
                if m is None:
                    out.append(f'sim.programs[{i}] has no set_task("<family>", ...) line')
                elif m.group(1) not in fams:
                    out.append(
                        f"sim.programs[{i}] is a {m.group(1)!r} task, not one of sim.families "
                        f"{list(fams)}"
                    )
    if _get(config, "render") is not _MISSING:
        integer("render.width", 1)
        integer("render.height", 1)
    _loop_problems(config, out, choice, integer)
    cache = _get(config, "cache_dir")
    if cache is not _MISSING and cache is not None and not isinstance(cache, str):
        out.append(f"cache_dir={cache!r} must be a path string ('' = default)")
    return out


LLM_RECORD_MODES = ("off", "record", "replay", "reuse")  # coda.llm.record.RECORD_MODES
POLICY_NAMES = ("small", "oft")  # coda.policy configs the loop sizes (policy_overrides)
ADVANTAGES = registries.ADVANTAGES  # coda.train.learner.LearnerConfig.advantage
LOOP_INTS = {  # field -> minimum
    "loop.rounds": 0,
    "loop.budget": 1,
    "loop.rollouts_per_variant": 1,
    "loop.num_candidates": 1,
    "loop.critiques_per_mode": 0,
    "loop.critic_updates": 1,
    "loop.policy_updates": 1,
    "loop.min_modes_in_band": 0,
    "loop.plateau_updates": 0,
    "loop.max_extra_blocks": 0,
    "loop.min_stop_round": 0,
    "loop.max_env_steps": 0,
    "loop.bc_steps": 1,
    "loop.validate_n": 2,
    "loop.max_validations": 0,
    "loop.retest_after": 0,
    "loop.max_retests": 0,
    "loop.max_parents": 1,
    "loop.bucket_size": 1,
    "loop.policy_batch": 1,
    "loop.finetune_batch": 0,
    "loop.policy_warmup": 0,
    "loop.critic_batch": 1,
    "loop.updates_per_call": 1,
    "loop.replay_size": 1,
    "loop.demo_cap": 1,
    "loop.demo_seeds": 0,
    "policy.width": 2,
    "policy.expert_width": 2,
    "policy.depth": 1,
    "policy.heads": 1,
    "policy.state_hidden": 1,
    "policy.num_state_tokens": 1,
    "policy.sample_steps": 1,
    "policy.max_token_len": 8,
    "critic.n_probes": 1,
    "critic.n_repeats": 0,
    "critic.max_keyframes": 1,
    "critic.image_size": 16,
    "eval.episodes": 1,
    "eval.heldout_tasks_per_family": 0,
    "eval.every": 1,
    "render.failures_per_round": 0,
}
LOOP_FRACTIONS = (
    "loop.epsilon",
    "loop.replay_fraction",
    "loop.demo_fraction",
    "loop.select_min_auc",
)


def uses_llm(config: Any) -> bool:
    """Whether a part of the loop talks to `config.llm`: the vlm critic, the llm engine or the
    llm compiler (R_hone)."""
    return (
        _get(config, "critic.name") == "vlm"
        or _get(config, "engine.name") == "llm"
        or _get(config, "potentials.compiler") == "llm"
    )


def _llm_problems(config: Any, out: list[str], choice: Any) -> None:
    """The LLM client the VLM critic, the LLM engine and the LLM compiler talk through."""
    if _get(config, "llm") is _MISSING:
        if uses_llm(config):
            out.append(
                "llm: missing (the vlm critic / llm engine / llm compiler need an `llm` section)"
            )
        return
    choice("llm.backend", tuple(registries.LLM_BACKENDS))
    choice("llm.record_mode", LLM_RECORD_MODES)
    backend, url = _get(config, "llm.backend"), _get(config, "llm.base_url")
    if backend == "openai_compatible" and not url:
        out.append(
            "llm.base_url: needed by llm.backend=openai_compatible (e.g. http://127.0.0.1:8000/v1)"
        )
    if _get(config, "critic.name") == "vlm" and backend == "offline":
        out.append(
            "critic.name=vlm needs a networked llm.backend (openai or openai_compatible); "
            "the embedded default is critic.name=offline"
        )
    n = _get(config, "llm.max_concurrency")
    if n is not _MISSING and (not _is_int(n) or n < 1):
        out.append(f"llm.max_concurrency={n!r} must be an integer >= 1")


def _loop_value_problems(config: Any, out: list[str]) -> None:
    """The loop's fields whose values are checked together or by shape (budget shares, DART
    sigmas, run folders, flags, the band)."""
    eps, rep = _get(config, "loop.epsilon"), _get(config, "loop.replay_fraction")
    if isinstance(eps, (int, float)) and isinstance(rep, (int, float)) and eps + rep > 1:
        out.append(f"loop.epsilon + loop.replay_fraction = {eps + rep} must be <= 1")
    dart = _get(config, "loop.demo_dart")
    if dart is not _MISSING and (
        isinstance(dart, str)
        or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in dart)
    ):
        out.append(f"loop.demo_dart={dart!r} must be a list of noise sigmas > 0 (or empty)")
    src = _get(config, "loop.start_from")
    if src is not _MISSING and not isinstance(src, str):
        out.append(f"loop.start_from={src!r} must be a run folder path ('' = none)")
    mem = _get(config, "loop.memory_from")
    if mem is not _MISSING and not isinstance(mem, str):
        out.append(f"loop.memory_from={mem!r} must be a finished run folder path ('' = none)")
    elif mem not in (_MISSING, ""):  # folder, finished, snapshot, strategies (pure Python)
        strategy = _get(config, "strategy")
        check = registries.CONFIG_CHECKS["loop.memory_from"]  # coda.loop.transfer
        out += check(mem, None if strategy is _MISSING else strategy)
    nd = _get(config, "loop.novel_demos")
    if nd is not _MISSING and not isinstance(nd, bool):
        out.append(f"loop.novel_demos={nd!r} must be True or False")
    dp = _get(config, "loop.data_parallel")
    if dp is not _MISSING and dp not in DATA_PARALLEL:
        out.append(f"loop.data_parallel={dp!r} is unknown (valid: {', '.join(DATA_PARALLEL)})")
    adv = _get(config, "loop.advantage")
    if adv is not _MISSING and adv not in ADVANTAGES:
        out.append(f"loop.advantage={adv!r} is unknown (valid: {', '.join(ADVANTAGES)})")
    ema = _get(config, "loop.policy_ema")
    if ema is not _MISSING and (
        isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0 <= ema < 1
    ):
        out.append(f"loop.policy_ema={ema!r} must be a number in [0, 1)")
    fema = _get(config, "loop.finetune_ema")
    if fema is not _MISSING and (
        isinstance(fema, bool)
        or not isinstance(fema, (int, float))
        or not (0 <= fema < 1 or fema == -1)
    ):
        out.append(f"loop.finetune_ema={fema!r} must be -1 (as loop.policy_ema) or in [0, 1)")
    band = _get(config, "loop.band")
    ok = (
        band is not _MISSING
        and not isinstance(band, str)
        and len(tuple(band)) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in band)
        and 0.0 <= band[0] < band[1] <= 1.0
    )
    if not ok:
        out.append(f"loop.band={band!r} must be (lo, hi) with 0 <= lo < hi <= 1")


def _loop_problems(config: Any, out: list[str], choice: Any, integer: Any) -> None:
    """The loop's fields (configs/coda.py); skipped for configs without a `loop` section."""
    if _get(config, "loop") is _MISSING:
        return
    choice("strategy", tuple(registries.STRATEGIES))
    choice("critic.name", tuple(registries.CRITICS))
    choice("engine.name", tuple(registries.ENGINES))
    if _get(config, "potentials") is not _MISSING:
        choice("potentials.compiler", tuple(registries.COMPILERS))
    choice("loop.no_mode_budget", NO_MODE_BUDGETS)
    choice("loop.validation_bases", VALIDATION_BASES)
    choice("loop.validation_control", VALIDATION_CONTROLS)
    choice("loop.validation_correction", VALIDATION_CORRECTIONS)
    choice("loop.validation_pairing", VALIDATION_PAIRINGS)
    choice("loop.validation_rest", VALIDATION_RESTS)
    control, pairing = (_get(config, f"loop.validation_{k}") for k in ("control", "pairing"))
    if _MISSING not in (control, pairing) and (
        (pairing == "recreate" and control == "matched")
        or (pairing != "recreate" and control == "outside")
    ):
        out.append(
            f"loop.validation_control={control!r} does not go with validation_pairing="
            f"{pairing!r} (recreate: outside | resample; nested / sibling: resample | matched)"
        )
    _llm_problems(config, out, choice)
    choice("policy.name", POLICY_NAMES)
    for field, lo in LOOP_INTS.items():
        integer(field, lo)
    numbers = ("loop.c_explore", "loop.policy_lr", "loop.finetune_lr", "policy.sample_noise_scale")
    for field in LOOP_FRACTIONS + numbers + ("loop.collect_noise_scale",):
        v = _get(config, field)
        if v is _MISSING:
            out.append(f"{field}: missing (a number)")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
            out.append(f"{field}={v!r} must be a number >= 0")
        elif field in LOOP_FRACTIONS and v > 1:
            out.append(f"{field}={v!r} must be in [0, 1]")
    _loop_value_problems(config, out)
    w, h = _get(config, "policy.width"), _get(config, "policy.heads")
    if _is_int(w) and _is_int(h) and h > 0 and w % h:
        out.append(f"policy.width={w} must be divisible by policy.heads={h}")
    _obs_problems(config, out)
    names = _source_problems(config, out)
    suites = _get(config, "eval.suites")
    if suites is _MISSING or isinstance(suites, str) or not suites:
        out.append(f"eval.suites={suites!r} must be a non-empty list (valid: {names})")
    else:
        bad = [x for x in suites if x not in names]
        if bad:
            out.append(f"eval.suites: unknown {bad} (valid: {', '.join(names)})")
    _region_problems(config, out)


def _region_problems(config: Any, out: list[str]) -> None:
    """`sim.hard_regions` (the focused experiment's declared regions): well formed, families
    only, and present whenever a suite or the strategy's allocator reads them."""
    regions = _get(config, "sim.hard_regions")
    regions = () if regions is _MISSING else regions
    if regions:
        out += registries.CONFIG_CHECKS["sim.hard_regions"](regions)  # coda.sim.regions
        src = _get(config, "sim.source")
        if src not in (_MISSING, "families"):
            out.append(f"sim.hard_regions apply to sim.source=families, not {src!r}")
        return
    suites = _get(config, "eval.suites")
    if isinstance(suites, (list, tuple)) and "ood_hard" in suites:
        out.append("eval.suites has ood_hard but sim.hard_regions is empty (declare the regions)")
    strategy = registries.STRATEGIES.get(_get(config, "strategy"))
    if strategy is not None and getattr(strategy.allocator, "where", ""):
        out.append(
            f"strategy={strategy.name!r} resamples inside or outside sim.hard_regions, which is "
            "empty (declare the regions, e.g. configs/focused.py)"
        )


LIBERO_PRO_SUITES = ("ood_swap", "ood_objects", "ood_language", "ood_tasks")


def _source_problems(config: Any, out: list[str]) -> tuple[str, ...]:
    """`sim.source` and, for a LIBERO source, the `libero` section, the backend, and the
    engine and critic of a strategy that critiques (the offline ones: README, LIBERO).
    Returns the suite names the source evaluates on."""
    PERTURBABLE, SUITES = registries.LIBERO_PERTURBABLE, registries.LIBERO_SUITES  # noqa: N806

    SUITE_NAMES, LIBERO_SUITE_NAMES = registries.SUITE_NAMES, registries.LIBERO_SUITE_NAMES  # noqa: N806

    src = _get(config, "sim.source")
    if src is _MISSING or src == "families":
        return SUITE_NAMES
    suite = src[len("libero:") :] if isinstance(src, str) and src.startswith("libero:") else None
    if suite not in SUITES:
        valid = ", ".join(["families"] + [f"libero:{x}" for x in SUITES])
        out.append(f"sim.source={src!r} is unknown (valid: {valid})")
        return SUITE_NAMES
    if _get(config, "sim.programs") not in (_MISSING, (), [], None):
        out.append(f"sim.programs applies to sim.source=families, not {src!r} (libero.tasks)")
    if _get(config, "sim.backend") == "mjx":
        out.append(
            f"sim.source={src!r} needs sim.backend native or auto (LIBERO's contact "
            "sensors are native MuJoCo only)"
        )
    STRATEGIES = registries.STRATEGIES  # noqa: N806 - the registry, read by name

    strategy = STRATEGIES.get(_get(config, "strategy"))
    critiques = strategy is not None and strategy.critique.tests_modes
    # LIBERO's engine writes choices over edits (coda.libero.engine), not SDK programs; the VLM
    # critic reads our families' attributes (dims, mass, friction) that a LIBERO object lacks
    for key, ok in (("engine.name", "offline"), ("critic.name", "offline")):
        val = _get(config, key)
        if critiques and val not in (_MISSING, ok):
            out.append(
                f"{key}={val!r} with sim.source={src!r} and strategy={strategy.name!r}: "
                f"LIBERO scenes are critiqued and edited by the {ok!r} one only (valid: {ok!r})"
            )
    tr, ho = _get(config, "libero.train_states"), _get(config, "libero.heldout_from")
    if not (_is_int(tr) and _is_int(ho) and 0 < tr <= ho < 50):
        out.append(
            f"libero.train_states={tr!r}, libero.heldout_from={ho!r}: need integers with "
            "0 < train_states <= heldout_from < 50 (LIBERO's 50 initial states)"
        )
    levels = _get(config, "libero.shift_levels")
    if (
        levels is _MISSING
        or isinstance(levels, str)
        or not levels
        or not all(_is_int(x) and 1 <= x <= 5 for x in levels)
    ):
        out.append(f"libero.shift_levels={levels!r} must be a non-empty list of levels 1..5")
    lvl = _get(config, "libero.ood_shift_level")
    if not (_is_int(lvl) and 1 <= lvl <= 5):
        out.append(f"libero.ood_shift_level={lvl!r} must be a level 1..5")
    ph = _get(config, "libero.phrasings")
    if not (_is_int(ph) and 1 <= ph <= 8):
        out.append(f"libero.phrasings={ph!r} must be an integer 1..8 (wordings per goal)")
    tasks = _get(config, "libero.tasks")
    ids = tasks.split(",") if isinstance(tasks, str) and tasks.strip() else []
    if not isinstance(tasks, str) or not all(x.strip().isdigit() for x in ids):
        out.append(f"libero.tasks={tasks!r} must be task ids like '0,3' ('' = all)")
    elif ids:  # in range of the suite's tasks (LIBERO's data: coda.libero.suites)
        out += registries.CONFIG_CHECKS["libero.tasks"](tasks, suite)
    if suite not in PERTURBABLE:  # LIBERO-PRO perturbs no other suite (libero_90)
        return tuple(n for n in LIBERO_SUITE_NAMES if n not in LIBERO_PRO_SUITES)
    return LIBERO_SUITE_NAMES


DATA_PARALLEL = ("auto", "on", "off")  # loop.data_parallel (coda.loop.distributed.learner_mesh)


def device_problems(
    config: Any, n_devices: int, n_local: int, n_processes: int, backend: str = "native"
) -> list[str]:
    """What `config` cannot do on this device layout (needs JAX's counts, so `loop.run` calls it
    once JAX is up): data-parallel batches must split evenly over the `n_devices` devices, MJX
    buckets (`backend`: the resolved physics backend) over the `n_local` devices of a host, and
    a multi-host run trains one learner."""
    out: list[str] = []
    nd = _get(config, "loop.novel_demos")
    if nd is not _MISSING and not isinstance(nd, bool):
        out.append(f"loop.novel_demos={nd!r} must be True or False")
    dp = _get(config, "loop.data_parallel")
    dp = "auto" if dp is _MISSING else dp
    if n_processes > 1 and dp == "off":
        out.append(
            f"loop.data_parallel='off' with {n_processes} processes: a multi-host run trains "
            "one learner over every host's devices (use 'auto' or 'on')"
        )
    if dp == "on" or (dp == "auto" and n_devices > 1):
        for field in ("loop.policy_batch", "loop.critic_batch", "loop.finetune_batch"):
            v = _get(config, field)
            if _is_int(v) and v % n_devices:
                out.append(
                    f"{field}={v} must be a multiple of the {n_devices} data-parallel devices "
                    f"(or loop.data_parallel='off')"
                )
    if backend == "mjx" and n_local > 1:
        v = _get(config, "loop.bucket_size")
        if _is_int(v) and v % n_local:
            out.append(
                f"loop.bucket_size={v} must be a multiple of the {n_local} local devices MJX "
                "shards each bucket over"
            )
    return out


NO_MODE_BUDGETS = ("novel", "pool")  # loop.no_mode_budget (coda.loop.rounds.plan)
VALIDATION_BASES = ("pool", "parents")  # loop.validation_bases (coda.loop.rounds)
VALIDATION_CONTROLS = ("resample", "matched", "outside")  # coda.engine.pairs.CONTROLS
VALIDATION_CORRECTIONS = ("holm", "bh", "none")  # coda.engine.validate.CORRECTIONS
VALIDATION_PAIRINGS = ("recreate", "nested", "sibling")  # coda.engine.pairs.PAIRINGS
VALIDATION_RESTS = ("keep", "resample")  # coda.engine.pairs.RESTS
OBS_MODES = ("state", "images")  # policy.obs_mode (coda.sim.observe)
IMAGE_PATCH = 8  # coda.policy.configs.VISION_PATCH: image_size must be a multiple of it


def _obs_problems(config: Any, out: list[str]) -> None:
    """policy.obs_mode / image_size (absent = state-only, as configs before them)."""
    mode = _get(config, "policy.obs_mode")
    if mode is _MISSING or mode == "state":
        return
    if mode not in OBS_MODES:
        out.append(f"policy.obs_mode={mode!r} is unknown (valid: {', '.join(OBS_MODES)})")
        return
    size = _get(config, "policy.image_size")
    if not _is_int(size) or size < IMAGE_PATCH or size % IMAGE_PATCH:
        out.append(f"policy.image_size={size!r} must be a positive multiple of {IMAGE_PATCH}")
    backend = _get(config, "sim.backend")
    if backend != "native":
        out.append(
            f"policy.obs_mode='images' needs sim.backend='native' (got {backend!r}): frames are "
            "rendered on the host between chunks, and the MJX episode is one jitted program "
            "without a renderer ('auto' picks mjx on an accelerator)"
        )


def validate(config: Any, families: Iterable[str] | None = None) -> None:
    """Raises `ConfigError` listing every invalid field (one line), else returns None."""
    bad = problems(config, families)
    if bad:
        raise ConfigError("invalid config: " + "; ".join(bad))


def check_workdir(workdir: str) -> str:
    """The absolute run folder; `ConfigError` if it is a file or cannot be created/written."""
    path = os.path.abspath(os.path.expanduser(workdir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--workdir={workdir!r} is a file, not a folder")
    parent = path
    while not os.path.exists(parent):  # nearest existing ancestor decides creatability
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"--workdir={workdir!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir={workdir!r}: {parent!r} is not writable")
    return path


def cache_dir(config: Any = None) -> str:
    """JAX's persistent compilation cache folder: `config.cache_dir` if set, else
    `$CODA_CACHE_DIR`, else ~/.cache/coda/jax (shared by runs; never inside a run folder)."""
    value = _get(config, "cache_dir") if config is not None else _MISSING
    if value is _MISSING or not value:
        value = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    return os.path.abspath(os.path.expanduser(str(value)))


# Fields added to configs/coda.py after runs were made: a run folder's config.json without one
# ran with this value, so it compares equal to a config that sets it (resume, start_from, study)
ADDED_DEFAULTS = {
    "sim.programs": [],
    "loop.novel_demos": False,
    "sim.source": "families",
    "libero.tasks": "",
    "libero.train_states": 8,
    "libero.heldout_from": 40,
    "libero.shift_levels": [1, 2],
    "libero.ood_shift_level": 3,
    "libero.phrasings": 1,
    "policy.max_state_dim": 0,
    "potentials.compiler": "offline",
    "loop.retest_after": 0,
    "loop.max_retests": 1,
    "loop.validation_correction": "none",  # each test decided on its raw p
    "loop.validation_pairing": "sibling",  # targeted and control both edited from the base
    "loop.validation_rest": "keep",  # recreate pairs: the bases' other factors as they are
    "loop.finetune_ema": -1.0,  # the BC start's EMA decay in the rounds too
    "sim.hard_regions": [],  # no declared regions
    "loop.select_min_auc": 0.0,  # best-of-j whatever the critic's AUC
}


def with_added_defaults(old: dict[str, Any]) -> dict[str, Any]:
    """A saved config (JSON dict) with the fields added since it was written filled in."""
    out = copy.deepcopy(old)
    for path, value in ADDED_DEFAULTS.items():
        node = out
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node.setdefault(leaf, value)
    return out
