"""LIBERO studies (issue 30): strategies from one BC start per seed on a LIBERO suite, scored on
LIBERO's held-out initial states and LIBERO-PRO's perturbations.

`python -m launch.study --config=configs/libero_study.py --workdir=runs/libero_variants` runs
every (strategy, seed) cell through `coda.loop.run` (resumable) and writes
`<workdir>/table1.{json,md}` (the study's table: OOD = the mean of the OOD suites).

Variants:
* '' (registered: benchmarks/registrations/issue30_libero_variants.md): does learning from the
  planner's demos on edited source-task variants (coda.libero.program) raise LIBERO-PRO's
  position (`ood_swap`) and task (`ood_tasks`) success over the same budget of layout-shifted
  initial states? Arms `fresh_task_bc` (demos on layout-shifted training states),
  `domain_randomization_demos` (demos on layout and object-instance edits: shifts, swaps, moves,
  instances) and `uniform_variants_demos` (the same plus new goals), libero_spatial, 3 seeds,
  3 rounds of 40 scenes, 100 episodes per suite, every training scene told in one of 4
  wordings (`libero.phrasings`). Cost: the registration's estimate; measured in its results;
* 'pro_spatial' | 'pro_object' | 'pro_goal' (registered:
  benchmarks/registrations/issue30_libero_pro.md): the paper's Table 2 on one suite. Arms `sft`
  (BC-only: the BC start's planner demos of the source tasks, the same updates per round),
  `domain_randomization_demos` (DR) and `coda_demos` (the critic and engine choose the scenes:
  targeted variants of diagnosed LIBERO modes, `coda.libero.engine`), each learning by BC on
  its scenes' planner demos, half of every BC batch from the rounds' scenes
  (`loop.bc_round_share`, since benchmarks/registrations/issue30_libero_pro_v3.md: without it
  the rounds' demos were 9 % of the gradient, benchmarks/results/libero_variants_mechanism.md);
  budgets as ''. Cost: ~40 min per cell on the 2-core VM beside another run;
* 'smoke': the LIBERO smoke loop, 2 arms x 1 seed (tests).
"""

import importlib.util
import os

from ml_collections import ConfigDict

PRO = {"pro_spatial": "libero_spatial", "pro_object": "libero_object", "pro_goal": "libero_goal"}
VARIANTS = ("", *PRO, "smoke")
ARMS = ("fresh_task_bc", "domain_randomization_demos", "uniform_variants_demos")
PRO_ARMS = ("sft", "domain_randomization_demos", "coda_demos")


def _libero_loop(arg):
    """configs/libero_loop.py's get_config (loaded by path: configs/ is not a package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libero_loop.py")
    spec = importlib.util.spec_from_file_location("_libero_loop_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def get_config(arg: str | None = None) -> ConfigDict:
    c = ConfigDict()
    c.study = ConfigDict()
    c.study.strategies = ARMS  # coda.loop.strategies.STRATEGIES names
    c.study.seeds = (0, 1, 2)  # each cell's loop `seed` (PRNG: policy, rollouts, variants)
    c.study.share_start = True  # one BC start per seed, adopted by every arm
    c.study.transfer = ()  # no memory-transfer pair
    c.study.cell_process = False  # every cell in this process
    if arg in (None, "", *PRO):
        # libero_spatial (or the variant's suite), its step cap, the native backend
        base = _libero_loop(PRO.get(arg))
        base.loop.rounds = 3
        base.loop.budget = 40  # four scenes per task and round
        base.loop.policy_updates = 200  # K_π per round (the BC arms' updates on the demo rows)
        base.eval.episodes = 100  # 10 tasks x 10 held-out initial states per suite
        base.libero.phrasings = 4  # every arm's training scenes in 4 wordings of their goal
        c.study.base = base
        if arg in PRO:
            c.study.strategies = PRO_ARMS
            # coda's control experiments: the diagnosed factor's edit on top of an edit of
            # another factor vs that edit alone (coda.libero.engine, "nested"); the loop's
            # default compares a failure's edits with the factor's other edits, which the
            # mechanism pilot found indistinguishable for a BC start that fails most structural
            # edits alike (benchmarks/registrations/issue30_libero_pro.md)
            base.loop.validation_pairing = "nested"
            base.loop.validation_control = "resample"  # our families' control kind (unused)
            # half of every BC batch from the demos of the rounds' scenes, half from round 0's
            # (the rounds' scenes are what the arms differ in; uniform over the kept rows they
            # were 9 % of the gradient: benchmarks/results/libero_variants_mechanism.md)
            base.loop.bc_round_share = 0.5
    elif arg == "smoke":
        c.study.strategies = ("fresh_task_bc", "uniform_variants_demos")
        c.study.seeds = (0,)
        base = _libero_loop("smoke")
        base.libero.phrasings = 2
        c.study.base = base
    else:
        valid = ", ".join(repr(v) for v in VARIANTS)
        raise ValueError(f"unknown config variant {arg!r}; valid: {valid}")
    return c
