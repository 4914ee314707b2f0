"""The CoDA main experiment: `--config=configs/coda.py` (the default: a multi-round loop sized
for a 2-core CPU), `:smoke` (tiny policy, few scenes: the plumbing, not learning), `:gpu` (one
accelerator) or `:selfimit` (the self-imitation recipe as Table 1 and loop_selfimit.md ran it:
10 rounds, collection at flow-noise 0.3, 64 episodes per suite). The default's rounds fine-tune
by success-filtered self-imitation on resampled pool scenes and it evaluates 256 episodes per
suite, so its report resolves the learning; its results and wall time:
benchmarks/results/loop_default.md.

Baselines and ablations: `--config.strategy=NAME`, any `coda.loop.strategies.STRATEGIES` name
(e.g. `--config=configs/coda.py:smoke --config.strategy=sft`); every other field stays as here,
so a baseline runs with the method's budgets.

Override any field from the command line, e.g. `--config.loop.budget=64`; a misspelt field
fails (the config is locked), and so does a bad value (`coda.runconfig.validate`).

Loop symbols (method §3.5): B = loop.budget, N = loop.rollouts_per_variant,
C = loop.critiques_per_mode, K_Q = loop.critic_updates, K_π = loop.policy_updates,
band = loop.band, triggers = loop.min_modes_in_band / loop.plateau_updates.
"""

from ml_collections import ConfigDict

from coda import registries

FAMILIES = tuple(registries.FAMILIES)  # every registered task family, in proposal order
VARIANTS = ("", "smoke", "gpu", "selfimit")


def awr_rounds(c: ConfigDict) -> None:
    """The rounds of the default before 2026-12-01: critic-weighted AWR (n-step advantages) at
    the run's one learning-rate schedule, half of every batch planner demos, fresh tasks for the
    budget no mode claims, and the "no mode in band" stop from round 3."""
    c.loop.advantage = "nstep"
    c.loop.finetune_lr = 0.0
    c.loop.finetune_batch = 0
    c.loop.demo_fraction = 0.5
    c.loop.no_mode_budget = "novel"
    c.loop.min_stop_round = 3


