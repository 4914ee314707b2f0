"""Baseline `uniform_variants`: engine variants of validated modes with a uniform allocation (no
UCB).

`configs/coda.py` (variants '', 'smoke', 'gpu'; same budgets) with
`strategy="uniform_variants"`.
"""

import importlib.util
import os


def get_config(arg: str | None = None):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coda.py")
    spec = importlib.util.spec_from_file_location("_coda_base_config", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    return base.get_config(arg, strategy="uniform_variants")
