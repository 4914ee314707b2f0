"""LIBERO evaluation: `python -m launch.libero --config=configs/libero.py
--config.suite=libero_spatial --config.perturbation=swap --config.policy=random`.

Suites: libero_spatial | libero_object | libero_goal | libero_10 | libero_90.
Perturbations: none | swap | object | lan | task (LIBERO-PRO's shipped suites) |
layout1..layout5 (LIBERO-Plus layout shifts) | camera1..5, light1..5, noise1..5
(LIBERO-Plus-style observation perturbations: rendered frames only: an image policy's inputs on
the Panda, and the GIFs).
Policies: planner (goals as ordered stages: pick-and-place, drawer pull / push, knob turn, door
swung shut or opened by its handle bar; goals it cannot do count as failed with the reason) |
random | hold | a trained run: `--config.policy=<launch.main workdir>` (its last complete round)
or `<workdir>/checkpoints/round_000k` (coda.loop.acting; a run trained with
sim.source=libero:<suite>, configs/libero_loop.py).

Robots: panda, the default (LIBERO's Franka Panda under OSC_POSE, LIBERO's protocol,
coda.libero.evaluate_panda: planner, hold, random, or an openpi pi0.5 checkpoint
`--config.policy=openpi:<dir>`, README "Evaluating an openpi pi0.5 LIBERO checkpoint") |
floating (our floating gripper: planner, random, hold, a trained CoDA run). Both take every
perturbation above.

Cost: the Panda planner over a suite's 500 episodes takes ~9 (libero_goal) to ~22 min
(libero_10) on one CPU core (benchmarks/results/libero_panda_planner_*_50.json's wall_seconds),
`--config.panda.workers=0` spreads its batches over every core;
`smoke` (2 episodes of 20 steps, one GIF) ~10 s.
"""

from ml_collections import ConfigDict


def get_config(arg: str | None = None) -> ConfigDict:
    c = ConfigDict()
    c.suite = "libero_spatial"  # the LIBERO suite evaluated (list above)
    c.perturbation = "none"  # LIBERO-PRO / LIBERO-Plus perturbation (list above); none = off
    c.policy = "planner"  # the acting policy: planner | random | hold | a run folder | openpi:<dir>
    c.robot = "panda"  # panda (LIBERO's Panda) | floating (our gripper; above)
    c.tokenizer = ""  # openpi: paligemma_tokenizer.model; "" = in <dir> / $CODA_PALIGEMMA_TOKENIZER
    c.tasks = ""  # "" = every task of the suite; else task ids, e.g. "0,3"
    c.init_states = 0  # initial states per task; 0 = all 50 (all from init_offset on)
    c.init_offset = 0  # first initial state index (split a long evaluation by state range)
    c.seed = 0  # PRNG seed (>= 0) of the policies and the perturbations
    c.horizon = 10  # robot=floating: control steps per action chunk
    c.num_chunks = 0  # robot=floating: chunks per episode; 0 = the suite's LIBERO step cap
    c.nthread = 0  # robot=floating: native backend threads; 0 = all cores
    c.gifs = 2  # agent-view GIFs of the first episodes of each task (<= 3 advised); 0 = off
    c.gif_size = 128  # px; must divide the 256 px render
    c.panda = ConfigDict()  # robot=panda's protocol (coda.libero.evaluate_panda)
    c.panda.batch = 10  # initial states stepped together (PandaEnv environments)
    # processes running the batches (state-based policies; the same outcomes as 1); 0 = one per
    # CPU core; an openpi checkpoint runs in one (its model takes the batch)
    c.panda.workers = 1
    c.panda.image_size = 256  # px of the cameras' renders (openpi's LIBERO_ENV_RESOLUTION)
    c.panda.wait_steps = 10  # no-op steps before each episode (objects settle; not counted)
    c.panda.max_steps = 0  # policy steps per episode; 0 = the suite's LIBERO step cap
    # fixtures where LIBERO's env.seed(s); env.reset() puts them (coda.libero.placement), s =
    # this; -1 = the centres of their regions (LIBERO samples them within about 1 cm per reset)
    c.panda.fixture_seed = -1
    # True: as openpi's / OpenVLA-OFT's LIBERO clients run (fixture_seed 7 / 0): env.seed once per
    # task, one reset per episode, so initial state s gets the (s + 1)-th reset's fixtures (each
    # state in its own environment); False: the first reset's placement for every state
    c.panda.fixture_chain = False
    c.openpi = ConfigDict()  # an openpi:<dir> checkpoint: what its params do not store
    c.openpi.action_horizon = 10  # actions predicted per inference (pi05_libero: 10)
    c.openpi.replan_steps = 5  # of them executed before the next inference (openpi's client: 5)
    c.openpi.state_in_prompt = False  # discrete_state_input (pi05_libero: False, state unused)
    c.openpi.max_token_len = 200  # prompt tokens (pi05_libero: 200)
    c.openpi.sample_steps = 10  # flow-matching Euler steps per inference (openpi: 10)
    c.openpi.dtype = "bfloat16"  # params and compute: bfloat16 (as openpi serves) | float32
    if arg == "smoke":
        c.tasks = "0"
        c.init_states = 2
        c.num_chunks = 2  # robot=floating's episode length
        c.panda.max_steps = 20  # robot=panda's
        c.gifs = 1
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '', 'smoke'")
    return c