def get_config(arg: str | None = None, strategy: str = "coda") -> ConfigDict:
    c = ConfigDict()
    c.seed = 0  # the run's seed: training pool, evaluation suites and every PRNG key follow it
    c.strategy = strategy  # method, baseline or ablation: a coda.loop.strategies.STRATEGIES name
    # JAX persistent compilation cache; "" = $CODA_CACHE_DIR, else ~/.cache/coda/jax
    c.cache_dir = ""

    c.sim = ConfigDict()
    c.sim.backend = "auto"  # auto | native | mjx ("auto": mjx with an accelerator)
    # Where scenes come from (coda.loop.sources): "families" (our task families below) or
    # "libero:<suite>" (a LIBERO suite's tasks and fixed initial states, the `libero` section;
    # native backend; suites: coda.registries.LIBERO_SUITE_NAMES; configs/libero_loop.py)
    c.sim.source = "families"
    c.sim.families = ("pick_place", "stack_or_insert")  # task families of the pool (FAMILIES)
    c.sim.split = "train"  # train | heldout | all (object instances / categories)
    # Training pool = programs x seeds per family: each program is one structure (one bucket),
    # its seeds vary layout σ and attributes α inside the bucket.
    c.sim.programs_per_family = 1  # scene programs proposed per family
    c.sim.seeds_per_program = 8  # layouts / attributes (Exec seeds) per program
    # Fixed training programs (scene-program sources, each of a family in sim.families) instead
    # of programs_per_family proposed ones; () = proposed. The held-out task programs are still
    # proposed from the families. E.g. the transfer pair's cube programs (configs/table1.py).
    c.sim.programs = ()
    # Declared hard regions of the scene space (coda.sim.regions; the focused experiment,
    # configs/focused.py), e.g. ("object.y > 0.15", "object.size > 0.0226"): the pool and round
    # 0's demos are drawn outside all of them, the ood_hard suite inside; () = none
    c.sim.hard_regions = ()
    c.sim.horizon = 10  # H: control steps per action chunk
    c.sim.num_chunks = 14  # episode length in chunks (14 x 10 x 0.04 s = 5.6 s)
    c.sim.nthread = 0  # native backend threads; 0 = all cores

    c.libero = ConfigDict()  # sim.source=libero:<suite> only
    c.libero.tasks = ""  # task ids of the suite, e.g. "0,3"; "" = all
    c.libero.train_states = 8  # training pool: initial states 0 .. train_states-1 of each task
    c.libero.heldout_from = 40  # initial states >= this are never trained on (the OOD suites')
    c.libero.shift_levels = (1, 2)  # LIBERO-Plus layout-shift levels of a round's fresh scenes
    c.libero.ood_shift_level = 3  # the ood_shift suite's level (held-out states, shifted)
    # wordings of each goal the training scenes (demo layouts, a round's scenes) are told in,
    # in turn: 1 = LIBERO's own sentence only; k > 1 adds templated ones (never an evaluation
    # suite's: coda.libero.goals.phrasings); the pool (the id suite) keeps LIBERO's own
    c.libero.phrasings = 1

    c.policy = ConfigDict()  # state-only pi0.5 (coda.policy `small` structure, sized here)
    c.policy.name = "small"  # small (pi0.5) | oft (OpenVLA-OFT-style: expert_width,
    # sample_steps and sample_noise_scale do not apply to it)
    c.policy.width = 96  # Gemma (prefix) width
    c.policy.expert_width = 48  # action expert width
    c.policy.depth = 2  # transformer layers (prefix and expert)
    c.policy.heads = 2  # attention heads (width must divide by it)
    c.policy.state_hidden = 128  # hidden width of the state encoder MLP
    c.policy.num_state_tokens = 2  # prefix tokens the flat state is encoded into
    c.policy.sample_steps = 10  # Euler steps of the flow-matching sampler
    c.policy.max_token_len = 16  # prompt tokens (instructions are cut / padded to it)
    c.policy.max_state_dim = 0  # flat state width the policy reads; 0 = the policy's own (64)
    # Flow-noise scale at sampling (1 = the trained prior). Lower samples nearer the mode: the
    # BC start's held-out success rises with it (benchmarks/results/finetune.md), so it is a
    # knob to report, kept at 1 so results compare with the literature's sampler.
    c.policy.sample_noise_scale = 1.0
    # Observations (coda.sim.observe): "state" = the flat simulator state + the instruction;
    # "images" = agent-view + wrist frames of image_size px, rendered at chunk endpoints, through
    # a SigLIP sized like the VLM (width, depth; patch 8) + proprioceptive state + instruction.
    # Images need sim.backend=native (MJX cannot render inside its jitted episode).
    c.policy.obs_mode = "state"
    c.policy.image_size = 64  # px per side (a multiple of 8); 64 -> 64 tokens per camera

    c.loop = ConfigDict()
    # The default is sized to show learning on the 2-core CPU: 8 rounds of 200 fine-tuning
    # updates each and 256 evaluation episodes per suite, so the report's "Did the policy
    # learn?" (round 0 vs rounds 5-8, paired by episode) resolves a change of a few points.
    # Since issue 29 the rounds learn by the method's rule (the chunk critic's advantages on
    # Φ-shaped targets, best-of-j at collection); results and wall time of the previous default
    # (success-filtered self-imitation, j = 1, now the `coda_selfimit` strategy):
    # benchmarks/results/loop_default.{md,json}.
    c.loop.rounds = 8  # rounds after round 0
    c.loop.budget = 64  # B: scenes generated per round
    c.loop.rollouts_per_variant = 4  # N: rollouts of each generated scene
    c.loop.num_candidates = 4  # j: best-of-j chunks by the critic at collection (1 = off)
    # best-of-j only while the critic's last held-out ranking AUC (by return) is >= this; below
    # it, or before any was measured, j = 1 (coda.loop.steps.rollouts.candidates); 0 = always
    c.loop.select_min_auc = 0.0
    c.loop.critiques_per_mode = 4  # C: failures critiqued per mode and round, at most
    c.loop.critic_updates = 200  # K_Q per block
    c.loop.policy_updates = 200  # K_π per block
    c.loop.band = (0.1, 0.9)  # success band (allocation, routing, stop rule)
    c.loop.epsilon = 0.25  # ε: share of B spent on novel seeds
    c.loop.replay_fraction = 0.1  # share of B replaying modes at or above the band
    # Where the UCB share of B goes while no mode is validated yet: "novel" (fresh seeded tasks,
    # as the method's allocator does) | "pool" (resampled layouts / attributes of the training
    # programs: scenes inside the success band, which self-imitation can learn from)
    c.loop.no_mode_budget = "pool"
    # planner demos of the round's fresh (novel) scenes join the demo rows AWR batches mix in
    # (loop.demo_fraction); sft learns fresh tasks from such demos (results/loop_selfimit.md)
    c.loop.novel_demos = False
    c.loop.c_explore = 1.0  # UCB exploration coefficient of the allocator
    c.loop.min_modes_in_band = 8  # trigger: another update block only with >= this many...
    c.loop.plateau_updates = 200  # ...and policy success not flat for this many updates
    c.loop.max_extra_blocks = 2  # triggered update blocks per round, at most
    # "no mode in band" stops the run only from this round on (100: every round runs)
    c.loop.min_stop_round = 100
    c.loop.max_env_steps = 0  # total physics-step budget (0 = unlimited)
    c.loop.bc_steps = 6000  # round 0: BC on planner demos (the SFT start)
    # targeted / control pairs per candidate mode (why 32: benchmarks/results/loop_selfimit.md)
    c.loop.validate_n = 32
    # What a candidate mode's targeted / control pairs (and a validated one's targeted
    # variants) are edited from: "pool" (the training pool's scenes of the mode's families, in
    # the success band; the parents if the program binds to none of them) | "parents" (the
    # diagnosed failures themselves; why not: benchmarks/results/validation_power.md).
    c.loop.validation_bases = "pool"
    # How the control varies its factor: "outside" (recreate pairs: the diagnosed factor moved
    # out of the failures' neighbourhood; issue 28, was "resample") | "resample" (redrawn from
    # the family's distribution) | "matched" (nested / sibling: moved by the targeted edit's
    # normalised magnitude)
    c.loop.validation_control = "outside"
    # How a targeted / control pair is made (coda.engine.pairs): "recreate" (targeted i = base i
    # with the diagnosed factor where the mode's failures had it, control i = base i with that
    # factor redrawn from the family: the pair differs only in the diagnosed factor; issue 28,
    # was "nested") | "nested" (targeted i = control i with the mode's edit, the control varies
    # another factor) | "sibling" (both edited from the same base, each in its own factor)
    c.loop.validation_pairing = "recreate"
    # recreate pairs: the bases' other factors "keep" (as they are) | "resample" (redrawn)
    c.loop.validation_rest = "keep"
    c.loop.max_validations = 3  # candidate modes tested per round
    # Multiplicity correction over a round's validation tests: "holm" (FWER <= α) | "bh"
    # (Benjamini–Hochberg, FDR <= α) | "none" (each test on its raw p; coda.engine.validate)
    c.loop.validation_correction = "holm"
    # Re-testing refuted modes (MemoryStore.reopen_refuted): a refuted mode that gathered
    # `retest_after` diagnoses in later rounds is a candidate again (each re-test is another
    # test at the same α); 0 = never re-test
    c.loop.retest_after = 0
    c.loop.max_retests = 1  # re-tests per refuted mode, at most
    c.loop.max_parents = 8  # diagnosed scenes kept per mode (generation parents)
    c.loop.bucket_size = 16  # variants per rollout (padded: a few compiled shapes)
    # Learner minibatches split over jax.devices() (all hosts' in a multi-host run; gradients
    # all-reduced): auto = when there is more than one device | on | off. policy_batch and
    # critic_batch must be multiples of the device count (README "Multi-device and multi-host").
    c.loop.data_parallel = "auto"
    c.loop.policy_lr = 1e-3  # policy peak learning rate (BC start; every round if finetune_lr=0)
    c.loop.policy_batch = 32  # policy minibatch rows
    # Fine-tuning after the BC start (rounds >= 1): its own warmup-cosine peak rate
    # (0 = one cosine over the whole run at policy_lr; the values chosen in
    # benchmarks/results/finetune_selfimit.md) ...
    c.loop.finetune_lr = 3e-4
    c.loop.finetune_batch = 128  # ... and its minibatch rows (0 = policy_batch)
    c.loop.policy_warmup = 100  # warmup updates of the policy's learning rate
    c.loop.critic_batch = 128  # chunk-critic minibatch rows
    # planner-demo rows in each AWR batch (weight 1); the own-rollout rows carry the rest of the
    # batch's weight whenever any of them has a positive advantage (coda.train.learner.awr_rows)
    c.loop.demo_fraction = 0.25
    c.loop.awr_positive_only = True  # AWR: replay rows with advantage <= 0 get weight 0
    c.loop.updates_per_call = 20  # updates per jitted call (lax.scan length; results unchanged)
    c.loop.replay_size = 20000  # transitions kept on device (ring buffer)
    c.loop.demo_cap = 12000  # planner-demo rows kept on device
    # BC strategies (`*_demos`, fresh_task_bc): the share of every BC batch drawn from the demo
    # rows added after round 0 (the rounds' scenes), the rest from round 0's; 0 = every kept
    # row alike (then round 0's rows, the most, carry most of the gradient)
    c.loop.bc_round_share = 0.0
    # Planner demos for BC: the pool's layouts plus `demo_seeds` more layouts of each pool
    # program (demos only); why this many: benchmarks/results/finetune.md
    c.loop.demo_seeds = 120
    c.loop.demo_dart = (0.1, 0.3)  # one more DART demo pass per noise sigma
    # AWR advantages (coda.train.learner.ADVANTAGES): "critic" = min_k Q_k - V of the chunk
    # critic trained on Φ-shaped n-step targets (the method's rule); "nstep" = observed m-chunk
    # return + bootstrapped V - V; "success" = success-filtered self-imitation (the critic
    # trains and picks chunks but does not weight the rows; a strategy's own estimator, e.g.
    # `coda_selfimit`, overrides this). Measured before: Q - V barely ranked the start policy's
    # chunks (benchmarks/results/finetune_inband.md); the report's critic AUC tracks it per round
    c.loop.advantage = "critic"
    # EMA of the policy weights; rollouts and evaluations act with it (0 = off). BC from noisy
    # flow-matching minibatches needs it; it also damps the AWR blocks' drift.
    c.loop.policy_ema = 0.999
    # the EMA decay in rounds >= 1 (-1: policy_ema; 0: act with the raw weights): 0 by the
    # registered rule (benchmarks/registrations/issue29_ema.md; INDEX "EMA vs raw weights")
    c.loop.finetune_ema = 0.0
    # Flow-noise scale of the rollouts that collect training data (step 3; evaluation, critic
    # probes and validation sample at policy.sample_noise_scale); compared with 0.3 in
    # benchmarks/results/finetune_selfimit.md and loop_selfimit.md (last section)
    c.loop.collect_noise_scale = 1.0
    # A run folder whose round 0 this run adopts instead of training its own ("" = none): same
    # config apart from what round 0 does not read (coda.loop.compat.adopt_start); a study
    # trains the SFT start once per seed this way.
    c.loop.start_from = ""
    # A finished run folder whose final memory snapshot seeds this run's memory at round 0
    # ("" = none): its validated modes, their Ω programs and parents, and Φ (coda.loop.transfer;
    # what is and is not carried over is in its docstring). Memory transfer across backbones.
    c.loop.memory_from = ""

    c.critic = ConfigDict()
    # offline (embedded default: state-based probes) | vlm (keyframes to a vision-language
    # model through `llm`; needs llm.backend openai or openai_compatible)
    c.critic.name = "offline"
    c.critic.n_probes = 2  # offline critic: counterfactual probes per factor
    c.critic.n_repeats = 1  # offline critic: unchanged-scene repeats per failed episode (baseline)
    c.critic.max_keyframes = 6  # vlm critic: images per failed episode
    c.critic.image_size = 224  # vlm critic: each view's side in px (workspace | wrist)

    c.engine = ConfigDict()
    c.engine.name = "offline"  # offline (rule table) | llm (LLM-written edit programs, sandboxed)

    c.potentials = ConfigDict()
    # R_hone, the Text2potential compiler of validated modes' Φ: offline (the family templates
    # with their repair ladder, the embedded default) | llm (the `llm` client's compiler role)
    c.potentials.compiler = "offline"

    # The LLM client of the vlm critic, the llm engine and the llm compiler (unused by the
    # offline defaults). Every call is recorded under <workdir>/llm/records.
    c.llm = ConfigDict()
    c.llm.backend = "offline"  # offline | openai | openai_compatible
    c.llm.model = ""  # "" = coda.llm's default per role (gpt-5.5 for the critic)
    c.llm.base_url = ""  # openai_compatible: e.g. http://127.0.0.1:8000/v1
    c.llm.api_key_env = "OPENAI_API_KEY"  # environment variable holding the API key
    # off | record | replay | reuse; "reuse" replays a recorded call on resume (the interrupted
    # round gets the same answers) and calls the backend otherwise
    c.llm.record_mode = "reuse"
    c.llm.max_concurrency = 4  # LLM calls in flight at once
    c.llm.timeout_s = 120.0  # per-call timeout in seconds

    c.eval = ConfigDict()
    c.eval.episodes = 256  # per suite (binomial s.e. <= 0.031)
    # fixed evaluation suites (coda.loop.evaluation): training layouts, held-out layouts /
    # object instances / categories / task programs
    c.eval.suites = ("id", "ood_layouts", "ood_instances", "ood_categories", "ood_tasks")
    # distinct held-out task programs (ood_tasks) proposed per family, never seeded or trained on
    c.eval.heldout_tasks_per_family = 4
    c.eval.before_bc = True  # also the untrained policy on ID at round 0
    c.eval.every = 1  # evaluate every this many rounds (and always the last one)

    c.render = ConfigDict()
    c.render.enabled = True  # render the diagnosed failures' GIFs + keyframe sheets (needs GL)
    c.render.failures_per_round = 2  # diagnosed failures rendered in the report
    # each view's side in px (the larger of the two) in the report's GIFs and keyframe sheets:
    # the workspace camera framed on the task's objects beside the wrist camera (coda.sim.view)
    c.render.width = 224
    c.render.height = 224

    if arg == "smoke":  # CPU plumbing: tiny policy, few scenes, few chunks
        c.sim.families = ("pick_place",)
        c.sim.programs_per_family = 1
        c.sim.seeds_per_program = 4
        c.sim.num_chunks = 8
        c.policy.width = 32
        c.policy.expert_width = 16
        c.policy.depth = 1
        c.policy.state_hidden = 32
        c.policy.num_state_tokens = 1
        c.policy.sample_steps = 2
        c.policy.image_size = 32  # obs_mode=images: 16 tokens per camera, 6 KB per transition
        c.loop.rounds = 2
        c.loop.budget = 6
        c.loop.rollouts_per_variant = 1
        c.loop.num_candidates = 1
        c.loop.critiques_per_mode = 2
        c.loop.critic_updates = 20
        c.loop.policy_updates = 10
        c.loop.bc_steps = 40
        # the smoke loop exercises the n-step advantage path (observed returns + the critic's V)
        # and fresh tasks for the unallocated budget
        awr_rounds(c)
        c.loop.validate_n = 4
        c.loop.max_validations = 1
        c.loop.bucket_size = 8
        c.loop.policy_batch = 16
        c.loop.critic_batch = 32
        c.loop.policy_warmup = 5
        c.loop.updates_per_call = 10
        c.loop.replay_size = 2000
        c.loop.demo_cap = 1000
        c.loop.demo_seeds = 0
        c.loop.demo_dart = ()
        c.loop.policy_ema = 0.0
        c.critic.n_probes = 1
        c.critic.n_repeats = 0
        c.eval.episodes = 8
        c.render.failures_per_round = 1
        c.render.width = c.render.height = 96
    elif arg == "gpu":  # one accelerator: the mjx backend, the `small` policy, bigger batches
        c.sim.backend = "auto"
        c.sim.families = FAMILIES
        c.sim.programs_per_family = 4
        c.sim.seeds_per_program = 16
        c.policy.width = 192
        c.policy.expert_width = 96
        c.policy.depth = 4
        c.policy.heads = 4
        c.policy.state_hidden = 256
        c.policy.num_state_tokens = 4
        c.policy.max_token_len = 32
        c.loop.rounds = 20
        c.loop.budget = 256
        c.loop.num_candidates = 4
        c.loop.critiques_per_mode = 8
        c.loop.critic_updates = 300
        c.loop.policy_updates = 100
        c.loop.bc_steps = 8000
        c.loop.validate_n = 32
        c.loop.max_validations = 8
        c.loop.bucket_size = 128
        c.loop.replay_size = 200000
        c.loop.demo_cap = 100000
        c.loop.demo_seeds = 64
        c.critic.n_probes = 4
        c.critic.n_repeats = 2
        c.eval.episodes = 128
        c.eval.heldout_tasks_per_family = 2
    elif arg == "selfimit":  # its results and times: benchmarks/results/loop_selfimit.md
        c.loop.advantage = "success"
        c.loop.collect_noise_scale = 0.3
        c.loop.finetune_lr = 3e-4
        c.loop.finetune_batch = 128
        c.loop.demo_fraction = 0.25
        c.loop.policy_updates = 200
        c.loop.budget = 64
        c.loop.rollouts_per_variant = 4
        c.loop.num_candidates = 1
        c.loop.no_mode_budget = "pool"
        c.loop.rounds = 10
        c.loop.min_stop_round = 100  # run every round
        c.eval.episodes = 64
    elif arg not in (None, ""):
        valid = "'', 'smoke', 'gpu', 'selfimit'"
        raise ValueError(f"unknown config variant {arg!r}; valid: {valid}")
    return c
