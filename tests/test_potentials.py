"""Text2potential: program language → staged jittable Φ, checks, repair loop, compilers."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.llm import LLMClient, OfflineBackend
from coda.memory import open_memory
from coda.potentials import (
    CheckFailure,
    CompileRequest,
    Demos,
    FailureRecord,
    LLMCompiler,
    OfflineCompiler,
    ProgramError,
    Proposal,
    check_program,
    compile_program,
    compile_with_repair,
    endpoint_potential,
    rank_correlation_with_time,
    retrieve_examples,
    spearman,
    subgoal_program,
    task_description_program,
)
from coda.sim.state import SimState, SymbolTable

SYM = SymbolTable(
    bodies=(("target", 0), ("goal", 1), ("cabinet.handle", 2)), joints=(("cabinet", 0),)
)
NB, NJ = 3, 1

# reach the target → lift it → hold the cabinet joint past 0.5
PROGRAM = '''
"""Three stages over helpers and roles."""
SUBGOALS = [
    {"name": "reach", "tool": "reeval", "description": "tcp near the target"},
    {"name": "lift", "tool": "shaped_awr"},
    {"name": "open", "tool": "bc"},
]
REACH_TOL = 0.05


def subgoal_0_done(s, sym):
    return ee_distance(s, sym.body("target")) < REACH_TOL


def subgoal_0_potential(s, sym):
    return distance_progress(ee_distance(s, sym.body("target")), 0.2)


def subgoal_1_done(s, sym):
    return lifted(s, sym.body("target"), 0.05)


def subgoal_1_potential(s, sym):
    return ramp(height(s, sym.body("target")), 0.0, 0.05)


def subgoal_2_done(s, sym):
    return joint_fraction(s, sym.joint("cabinet")) >= 0.5


def subgoal_2_potential(s, sym):
    f = joint_fraction(s, sym.joint("cabinet"))
    return jnp.minimum(f / 0.5, 1.0)
'''


def reference_phi(s: SimState) -> jnp.ndarray:
    """Hand-written Φ for PROGRAM. [...]"""
    d = jnp.linalg.norm(s.ee_pos - s.body_pos[..., 0, :], axis=-1)
    done0, p0 = d < 0.05, jnp.exp(-d / 0.2)
    h = s.body_pos[..., 0, 2] - s.body_half[..., 0, 2]  # bottom of an unrotated box
    done1, p1 = h > 0.05, jnp.clip(h / 0.05, 0.0, 1.0)
    lo, hi = s.joint_range[..., 0, 0], s.joint_range[..., 0, 1]
    f = jnp.clip((s.joint_pos[..., 0] - lo) / (hi - lo + 1e-9), 0.0, 1.0)
    done2, p2 = f >= 0.5, jnp.minimum(f / 0.5, 1.0)
    k = jnp.where(done0, jnp.where(done1, jnp.where(done2, 3, 2), 1), 0)  # completed in order
    cur = jnp.select([k == 0, k == 1, k == 2], [p0, p1, p2], 0.0)
    return (k + cur) / 3.0


def random_states(key: jax.Array, n: int) -> SimState:
    """States spread so every stage occurs: ee near / far, target on table / lifted, joint."""
    ks = jax.random.split(key, 8)
    target = jax.random.uniform(ks[0], (n, 3), minval=-0.1, maxval=0.1)
    lift = jnp.where(jax.random.bernoulli(ks[1], 0.6, (n,)), 0.12, 0.02)
    target = target.at[:, 2].set(lift + jax.random.uniform(ks[2], (n,), maxval=0.03))
    near = jax.random.bernoulli(ks[3], 0.6, (n,))[:, None]
    ee = target + jnp.where(near, 0.02, 0.3) * jax.random.normal(ks[4], (n, 3)) / 1.8
    body_pos = jnp.stack([target, jnp.zeros((n, 3)), jnp.ones((n, 3))], 1)
    ne = 3 + NB
    return SimState(
        ee_pos=ee,
        ee_quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, 1)),
        finger=jnp.full((n, 2), 0.02),
        body_pos=body_pos,
        body_quat=jnp.tile(jnp.array([1.0, 0, 0, 0]), (n, NB, 1)),
        joint_pos=jax.random.uniform(ks[5], (n, NJ), maxval=0.4),
        contact=jnp.zeros((n, ne, ne)),
        body_half=jnp.full((n, NB, 3), 0.02),
        inner=jnp.zeros((n, NB, 4)),
        joint_range=jnp.tile(jnp.array([[0.0, 0.4]]), (n, NJ, 1)),
    )


@pytest.fixture(scope="module")
def pot():
    return compile_program(PROGRAM, SYM)


@pytest.fixture(scope="module")
def states():
    return jax.jit(random_states, static_argnums=1)(jax.random.PRNGKey(0), 256)


# ----------------------------------------------------------------------------- semantics


def test_phi_equals_hand_written_reference(pot, states):
    phi = pot.phi(states)
    chex.assert_shape(phi, (256,))
    np.testing.assert_allclose(phi, jax.jit(reference_phi)(states), atol=1e-6)
    k = np.asarray(pot.stage(states))
    assert set(k.tolist()) == {0, 1, 2, 3}, "random states must exercise every stage"
    assert pot.num_stages == 3
    assert [s.name for s in pot.subgoals] == ["reach", "lift", "open"]
    assert pot.tools == {"reach": "reeval", "lift": "shaped_awr", "open": "bc"}


def test_jit_vmap_and_bounds(pot, states):
    phi = pot.phi(states)
    np.testing.assert_allclose(jax.jit(pot.phi)(states), phi, atol=1e-6)
    np.testing.assert_allclose(jax.vmap(pot.phi)(states), phi, atol=1e-6)
    # two leading dims [B, T] (rollout states) also work
    bt = jax.tree_util.tree_map(lambda x: x.reshape((16, 16) + x.shape[1:]), states)
    np.testing.assert_allclose(jax.jit(pot.phi)(bt).reshape(-1), phi, atol=1e-6)
    assert np.all((np.asarray(phi) >= 0) & (np.asarray(phi) <= 1))
    # bounded even on wild or non-finite states (clipping; the checks reject such programs)
    wild = states.replace(
        ee_pos=states.ee_pos * 1e6, joint_pos=states.joint_pos.at[:8].set(jnp.nan)
    )
    w = np.asarray(jax.jit(pot.phi)(wild))
    assert np.all(np.isfinite(w) & (w >= 0) & (w <= 1))
    # Φ == 1 exactly when every stage is complete
    k = np.asarray(pot.stage(states))
    np.testing.assert_array_equal(np.asarray(phi) == 1.0, k == 3)


def test_stage_order_is_respected(pot, states):
    # target lifted and joint fully open (later subgoals done, progress 1), but ee far away
    s = jax.tree_util.tree_map(lambda x: x[:1], states)
    s = s.replace(
        body_pos=s.body_pos.at[:, 0].set(jnp.array([0.0, 0.0, 0.2])),
        ee_pos=jnp.array([[0.5, 0.5, 0.5]]),
        joint_pos=jnp.array([[0.4]]),
    )
    d = float(jnp.linalg.norm(s.ee_pos - s.body_pos[:, 0]))
    assert int(pot.stage(s)[0]) == 0
    np.testing.assert_allclose(pot.phi(s)[0], np.exp(-d / 0.2) / 3, rtol=1e-5, atol=1e-6)
    # reaching now completes stage 0 only; later progress counts in order
    s2 = s.replace(ee_pos=s.body_pos[:, 0])
    assert int(pot.stage(s2)[0]) == 3


def test_terminal_convention(pot, states):
    term = jnp.arange(256) % 2 == 0
    out = endpoint_potential(pot, states, term)
    np.testing.assert_array_equal(np.asarray(out)[::2], 0.0)
    np.testing.assert_allclose(out[1::2], pot.phi(states)[1::2], atol=1e-6)
    np.testing.assert_allclose(endpoint_potential(pot, states), pot.phi(states), atol=1e-6)


# ----------------------------------------------------------------------------- compile errors


def _replace(old: str, new: str) -> str:
    assert old in PROGRAM
    return PROGRAM.replace(old, new)


@pytest.mark.parametrize(
    "source, stage, needle",
    [
        (_replace('sym.body("target"), 0.05)', 'sym.body("tgt"), 0.05)'), "trace", "unknown role"),
        (
            _replace(
                '    return lifted(s, sym.body("target"), 0.05)',
                "    if height(s, 0) > 0.05:\n        return 1.0\n    return 0.0",
            ),
            "trace",
            "jnp.where",
        ),
        (
            _replace(
                "    return ramp(height(s",
                "    return s.body_pos[..., 0, :]\n    return ramp(height(s",
            ),
            "trace",
            "one value per state",
        ),
        (_replace('"tool": "bc"', '"tool": "dagger"'), "validate", "shaped_awr"),
        (_replace("def subgoal_2_potential", "def subgoal_9_potential"), "validate", "missing"),
        (_replace("REACH_TOL = 0.05", "REACH_TOL = ee_distance(None, 0)"), "validate", "literal"),
        (_replace("REACH_TOL = 0.05", "REACH_TOL = 0.05\nabs(1)"), "validate", "top level"),
        (PROGRAM.split("SUBGOALS")[0], "validate", "SUBGOALS"),
        (_replace("f = joint_fraction(", "f = joint_fraction("), None, None),
        (_replace("jnp.minimum(f / 0.5, 1.0)", "(f / 0.5).tolist()"), "validate", "tolist"),
        (_replace("def subgoal_0_done(s, sym):", "def subgoal_0_done(s):"), "validate", "(s, sym)"),
        ("def f(:\n", "syntax", ""),
    ],
)
def test_compile_errors_are_structured(source, stage, needle):
    if stage is None:
        compile_program(source, SYM)  # control: the unmodified program compiles
        return
    with pytest.raises(ProgramError) as ei:
        compile_program(source, SYM)
    assert ei.value.stage == stage, ei.value
    assert needle in str(ei.value)
    fb = ei.value.to_feedback()
    assert fb["stage"] == stage and fb["message"]


HOSTILE = {
    "import": "import os\n",
    "dunder_import": '__import__("os")\n',
    "open": 'def subgoal_0_done(s, sym):\n    return open("/etc/passwd")\n',
    "getattr": 'def subgoal_0_done(s, sym):\n    return getattr(s, "ee_pos")\n',
    "eval": 'def subgoal_0_done(s, sym):\n    return eval("1")\n',
    "class_escape": "def subgoal_0_done(s, sym):\n    return s.__class__\n",
    "private_attr": "def subgoal_0_done(s, sym):\n    return sym._table\n",
    "method_escape": "def subgoal_0_done(s, sym):\n    return s.replace(ee_pos=None)\n",
    "numpy_io": 'def subgoal_0_done(s, sym):\n    return jnp.load("/tmp/x.npy")\n',
    "while": "def subgoal_0_done(s, sym):\n    while True:\n        pass\n",
    "class_def": "class A:\n    pass\n",
    "try": "def subgoal_0_done(s, sym):\n    try:\n        pass\n    except Exception:\n        pass\n",
    "global_state": "CACHE = []\ndef subgoal_0_done(s, sym):\n    CACHE.append(s)\n    return True\n",
    "shadow_helper": "distance = 1\n",
    "lambda_escape": "f = lambda: 0\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_programs_are_rejected(name):
    with pytest.raises(ProgramError) as ei:
        compile_program(PROGRAM + "\n" + HOSTILE[name], SYM)
    assert ei.value.stage in ("syntax", "validate"), ei.value


def test_leaked_tracer_is_refused_at_compile_time():
    src = line_program("keep(ramp(s.ee_pos[..., 0], 0.0, 1.0))") + (
        "\n\ndef keep(x, box={}):\n    box['last'] = x\n    return x\n"
    )
    with pytest.raises(ProgramError, match="escaped") as ei:
        compile_program(src, SYM)
    assert ei.value.stage == "trace"


def test_runaway_loop_hits_the_deadline():
    src = _replace(
        '    f = joint_fraction(s, sym.joint("cabinet"))\n    return jnp.minimum',
        "    x = 0\n    for i in range(100000):\n        for j in range(100000):\n"
        '            x = x + 1\n    f = joint_fraction(s, sym.joint("cabinet"))\n'
        "    return jnp.minimum",
    )
    with pytest.raises(ProgramError, match="time limit") as ei:
        compile_program(src, SYM, time_limit_s=1.0)
    assert ei.value.stage == "trace"


def test_probe_refuses_memory_bomb(states):
    """The sandbox worker probe stops a program whose intermediate would need ~14 GB: tracing
    with abstract shapes cannot see it, evaluating it in-process could take the host down."""
    src = _replace(
        "    return jnp.minimum(f / 0.5, 1.0)",
        "    x = s.ee_pos\n    for i in range(19):\n        x = x[..., None] * x[..., None, :]\n"
        "    return jnp.minimum(f / 0.5, 1.0) + 0.0 * jnp.sum(x)",
    )
    probe = jax.tree_util.tree_map(lambda x: np.asarray(x[:1]), states)
    with pytest.raises(ProgramError) as ei:
        compile_program(src, SYM, probe_state=probe, time_limit_s=20.0)
    assert ei.value.stage == "trace" and "memory" in ei.value.message, ei.value
    compile_program(src, SYM)  # without the probe only abstract shapes are traced: accepted


# ----------------------------------------------------------------------------- checks


def test_spearman_matches_closed_form_and_handles_ties():
    rng = np.random.default_rng(0)
    x = rng.normal(size=20)
    t = np.arange(20)
    d = np.argsort(np.argsort(x)) - t
    np.testing.assert_allclose(spearman(x, t), 1 - 6 * np.sum(d**2) / (20 * (400 - 1)), atol=1e-6)
    assert spearman(np.arange(5.0), t[:5]) == pytest.approx(1.0, abs=1e-6)
    assert spearman(-np.arange(5.0), t[:5]) == pytest.approx(-1.0, abs=1e-6)
    assert spearman(np.ones(5), t[:5]) == 0.0
    tied = np.array([0.0, 0.2, 0.2, 0.5, 1.0, 1.0, 1.0])
    assert 0.9 < spearman(tied, np.arange(7)) < 1.0
    np.testing.assert_allclose(
        rank_correlation_with_time(np.stack([np.arange(4.0), -np.arange(4.0)])),
        [1.0, -1.0],
        atol=1e-6,
    )


LINE = """
SUBGOALS = [{"name": "slide", "tool": "shaped_awr"}]


