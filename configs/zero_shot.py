"""Baseline `zero_shot`: the start policy, never trained (no BC, no updates; evaluated every round).

`configs/coda.py` (variants '', 'smoke', 'gpu'; same budgets) with
`strategy="zero_shot"`.
"""

import importlib.util
import os


def get_config(arg: str | None = None):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "coda.py")
    spec = importlib.util.spec_from_file_location("_coda_base_config", path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    return base.get_config(arg, strategy="zero_shot")
