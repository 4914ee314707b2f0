"""Sandbox: allowlist, limits, structured errors, and a hostile corpus that must all be refused."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from coda import sandbox
from coda.sandbox import SandboxError, compile_function, execute, restricted_module, validate

CATEGORIES = ("mug", "bowl", "block")


class FakeScene:
    """Stand-in for the scene SDK (the real one lives in coda/sim): records calls, checks args."""

    def __init__(self) -> None:
        self.task: str | None = None
        self.objects: list[dict] = []

    def set_task(self, instruction: str) -> None:
        if not isinstance(instruction, str):
            raise TypeError(f"instruction must be a str, got {type(instruction).__name__}")
        self.task = instruction

    def add_object(self, category: str, position: tuple = (0.0, 0.0, 0.0)) -> int:
        if category not in CATEGORIES:
            raise ValueError(f"unknown object category {category!r}; valid: {list(CATEGORIES)}")
        if len(position) != 3:
            raise ValueError("position must have 3 coordinates")
        self.objects.append({"category": category, "position": tuple(position)})
        return len(self.objects) - 1

    def finish(self) -> dict:
        return {"task": self.task, "objects": list(self.objects)}


def scene_namespace() -> tuple[FakeScene, dict]:
    scene = FakeScene()
    ns = {"set_task": scene.set_task, "add_object": scene.add_object, "finish": scene.finish}
    return scene, ns


def distance(a, b):
    """Helper handed to potential programs (numpy here; jnp in the real code)."""
    return np.sqrt(np.sum((np.asarray(a) - np.asarray(b)) ** 2))


NP = restricted_module(np, ["sqrt", "log", "exp", "minimum", "maximum", "clip", "sum"])
POT_NS = {"distance": distance, "np": NP}

GOOD_SCENE = """
set_task("put the mug in the bowl")
mug = add_object("mug", (0.1, 0.0, 0.8))
bowl = add_object("bowl", position=(0.3, 0.1, 0.8))
for i in range(2):
    add_object("block", (0.0, 0.1 * i, 0.8))
result = finish()
"""

GOOD_POTENTIAL = """
def potential(state):
    d = distance(state["gripper"], state["object"])
    return -np.minimum(d, 1.0)
"""


def test_valid_scene_program_runs_in_subprocess_and_host_objects_untouched():
    scene, ns = scene_namespace()
    out = execute(GOOD_SCENE, ns, time_limit_s=5.0, memory_limit_mb=256)
    assert out["task"] == "put the mug in the bowl"
    assert [o["category"] for o in out["objects"]] == ["mug", "bowl", "block", "block"]
    assert scene.task is None and scene.objects == []  # the worker mutated its own copy


def test_valid_scene_program_inprocess():
    _, ns = scene_namespace()
    out = execute(GOOD_SCENE, ns, isolation="inprocess", time_limit_s=2.0)
    assert len(out["objects"]) == 4


def test_error_carries_stage_line_reason_and_pickles():
    _, ns = scene_namespace()
    src = 'set_task("x")\n\nadd_object("dragon")\nresult = finish()\n'
    with pytest.raises(SandboxError) as ei:
        execute(src, ns, time_limit_s=2.0)
    e = ei.value
    assert (e.stage, e.line) == ("runtime", 3)
    assert "dragon" in e.reason and "ValueError" in e.reason
    assert e.to_feedback() == {"stage": "runtime", "line": 3, "reason": e.reason}
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.stage, e2.line, e2.reason) == (e.stage, e.line, e.reason)


def test_validate_returns_ast_and_rejects_forbidden_allowed_names():
    tree = validate("x = foo(1)\n", ["foo"])
    assert tree.body
    with pytest.raises(ValueError, match="forbidden"):
        validate("x = 1", ["open"])
    with pytest.raises(ValueError, match="profile"):
        validate("x = 1", [], profile="nope")


def test_module_in_namespace_is_refused():
    with pytest.raises(ValueError, match="restricted_module"):
        execute("result = np.zeros(3)", {"np": np})


def test_compile_function_is_jittable_and_differentiable():
    import jax
    import jax.numpy as jnp

    jnp_ns = restricted_module(jnp, ["sqrt", "sum", "minimum"])
    src = """
