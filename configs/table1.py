"""A mini Table 1: CoDA against its baselines and the no-memory ablation, several seeds each.

`python -m launch.study --config=configs/table1.py --workdir=runs/table1` runs every
(strategy, seed) cell through `coda.loop.run` in `<workdir>/<strategy>/seed<k>/` (resumable:
finished cells are skipped) and writes `<workdir>/table1.{json,md}` (`coda.study`).

Fields:
* `study.strategies`: `coda.loop.strategies.STRATEGIES` names (a typo fails listing them);
* `study.seeds`: the loop's `seed` of each cell (pool, suites, PRNG keys all follow it);
* `study.transfer`: (backbone, source strategy) of the memory-transfer pair, `()` = none: two
  more cells per seed, `<backbone>_scratch` (the `coda` strategy on that backbone, fresh memory)
  and `<backbone>_memory` (the same, seeded with the finished source cell's memory of that seed,
  `loop.memory_from`), same budget (`coda.study`); on by default: ('oft', 'coda');
* `study.base`: the loop config every cell shares (`configs/coda.py`'s fields); each cell is
  `study.base` with `strategy` and `seed` set. Override it like launch.main's config, e.g.
  `--config.study.base.loop.rounds=1`.

Variants:
* '' (CPU scale): the 7 strategies x 3 seeds = 21 cells + the transfer pair (2 x 3 = 6 `oft`
  cells), sized so that the 21 cells fit <= 2 hours on a 2-core CPU (the estimate and how it
  was measured are beside `_cpu_base`; the 6 transfer cells are not in that estimate);
* 'smoke': 2 strategies x 1 seed on the smoke loop config (`configs/coda.py:smoke`) + the
  transfer pair at that seed, for tests;
* 'gpu': `configs/coda.py:gpu` per cell, 7 strategies x 3 seeds. NOT run or timed: no
  accelerator run of it has been made.
"""

import importlib.util
import os

from ml_collections import ConfigDict

VARIANTS = ("", "smoke", "gpu")
# Table 1's rows: the method, the five baselines and the no-memory ablation.
TABLE1_STRATEGIES = (
    "coda",
    "zero_shot",
    "sft",
    "domain_randomization",
    "uniform_variants",
    "success_rate_guided",
    "no_memory",
)


def _loop_config(arg, strategy: str = "coda") -> ConfigDict:
    """`configs/coda.py`'s get_config (loaded by path, as configs/sft.py does)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coda.py")
    spec = importlib.util.spec_from_file_location("_coda_base_config", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    return base.get_config(arg, strategy=strategy)


def _cpu_base() -> ConfigDict:
    """The default loop config shrunk so that 21 cells fit <= 2 hours on 2 CPU cores.

    The default (`configs/coda.py`) takes ~28 min per run on this machine
    (benchmarks/results/loop_default.json); 21 cells need <= ~5.7 min each. Shrunk: one family
    (pick-place; its held-out task program keeps the ood_tasks suite), 8 pool layouts, 12-chunk
    episodes, a narrower 1-layer policy with 4 flow steps, 1,000 BC steps on the pool + 24 more
    layouts + one DART pass (what one cell's budget allows; the default's 6,000 steps on 256
    layouts + 2 DART passes is what reaches the band), 2 rounds of B = 8 scenes, short update
    blocks, 16 episodes per suite.

    Measured (2026-12-01, one `coda` cell, seed 0, alone in its process, cold in-process JIT,
    on the 2-core machine while two other training jobs ran, load average 5-8): 350 s wall
    (round 0 ~205 s incl. compiles and 1,000 BC steps in ~110 s; round 1 120 s; round 2 26 s).
    The smoke study (`:smoke`, 2 cells in one process) ran its first cell (coda) in 110 s and
    its second (sft: no critique, warm) in 55 s: later cells reuse the process's compiled
    functions.
    Estimate for the 21 cells in one `launch.study` process at that load: <= 21 x 350 s = 2.0 h
    if nothing were reused; ~1 h with the warm-cell saving (zero_shot cells skip BC and updates).
    Learning at this size: that cell scored 0/16 ID and 0/64 OOD at rounds 0 and 2 (BC loss
    0.13, planner 100 % on the pool): 1,000 BC steps do not reach the success band, so the CPU
    table measures cost, not the ordering. A BC start shared by the strategies of a seed (round
    0 is the same for every strategy with `bc_start`) might afford the default's 6,000-step
    recipe (40.6 % ID; its round 0 took ~750 s under load, x 3 seeds): unmeasured, and it needs
    a loop hook (`loop.start_from`, proposed in the study's report) that does not exist yet.
    """
    c = _loop_config(None)
    c.sim.families = ("pick_place",)
    c.sim.programs_per_family = 1
    c.sim.seeds_per_program = 8
    c.sim.num_chunks = 12
    c.policy.width = 64
    c.policy.expert_width = 32
    c.policy.depth = 1
    c.policy.heads = 2
    c.policy.state_hidden = 64
    c.policy.num_state_tokens = 1
    c.policy.sample_steps = 4
    c.loop.rounds = 2
    c.loop.budget = 8
    c.loop.num_candidates = 1
    c.loop.critiques_per_mode = 2
    c.loop.critic_updates = 60
    c.loop.policy_updates = 20
    c.loop.bc_steps = 1000
    c.loop.validate_n = 4
    c.loop.max_validations = 1
    c.loop.bucket_size = 8
    c.loop.updates_per_call = 20
    c.loop.replay_size = 5000
    c.loop.demo_cap = 4000
    c.loop.demo_seeds = 24
    c.loop.demo_dart = (0.3,)
    c.critic.n_probes = 1
    c.critic.n_repeats = 0
    c.eval.episodes = 16
    c.render.failures_per_round = 1
    c.render.width = c.render.height = 96
    return c


def get_config(arg: str | None = None) -> ConfigDict:
    c = ConfigDict()
    c.study = ConfigDict()
    c.study.strategies = TABLE1_STRATEGIES  # coda.loop.strategies.STRATEGIES names
    c.study.seeds = (0, 1, 2)  # each cell's loop `seed`
    # BC-start strategies adopt the first one's round 0 at the same seed (`loop.start_from`):
    # the SFT start is trained once per seed (round 0 depends on the strategy only via bc_start)
    c.study.share_start = True
    # the memory-transfer pair (the method's OpenVLA-OFT result): (backbone, source strategy)
    c.study.transfer = ("oft", "coda")
    if arg in (None, ""):
        c.study.base = _cpu_base()
    elif arg == "smoke":  # tests: 2 strategies x 1 seed, the smoke loop (one round after round 0)
        c.study.strategies = ("coda", "sft")
        c.study.seeds = (0,)
        c.study.base = _loop_config("smoke")
        c.study.base.loop.rounds = 1
    elif arg == "gpu":  # untested: no accelerator run of this variant has been made
        c.study.base = _loop_config("gpu")
    else:
        raise ValueError(f"unknown config variant {arg!r}; valid: '', 'smoke', 'gpu'")
    return c
