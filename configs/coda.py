"""The CoDA main experiment. `--config=configs/coda.py` or `--config=configs/coda.py:smoke`.

Override any field from the command line, e.g. `--config.sim.backend=mjx`; a misspelt field
fails (the config is locked), and so does a bad value (`coda.runconfig.validate`).
"""

from ml_collections import ConfigDict

FAMILIES = ("pick_place", "articulated", "put_inside", "stack_or_insert")


def get_config(arg: str | None = None) -> ConfigDict:
    c = ConfigDict()
    c.seed = 0
    # JAX persistent compilation cache; "" = $CODA_CACHE_DIR, else ~/.cache/coda/jax
    c.cache_dir = ""

    c.sim = ConfigDict()
    c.sim.backend = "auto"  # auto | native | mjx ("auto": mjx with an accelerator)
    c.sim.families = FAMILIES
    c.sim.split = "train"  # train | heldout | all (object instances / categories)
    # Scenes per family = programs x seeds: each program is one structure (one MJX bucket),
    # its seeds vary layout σ and attributes α inside the bucket.
    c.sim.programs_per_family = 4
    c.sim.seeds_per_program = 8
    c.sim.horizon = 10  # H: control steps per action chunk
    c.sim.num_chunks = 14  # episode length in chunks (14 x 10 x 0.04 s = 5.6 s)
    c.sim.nthread = 0  # native backend threads; 0 = all cores

    c.eval = ConfigDict()
    c.eval.random_policy = True

    c.render = ConfigDict()
    c.render.enabled = True
    c.render.per_family = 1  # planner rollouts rendered per family for the report
    c.render.width = 224
    c.render.height = 224

    if arg == "smoke":  # CPU, a minute or two
        c.sim.programs_per_family = 1
        c.sim.seeds_per_program = 3
        c.render.width = c.render.height = 160
    elif arg not in (None, ""):
        raise ValueError(f"unknown config variant {arg!r}; valid: '', 'smoke'")
    return c