def potential(state):
    d = jnp.sqrt(jnp.sum((state["gripper"] - state["object"]) ** 2) + 1e-9)
    return -jnp.minimum(d, 1.0)
"""
    fn = compile_function(src, "potential", {"jnp": jnp_ns}, time_limit_s=10.0)
    state = {"gripper": jnp.zeros(3), "object": jnp.array([0.3, 0.4, 0.0])}
    val = jax.jit(fn)(state)
    np.testing.assert_allclose(float(val), -0.5, atol=1e-5)
    g = jax.grad(lambda s: fn(s))(state)
    np.testing.assert_allclose(np.asarray(g["gripper"]), np.array([0.6, 0.8, 0.0]), atol=1e-4)
    # Only the handed-in names and safe builtins are visible to the compiled function.
    glb = fn.__wrapped__.__globals__
    assert set(glb) - {"__builtins__", "potential"} == {"jnp"}
    assert "open" not in glb["__builtins__"] and "__import__" not in glb["__builtins__"]


def test_compile_function_probe_with_jax_namespace():
    import jax
    import jax.numpy as jnp

    ns = {"jnp": restricted_module(jnp, ["sqrt", "sum", "minimum"])}
    src = """
def potential(state):
    d = jnp.sqrt(jnp.sum((state["gripper"] - state["object"]) ** 2) + EPS)
    return -jnp.minimum(d, 1.0)
"""
    state = {"gripper": jnp.zeros(3), "object": jnp.array([0.3, 0.4, 0.0])}
    fn = compile_function(
        src.replace("EPS", "1e-9"), "potential", ns, probe_args=(state,), time_limit_s=30.0
    )
    np.testing.assert_allclose(float(jax.jit(fn)(state)), -0.5, atol=1e-5)
    with pytest.raises(SandboxError, match="non-finite") as ei:
        compile_function(
            src.replace("EPS", "-1.0"), "potential", ns, probe_args=(state,), time_limit_s=30.0
        )
    assert ei.value.stage == "result"
    assert "RestrictedModule('jax.numpy'" in repr(ns["jnp"])


def test_compile_function_with_probe_accepts_good_potential():
    state = {"gripper": np.zeros(3), "object": np.array([0.0, 0.6, 0.8])}
    fn = compile_function(GOOD_POTENTIAL, "potential", POT_NS, probe_args=(state,))
    assert float(fn(state)) == pytest.approx(-1.0, abs=1e-6)


def test_compile_function_requires_entry():
    with pytest.raises(SandboxError, match="potential") as ei:
        compile_function("def phi(s):\n    return 0.0\n", "potential", POT_NS)
    assert ei.value.stage == "validate"


def test_inprocess_deadline_interrupts_python_loops():
    src = """
def potential(s):
    t = 0
    for i in range(100000):
        for j in range(100000):
            t = t + 1
    return t
