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
* '' (CPU scale): the 9 strategies x 3 seeds = 27 cells + the transfer pair (2 x 3 = 6 `oft`
  cells) on `_cpu_base` (the self-imitation loop, 2 rounds, from an in-band BC start shared by
  the strategies of a seed); the run's wall time per cell is in benchmarks/results/table1.md;
* 'smoke': 2 strategies x 1 seed on the smoke loop config (`configs/coda.py:smoke`) + the
  transfer pair at that seed, for tests;
* 'gpu': `configs/coda.py:gpu` per cell, 9 strategies x 3 seeds. NOT run or timed: no
  accelerator run of it has been made.
* 'prereg': Table 1 as pre-registered in benchmarks/preregistration/table1.md (issue 29 item 7):
  the 9 strategies x 5 seeds = 45 cells on `_prereg_base` (the default loop: coda learns by the
  method's rule, `coda_selfimit` is its self-imitation row), no transfer pair. Command:
  `python -m launch.study --config=configs/table1.py:prereg --workdir=runs/table1_prereg`;
  its cost and results: benchmarks/results/table1_prereg.md;
* 'curve': the rounds curve as pre-registered in benchmarks/preregistration/rounds_curve.md
  (issue 29 item 9, the paper's Figure 2): `coda` and `fresh_task_bc` at seed 0 for 15 rounds on
  `_prereg_base`, every suite evaluated every round; `benchmarks/rounds_curve.py` draws it;
* 'srg': the registered addendum to the pre-registered Table 1
  (benchmarks/registrations/issue29_srg_addendum.md): `coda` and `success_rate_guided` (its
  failure-rate weights fixed in c96e09b; in the 'prereg' run it equalled uniform_variants) at
  the 5 seeds on `_prereg_base`; coda's cells also check that the prereg's coda cells reproduce;
* 'transfer': the memory-transfer pair on its own, measurable at CPU scale: `coda` (the memory
  source) and the `oft` pair, 3 seeds, on the CPU base with the two cube programs as the
  training pool (`sim.programs = CUBE_PROGRAMS`; held-out tasks still proposed from the
  families) — on the seeded programs of the '' cells `oft` never succeeds.
"""

import importlib.util
import os

from ml_collections import ConfigDict

from coda import registries

VARIANTS = ("", "smoke", "gpu", "transfer", "prereg", "curve", "srg")
# The transfer pair's training programs (variant `transfer`): the cube programs `oft` fits at
# CPU scale, where it fails on the seeded programs of the other cells
# (benchmarks/results/oft_bc_probe.md).
CUBE_PROGRAMS = (
    """add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_blue")
set_task("pick_place", target="target", goal="goal")
sample_layout()
""",
    """add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
""",
)
# Table 1's rows, from the strategy registry: the method, every baseline, the self-imitation
# variant of the method (its own row: issue 29) and the no-memory ablation.
TABLE1_STRATEGIES = tuple(
    name for name, s in registries.STRATEGIES.items() if s.kind in ("method", "baseline")
) + ("coda_selfimit", "no_memory")


def _loop_config(arg, strategy: str = "coda") -> ConfigDict:
    """`configs/coda.py`'s get_config (loaded by path: configs/ is not a package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coda.py")
    spec = importlib.util.spec_from_file_location("_coda_base_config", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    return base.get_config(arg, strategy=strategy)


def _cpu_base() -> ConfigDict:
    """The loop every CPU cell runs: `configs/coda.py:selfimit` (the recipe that lifts an
    in-band BC start, benchmarks/results/loop_selfimit.md) for 2 rounds after round 0.

    Round 0 is the default's BC start (`loop.bc_steps` on the pool's planner demos plus
    `loop.demo_seeds` more layouts and the `loop.demo_dart` passes; it starts inside the success
    band), trained once per seed and adopted by every BC-start strategy of that seed
    (`study.share_start`); each round is B = 64 scenes x 4 rollouts, 200 fine-tuning updates at
    3e-4 / batch 128, 64 episodes per evaluation suite. Results and the wall time per cell:
    benchmarks/results/table1.md.
    """
    c = _loop_config("selfimit")
    c.loop.rounds = 2
    return c


def _prereg_base() -> ConfigDict:
    """The registered Table 1's loop: `configs/coda.py`'s default (chunk-critic advantages on
    Φ-shaped targets, best-of-4 at collection, raw weights after round 0) for 2 rounds after the
    shared BC start, with 64 episodes per evaluation suite (the '' variant's size)."""
    c = _loop_config(None)
    c.loop.rounds = 2
    c.eval.episodes = 64
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
    # False: every cell in this process (a run releases what it compiled when it ends:
    # coda.lifetime); True: each cell in its own spawned process (a crash loses only the cell)
    c.study.cell_process = False
    # study.base: the loop config every cell shares (set per variant below)
    if arg in (None, ""):
        c.study.base = _cpu_base()
    elif arg == "smoke":  # tests: 2 strategies x 1 seed, the smoke loop (one round after round 0)
        c.study.strategies = ("coda", "sft")
        c.study.seeds = (0,)
        c.study.base = _loop_config("smoke")
        c.study.base.loop.rounds = 1
    elif arg == "transfer":
        c.study.strategies = ("coda",)
        c.study.base = _cpu_base()
        c.study.base.sim.programs = CUBE_PROGRAMS
    elif arg == "prereg":  # benchmarks/preregistration/table1.md: do not edit after its run
        c.study.seeds = (0, 1, 2, 3, 4)
        c.study.transfer = ()
        c.study.base = _prereg_base()
    elif arg == "srg":  # registrations/issue29_srg_addendum.md: do not edit after its run
        c.study.strategies = ("coda", "success_rate_guided")
        c.study.seeds = (0, 1, 2, 3, 4)
        c.study.transfer = ()
        c.study.base = _prereg_base()
    elif arg == "curve":  # benchmarks/preregistration/rounds_curve.md
        c.study.strategies = ("coda", "fresh_task_bc")
        c.study.seeds = (0,)
        c.study.transfer = ()
        c.study.base = _prereg_base()
        c.study.base.loop.rounds = 15
    elif arg == "gpu":  # untested: no accelerator run of this variant has been made
        c.study.base = _loop_config("gpu")
    else:
        valid = ", ".join(repr(v) for v in VARIANTS)
        raise ValueError(f"unknown config variant {arg!r}; valid: {valid}")
    return c
