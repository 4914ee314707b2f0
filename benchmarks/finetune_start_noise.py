"""How precisely is a BC start's held-out success known? (issue 12 §2, the second stack start)

`finetune.py selfimit` measures every point of a run on one fixed held-out suite (128 episodes)
with one evaluation key (7). Here the start alone: that suite with key 7 and with 8 other keys
(the same layouts, independent policy noise), and a 1024-episode held-out suite of other layouts.

    .venv/bin/python benchmarks/finetune_start_noise.py   (writes /tmp/ftfresh/startvar.json;
        committed as benchmarks/results/finetune_start_noise_stack_start2.json)
"""

import json
import sys

sys.argv = ["x"]
sys.path.insert(0, "benchmarks")
import finetune as ft  # noqa: E402
import jax  # noqa: E402

from coda.eval import make_suites  # noqa: E402

out = {}
st = ft.Setup("/tmp/coda_ft/d_stack/step_6000.pkl", 128, suite_names=("heldout_layouts",))
p, n = st.params(), st.norm()
r = st.evaluate(p, n, "heldout_layouts", jax.random.key(7))
print("suite0 key7", r, flush=True)
rates = []
for k in range(8):
    r = st.evaluate(p, n, "heldout_layouts", jax.random.key(100 + k))
    rates.append(r.rate)
    print("suite0 key", 100 + k, r, flush=True)
out["selfimit_suite_key7"] = st.evaluate(p, n, "heldout_layouts", jax.random.key(7)).rate
out["selfimit_suite_other_keys"] = rates
big = make_suites(
    [st.blob["program"]] * st.layouts,
    list(range(st.layouts)),
    episodes=1024,
    seed=5,
    names=("heldout_layouts",),
    batch_size=ft.EVAL_BATCH,
)
st.suites["big"] = big["heldout_layouts"]
r = st.evaluate(p, n, "big", jax.random.key(7))
print("1024 other held-out layouts", r, flush=True)
out["heldout_1024_seed5"] = r.as_dict()
json.dump(out, open("/tmp/ftfresh/startvar.json", "w"), indent=1)
