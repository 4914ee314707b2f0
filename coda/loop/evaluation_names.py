"""Names of the loop's evaluation suites (pure Python: `coda.runconfig` checks them pre-JAX)."""

SUITE_NAMES = ("id", "ood_layouts", "ood_instances", "ood_categories", "ood_tasks")
