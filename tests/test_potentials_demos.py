"""Offline Text2potential programs on real planner demonstrations of the four task families."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from coda.memory import open_memory
from coda.potentials import (
    CompileRequest,
    Demos,
    FailureRecord,
    LLMCompiler,
    OfflineCompiler,
    check_program,
    compile_program,
    compile_with_repair,
    subgoal_program,
)
from coda.sim import tasks
from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.rollout import make_buckets
from coda.sim.sdk import exec_program

NUM_CHUNKS = 14
# a diagnosed phase per family (any phase works; it only moves the learning tools)
PHASES = {
    "pick_place": "grasp",
    "articulated": "pull",
    "put_inside": "transport",
    "stack_or_insert": "lower",
}


def _demos(backend, compiled):
    bucket = max(make_buckets(compiled), key=lambda b: len(b.variants))
    r = backend.rollout(bucket, planner_for(bucket), None, jax.random.PRNGKey(0), NUM_CHUNKS)
    return bucket, Demos.from_rollout(r, bucket)


@pytest.fixture(scope="module")
def demos(planner_demos, native_backend):
    """{case: (bucket, Demos)}: each family's largest bucket of the shared planner demos, plus
    the other stack_or_insert mode and the other articulated action, so all five program kinds
    and both actions run."""
    out = {}
    for name, rollouts in planner_demos.items():
        bucket, r = max(rollouts, key=lambda br: len(br[0].variants))
        out[name] = (bucket, Demos.from_rollout(r, bucket))
    have = {
        "stack_or_insert": out["stack_or_insert"][0].scene_task["params"]["mode"],
        "articulated": out["articulated"][0].scene_task["params"]["action"],
    }
    for fam, key in (("stack_or_insert", "mode"), ("articulated", "action")):
        for seed in range(50):
            src = tasks.get_family(fam).propose(np.random.default_rng(seed))
            scene = exec_program(src, seed=0, isolation="inprocess")
            if scene.task["params"][key] != have[fam]:
                compiled = [
                    compile_scene(exec_program(src, seed=k, isolation="inprocess"))
                    for k in range(3)
                ]
                out[f"{fam}/{scene.task['params'][key]}"] = _demos(native_backend, compiled)
                break
    return out


CASES = [
    "pick_place",
    "articulated",
    pytest.param("put_inside", marks=pytest.mark.slow),  # each: its family's demo compile
    pytest.param("stack_or_insert", marks=pytest.mark.slow),
    pytest.param("stack_or_insert/other", marks=pytest.mark.slow),
    "articulated/other",
]


def _case(demos, case):
    if case.endswith("/other"):
        fam = case.split("/")[0]
        (key,) = [k for k in demos if k.startswith(fam + "/")]
        return fam, demos[key]
    return case, demos[case]


@pytest.mark.parametrize("case", CASES)
def test_offline_program_rises_along_planner_demos(demos, case):
    fam, (bucket, d) = _case(demos, case)
    assert d.success.mean() >= 0.75, "planner demos must mostly succeed"
    src = subgoal_program(bucket.scene_task, phase=PHASES[fam], factor="execution")
    pot = compile_program(src, bucket.sym)
    rep = check_program(pot, d.states, d.success, d.nu)
    assert rep.ok, rep.to_dict()
    assert rep.metrics["rank_corr_mean"] >= 0.8
    assert rep.metrics["completion_rate"] == 1.0 and rep.metrics["num_nu_states"] > 0
    assert rep.metrics["final_phi_min"] == 1.0, "successful demos end with every stage complete"
    assert rep.metrics["initial_phi_max"] < 1.0 / pot.num_stages, "demos start in stage 0"


# completes where ν holds, but its progress rewards keeping the tcp away from the object
MISLEADING = """
SUBGOALS = [{"name": "away", "tool": "shaped_awr"}]


def subgoal_0_done(s, sym):
    o, d = sym.body("target"), sym.body("goal")
    return on_top(s, o, d, 0.02) & ~grasped(s, o)


def subgoal_0_potential(s, sym):
    return 1.0 - distance_progress(ee_distance(s, sym.body("target")), 0.15)
"""


def test_usefulness_check_rejects_a_misleading_program(demos):
    bucket, d = demos["pick_place"]
    pot = compile_program(MISLEADING, bucket.sym)
    rep = check_program(pot, d.states, d.success, d.nu)
    assert not rep.ok and rep.first.stage == "usefulness", rep.to_dict()


@pytest.mark.parametrize("ablation", [False, True])
def test_compile_with_repair_end_to_end(demos, ablation):
    """Default path: LLMClient (offline backend) → offline compiler → checks → memory Φ."""
    bucket, d = demos["stack_or_insert"]
    mem = open_memory(":memory:")
    req = CompileRequest(
        bucket.scene_task,
        FailureRecord("execution", "lower", "the object lands beside the base", {"chunk": 9}),
        round=3,
        ablation=ablation,
    )
    pot, attempts = compile_with_repair(
        LLMCompiler(), req, bucket.sym, d, mem, max_rounds=3, probe=not ablation
    )
    assert pot is not None and attempts[-1].accepted
    assert pot.num_stages == (1 if ablation else 6)
    (row,) = mem.training_programs()
    assert row.meta["accepted"] and row.meta["ablation"] == ablation
    assert row.potential_source == pot.source and row.phase == "lower"
    if not ablation:
        names = ["reach", "grasp", "lift", "carry", "lower", "release"]  # "lower" is refined
        assert [s["name"] for s in row.subgoals] == names
        assert row.tools["release"] == "shaped_awr" and row.tools["carry"] == "reeval"
    # the offline compiler proposes the same program without the client
    assert OfflineCompiler().propose(req, bucket.sym).source == pot.source
