"""Names of the loop's evaluation suites (pure Python: `coda.runconfig` checks them pre-JAX)."""

SUITE_NAMES = ("id", "ood_layouts", "ood_instances", "ood_categories", "ood_tasks")

# a LIBERO source's suites (`sim.source=libero:<suite>`, coda.loop.sources): held-out initial
# states, their LIBERO-Plus layout shift, LIBERO-PRO's swap / object / language / task suites
LIBERO_SUITE_NAMES = (
    "id",
    "ood_layouts",
    "ood_shift",
    "ood_swap",
    "ood_objects",
    "ood_language",
    "ood_tasks",
)