def subgoal_0_done(s, sym):
    return s.ee_pos[..., 0] >= 1.0


def subgoal_0_potential(s, sym):
    return EXPR
"""


def line_demos(n: int = 4, t: int = 9, rising: bool = True) -> Demos:
    """ee slides along x from 0 to 1.2 (successful demos); ν once x ≥ 1."""
    base = random_states(jax.random.PRNGKey(1), n * t)
    x = jnp.tile(jnp.linspace(0.0, 1.2, t), n)
    if not rising:
        x = x[::-1]
    st = base.replace(ee_pos=base.ee_pos.at[:, 0].set(x))
    st = jax.tree_util.tree_map(lambda a: np.asarray(a).reshape((n, t) + a.shape[1:]), st)
    return Demos(st, np.ones(n, bool), np.asarray(x >= 1.0).reshape(n, t))


def line_program(expr: str) -> str:
    return LINE.replace("EXPR", expr)


def test_check_accepts_good_program_and_reports_metrics():
    pot = compile_program(line_program("ramp(s.ee_pos[..., 0], 0.0, 1.0)"), SYM)
    d = line_demos()
    rep = check_program(pot, d.states, d.success, d.nu)
    assert rep.ok, rep.to_dict()
    assert rep.metrics["rank_corr_mean"] >= 0.8
    assert rep.metrics["completion_rate"] == 1.0


@pytest.mark.parametrize(
    "expr, stage, needle",
    [
        ("jnp.log(s.ee_pos[..., 0] - 0.5)", "runtime", "not finite"),
        ("2.0 * s.ee_pos[..., 0]", "range", "[0, 1]"),
        ("1.0 - ramp(s.ee_pos[..., 0], 0.0, 1.0)", "usefulness", "does not rise"),
    ],
)
def test_check_failures_are_structured(expr, stage, needle):
    pot = compile_program(line_program(expr), SYM)
    d = line_demos()
    rep = check_program(pot, d.states, d.success, d.nu)
    assert not rep.ok and rep.first.stage == stage, rep.to_dict()
    assert needle in rep.first.message
    assert rep.to_dict()["failures"][0]["stage"] == stage


def test_batch_coupled_program_fails_independence_check():
    # Φ of one state depends on the mean over the batch: vmap would disagree with batched Φ
    expr = "0.5 * ramp(s.ee_pos[..., 0], 0.0, 1.0) + 0.5 * ramp(jnp.mean(s.ee_pos[..., 1]), -1, 1)"
    pot = compile_program(line_program(expr), SYM)
    d = line_demos()
    rep = check_program(pot, d.states, d.success, d.nu)
    assert not rep.ok and rep.first.stage == "jit", rep.to_dict()
    assert "independently" in rep.first.message


def test_completion_check_needs_last_stage_where_nu_holds():
    pot = compile_program(
        line_program("ramp(s.ee_pos[..., 0], 0.0, 1.0)").replace(">= 1.0", ">= 1.15"), SYM
    )
    d = line_demos()
    rep = check_program(pot, d.states, d.success, d.nu)
    assert not rep.ok and rep.first.stage == "completion"
    assert rep.first.details["stuck_at"] == {"slide": 4}


# ----------------------------------------------------------------------------- repair loop

GOOD = line_program("ramp(s.ee_pos[..., 0], 0.0, 1.0)")
RUNTIME_ERROR = line_program("jnp.sqrt(s.ee_pos[..., 0] - 2.0)")
OUT_OF_RANGE = line_program("3.0 * ramp(s.ee_pos[..., 0], 0.0, 1.0)")


class ScriptedCompiler:
    """Replies from a fixed list; remembers the feedback it was given."""

    name = "scripted"

    def __init__(self, sources):
        self.sources = list(sources)
        self.seen: list[list[str]] = []

    def propose(self, request, sym, history=(), examples=()):
        self.seen.append([a.report.first.stage for a in history])
        return Proposal(self.sources[len(history)], "scripted", self.name)


def test_repair_loop_repairs_and_records_every_attempt():
    mem = open_memory(":memory:")
    comp = ScriptedCompiler([RUNTIME_ERROR, OUT_OF_RANGE, GOOD])
    req = CompileRequest(
        {"family": "pick_place", "roles": {"target": "cube", "goal": "plate"}},
        FailureRecord("execution", "grasp", "fingers close early", {"frames": [3, 4]}),
        mode_id=None,
        round=2,
    )
    pot, attempts = compile_with_repair(
        comp, req, SYM, line_demos(), mem, max_rounds=3, probe=False
    )
    assert pot is not None and pot.source == GOOD
    assert [a.accepted for a in attempts] == [False, False, True]
    assert [a.report.first.stage for a in attempts[:2]] == ["runtime", "range"]
    assert comp.seen == [[], ["runtime"], ["runtime", "range"]]  # structured feedback reached it
    rows = sorted(mem.training_programs(), key=lambda r: r.id)
    assert [r.potential_source for r in rows] == [RUNTIME_ERROR, OUT_OF_RANGE, GOOD]
    assert [r.meta["accepted"] for r in rows] == [False, False, True]
    assert rows[0].meta["checks"]["failures"][0]["stage"] == "runtime"
    assert rows[2].tools == {"slide": "shaped_awr"} and rows[2].phase == "grasp"
    assert rows[2].role_signature == "goal,target" and rows[2].round == 2
    assert [e.id for e in retrieve_examples(mem, req)] == [rows[2].id]


def test_repair_loop_gives_up_after_max_rounds():
    mem = open_memory(":memory:")
    comp = ScriptedCompiler([OUT_OF_RANGE] * 2)
    req = CompileRequest({"family": "pick_place", "roles": {"target": "a"}})
    pot, attempts = compile_with_repair(
        comp, req, SYM, line_demos(), mem, max_rounds=2, probe=False
    )
    assert pot is None and len(attempts) == 2 and not any(a.accepted for a in attempts)
    assert len(mem.training_programs()) == 2


def test_llm_compiler_repairs_through_the_client():
    """The LLM path: prompt carries ψ, roles, helper signatures and the previous failure."""
    replies = iter([RUNTIME_ERROR, GOOD])
    prompts = []

    def handler(request, role):
        prompts.append(request)
        return {"source": next(replies), "notes": "n"}

    client = LLMClient(backends={"compiler": OfflineBackend(handlers={"compiler": handler})})
    req = CompileRequest(
        {"family": "pick_place", "roles": {"target": "cube", "goal": "plate"}},
        FailureRecord("spatial", "transport", "drops the cube", "frame 7"),
    )
    pot, attempts = compile_with_repair(
        LLMCompiler(client), req, SYM, line_demos(), None, max_rounds=3, probe=False
    )
    assert pot is not None and len(attempts) == 2
    system, user = prompts[0].messages[0]["content"], prompts[0].messages[1]["content"]
    assert "within_footprint(state: SimState" in system and "shaped_awr" in system
    assert "drops the cube" in user and '"cabinet.handle": 2' in user
    assert prompts[0].response_format["type"] == "json_schema"
    assert "not finite" in prompts[1].messages[1]["content"]  # repair feedback


def test_llm_failure_is_an_attempt_not_a_crash():
    def handler(request, role):
        return "not json at all"

    client = LLMClient(backends={"compiler": OfflineBackend(handlers={"compiler": handler})})
    req = CompileRequest({"family": "pick_place", "roles": {"target": "cube"}})
    pot, attempts = compile_with_repair(
        LLMCompiler(client), req, SYM, line_demos(), None, max_rounds=1, probe=False
    )
    assert pot is None and attempts[0].report.first.stage == "compiler"


# ----------------------------------------------------------------------------- offline compiler

TASK = {
    "family": "pick_place",
    "instruction": "put the red cube on the white plate",
    "roles": {"target": "cube_red", "goal": "plate_white"},
    "params": {},
    "terminal": {"relation": "on_top", "args": ["target", "goal"], "released": True},
}


def test_offline_compiler_maps_phase_to_tools_and_repairs_down_the_ladder():
    sym = SymbolTable(bodies=(("target", 0), ("goal", 1)))
    comp = OfflineCompiler()
    req = CompileRequest(TASK, FailureRecord("execution", "lift", "slips", None))
    p0 = compile_program(comp.propose(req, sym).source, sym)
    # the diagnosed subgoal is split into finer stages; earlier ones are only re-evaluated
    assert [s.name for s in p0.subgoals] == ["reach", "grasp", "lift", "raise", "carry", "place"]
    assert [s.tool for s in p0.subgoals] == ["reeval", "reeval"] + ["shaped_awr"] * 4
    for phase, names in [
        (None, ["reach", "grasp", "lift", "carry", "place"]),
        ("approach", ["hover", "reach", "grasp", "lift", "carry", "place"]),
        ("release", ["reach", "grasp", "lift", "carry", "lower", "release"]),
    ]:
        diag = None if phase is None else FailureRecord("spatial", phase, "", None)
        src = comp.propose(CompileRequest(TASK, diag), sym).source
        assert [s.name for s in compile_program(src, sym).subgoals] == names
    hist = [None]  # the offline compiler only counts failed attempts
    p1 = compile_program(comp.propose(req, sym, hist).source, sym)
    assert [s.name for s in p1.subgoals] == ["acquire", "carry", "place"]
    p2 = compile_program(comp.propose(req, sym, hist * 2).source, sym)
    assert p2.num_stages == 1
    assert comp.propose(req, sym, hist * 5).source == task_description_program(TASK)
    # ablation: the task description, whatever the diagnosis
    abl = CompileRequest(TASK, FailureRecord("execution", "lift", "slips", None), ablation=True)
    assert comp.propose(abl, sym).source == task_description_program(TASK)


def test_default_llm_client_runs_the_offline_compiler():
    sym = SymbolTable(bodies=(("target", 0), ("goal", 1)))
    req = CompileRequest(TASK, FailureRecord("spatial", "grasp", "misses", None))
    via_llm = LLMCompiler().propose(req, sym)
    assert via_llm.source == OfflineCompiler().propose(req, sym).source
    assert via_llm.compiler == "llm:offline"


@pytest.mark.parametrize(
    "task",
    [
        TASK,
        {**TASK, "family": "put_inside", "roles": {"target": "a", "container": "b"}},
        {
            **TASK,
            "family": "stack_or_insert",
            "params": {"mode": "stack"},
            "roles": {"top": "a", "base": "b"},
        },
        {
            **TASK,
            "family": "stack_or_insert",
            "params": {"mode": "insert", "depth": 0.02},
            "roles": {"peg": "a", "hole": "b"},
        },
        {
            **TASK,
            "family": "articulated",
            "params": {"action": "close", "part": "door"},
            "roles": {"cabinet": "c"},
        },
    ],
)
def test_offline_programs_compile_for_every_kind(task):
    sym = SymbolTable(
        bodies=tuple(
            (r, i)
            for i, r in enumerate(
                [
                    "target",
                    "goal",
                    "container",
                    "top",
                    "base",
                    "peg",
                    "hole",
                    "cabinet",
                    "cabinet.handle",
                ]
            )
        ),
        joints=(("cabinet", 0),),
    )
    for level in range(3):
        src = subgoal_program(task, phase="grasp", level=level)
        pot = compile_program(src, sym)
        assert 1 <= pot.num_stages <= 6
    with pytest.raises(ValueError, match="valid"):
        subgoal_program({**task, "family": "juggling"})


def test_check_failure_stage_is_validated():
    with pytest.raises(ValueError, match="valid"):
        CheckFailure("nonsense", "x")