"""
    fn = compile_function(src, "potential", {}, time_limit_s=0.3)
    with pytest.raises(SandboxError) as ei:
        fn(None)
    assert ei.value.stage == "timeout" and ei.value.line is not None
    assert os.sys.gettrace() is None or "sandbox" not in repr(os.sys.gettrace())


# ------------------------------------------------------------------------- the hostile corpus
# (name, kind, source, allowed stages, reason substring). kind: "scene" runs via execute in a
# subprocess; "potential" goes through compile_function with a subprocess probe.
SENTINEL = "/tmp/coda_sandbox_pwned_{pid}"

HOSTILE: list[tuple[str, str, str, tuple[str, ...], str]] = [
    ("import", "scene", "import os\nos.system('touch {s}')\n", ("validate",), "import"),
    (
        "from_import",
        "scene",
        "from os import system\nsystem('touch {s}')\n",
        ("validate",),
        "import",
    ),
    ("dunder_import", "scene", "__import__('os').system('touch {s}')\n", ("validate",), "dunder"),
    (
        "mro_escape",
        "scene",
        "x = ().__class__.__mro__[1].__subclasses__()\n",
        ("validate",),
        "dunder",
    ),
    ("open_write", "scene", "open('{s}', 'w').write('x')\n", ("validate",), "open"),
    ("eval", "scene", "result = eval('1 + 1')\n", ("validate",), "eval"),
    ("exec", "scene", "exec('import os')\n", ("validate",), "exec"),
    ("compile", "scene", "c = compile('1', 'f', 'eval')\n", ("validate",), "compile"),
    ("getattr", "scene", "c = getattr((), '__class__')\n", ("validate",), "getattr"),
    ("globals", "scene", "globals()['set_task'] = None\n", ("validate",), "globals"),
    ("vars", "scene", "v = vars()\n", ("validate",), "vars"),
    ("type_escape", "scene", "t = type(())\n", ("validate",), "type"),
    ("format_escape", "scene", "s = '{{0.__class__}}'.format(1)\n", ("validate",), "format"),
    (
        "frame_escape",
        "scene",
        "g = (x for x in [1])\nb = g.gi_frame.f_globals\n",
        ("validate",),
        "reflection escape",
    ),
    ("builtins_name", "scene", "b = __builtins__\n", ("validate",), "dunder"),
    ("private_key", "scene", "d = {{}}\nx = d['__class__']\n", ("validate",), "private"),
    ("class_def", "scene", "class A:\n    pass\n", ("validate",), "class"),
    ("try_except", "scene", "try:\n    x = 1\nexcept Exception:\n    pass\n", ("validate",), "try"),
    ("with_open", "scene", "with f as g:\n    pass\n", ("validate",), "with"),
    ("global_stmt", "scene", "def f():\n    global x\n", ("validate",), "global"),
    ("del_stmt", "scene", "x = 1\ndel x\n", ("validate",), "del"),
    ("yield", "scene", "def f():\n    yield 1\n", ("validate",), "yield"),
    ("async", "scene", "async def f():\n    pass\n", ("validate",), "async"),
    ("breakpoint", "scene", "breakpoint()\n", ("validate",), "breakpoint"),
    ("decorator", "scene", "@finish\ndef f():\n    pass\n", ("validate",), "decorator"),
    ("shadow_sdk", "scene", "set_task = print\n", ("validate",), "set_task"),
    ("long_literal", "scene", "s = '" + "a" * 5000 + "'\n", ("validate",), "string literal"),
    ("huge_int", "scene", "n = 10000000000000\n", ("validate",), "integer literal"),
    ("pow_bomb", "scene", "n = 2 ** 10 ** 10\n", ("validate",), "exponent"),
    ("list_alloc", "scene", "x = [0] * 10 ** 9\n", ("validate",), "repetition"),
    ("shift_bomb", "scene", "x = 1 << 100000000\n", ("validate",), "shift"),
    ("fstring_width", "scene", "s = f'{{1:>1000000000}}'\n", ("validate",), "format widths"),
    ("percent_width", "scene", "s = '%1000000000d' % 1\n", ("validate",), "format widths"),
    ("syntax_error", "scene", "def f(:\n    pass\n", ("syntax",), ""),
    ("indent_error", "scene", "x = 1\n    y = 2\n", ("syntax",), "indent"),
    ("unknown_sdk", "scene", "spawn_robot('ur5')\nresult = finish()\n", ("validate",), "spawn"),
    ("infinite_loop", "scene", "while True:\n    pass\n", ("timeout",), "time limit"),
    (
        "c_level_cpu",
        "scene",
        "n = 3\nfor i in range(40):\n    n = n * n\nresult = 1\n",
        ("timeout", "memory"),
        "",
    ),
    (
        "doubling_alloc",
        "scene",
        "s = 'ab'\nfor i in range(60):\n    s = s + s\nresult = len(s)\n",
        ("memory",),
        "memory",
    ),
    (
        "recursion",
        "scene",
        "def f(n):\n    return f(n + 1)\nresult = f(0)\n",
        ("runtime",),
        "recurs",
    ),
    (
        "mutual_recursion",
        "scene",
        "def a(n):\n    return b(n)\ndef b(n):\n    return a(n)\nresult = a(1)\n",
        ("runtime",),
        "recurs",
    ),
    ("huge_range", "scene", "result = sum(range(10 ** 9))\n", ("runtime",), "range"),
    ("wrong_sdk_args", "scene", "set_task()\nresult = finish()\n", ("runtime",), "TypeError"),
    ("wrong_sdk_type", "scene", "set_task(42)\nresult = finish()\n", ("runtime",), "str"),
    (
        "wrong_sdk_value",
        "scene",
        "add_object('dragon')\nresult = finish()\n",
        ("runtime",),
        "dragon",
    ),
    ("no_result", "scene", "set_task('x')\n", ("result",), "result"),
    ("unpicklable_result", "scene", "result = lambda: 0\n", ("result",), "transferable"),
    ("failed_assert", "scene", "assert 1 == 2, 'bad layout'\n", ("runtime",), "bad layout"),
    (
        "nan_potential",
        "potential",
        "def potential(s):\n    return np.sqrt(-1.0 * distance(s['gripper'], s['object']))\n",
        ("result",),
        "non-finite",
    ),
    (
        "inf_potential",
        "potential",
        "def potential(s):\n    return np.log(0.0 * distance(s['gripper'], s['object']))\n",
        ("result",),
        "non-finite",
    ),
    (
        "string_potential",
        "potential",
        "def potential(s):\n    return 'close'\n",
        ("result",),
        "non-numeric",
    ),
    (
        "while_potential",
        "potential",
        "def potential(s):\n    while True:\n        pass\n",
        ("validate",),
        "while",
    ),
    (
        "slow_potential",
        "potential",
        "def potential(s):\n    t = 0\n    for i in range(100000):\n"
        "        for j in range(100000):\n            t = t + i\n    return t\n",
        ("timeout",),
        "time limit",
    ),
    (
        "wrong_helper_call",
        "potential",
        "def potential(s):\n    return distance(s['gripper'])\n",
        ("runtime",),
        "TypeError",
    ),
    (
        "missing_key_potential",
        "potential",
        "def potential(s):\n    return distance(s['hand'], s['object'])\n",
        ("runtime",),
        "KeyError",
    ),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_corpus_rejected(case, tmp_path):
    name, kind, template, stages, needle = case
    sentinel = SENTINEL.format(pid=os.getpid())
    src = template.format(s=sentinel)
    env_before = dict(os.environ)
    cwd_before = os.getcwd()
    files_before = sorted(os.listdir(tmp_path))
    scene, ns = scene_namespace()
    with pytest.raises(SandboxError) as ei:
        if kind == "scene":
            execute(src, ns, time_limit_s=1.0, memory_limit_mb=256)
        else:
            state = {"gripper": np.zeros(3), "object": np.ones(3)}
            compile_function(src, "potential", POT_NS, time_limit_s=1.0, probe_args=(state,))
    e = ei.value
    assert e.stage in stages, (name, e)
    assert needle.lower() in e.reason.lower(), (name, e.reason)
    assert e.reason  # every refusal explains itself
    # Nothing outside the sandbox changed and the host is alive and well.
    assert not os.path.exists(sentinel)
    assert dict(os.environ) == env_before and os.getcwd() == cwd_before
    assert sorted(os.listdir(tmp_path)) == files_before
    assert scene.task is None and scene.objects == []
    assert sandbox.execute("result = 1 + 1", {}, isolation="inprocess") == 2


def test_corpus_is_large_enough():
    assert len(HOSTILE) >= 30
