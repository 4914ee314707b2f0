"""Test-wide setup: JAX persistent compilation cache, CPU platform, shared fixtures."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA's CPU compiles dominate a cold run of the suite (CI starts with an empty cache). Tests check
# correctness on tiny shapes, not speed, so they skip LLVM's expensive optimisation passes:
# measured on a cold cache, the small pi0.5 train-step test took 56 s -> 34 s. Set XLA_FLAGS
# yourself to test with full optimisation. Subprocess tests inherit it.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
)

from coda import blas  # noqa: E402

blas.pin()  # before numpy loads: `launch`'s OpenBLAS kernels, the same bits on every machine

import jax  # noqa: E402

_CACHE = os.environ.get(
    "CODA_JAX_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache")
)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

CUBE_PLATE = """
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""


@pytest.fixture(scope="session")
def gl() -> str:
    """Headless GL for rendering tests: its description, or the test is skipped saying why."""
    from coda.sim import render

    ok, info = render.gl_available()
    if not ok:
        pytest.skip(f"no headless GL here: {info}")
    return info


@pytest.fixture(scope="session")
def libero_data():
    """LIBERO's data wheels (`make setup` installs them): tests that read them skip without."""
    from coda.libero import data

    try:
        return data.assets_root()
    except data.LiberoDataMissing as err:  # pragma: no cover - `make setup` downloads it
        pytest.skip(f"LIBERO data missing: {err}")


@pytest.fixture(scope="session")
def native_backend():
    from coda.sim.rollout import NativeBackend

    return NativeBackend()


@pytest.fixture(scope="session")
def cube_plate_bucket():
    """A 4-variant same-structure bucket (sizes, masses, frictions, colours, poses differ)."""
    from coda.sim.compile import compile_scene
    from coda.sim.rollout import make_buckets
    from coda.sim.sdk import exec_program

    compiled = [
        compile_scene(exec_program(CUBE_PLATE, seed=k, isolation="inprocess")) for k in range(4)
    ]
    (bucket,) = make_buckets(compiled)
    return bucket


@pytest.fixture(scope="session")
def family_variants():
    """Default variants of every family: {family: [CompiledScene]} (6 each)."""
    from coda.sim import tasks
    from coda.sim.compile import compile_scene
    from coda.sim.sdk import exec_program

    out = {}
    for name, fam in tasks.FAMILIES.items():
        rng = np.random.default_rng(123)
        out[name] = [
            compile_scene(exec_program(fam.propose(rng), seed=k, isolation="inprocess"))
            for k in range(6)
        ]
    return out


PLANNER_DEMO_CHUNKS = 14


def _demo(backend, bucket, policy):
    return backend.rollout(bucket, policy, None, jax.random.PRNGKey(0), PLANNER_DEMO_CHUNKS)


@pytest.fixture(scope="session")
def planner_demos(family_variants, native_backend):
    """Scripted-planner rollouts of every bucket of `family_variants` (PRNGKey(0),
    `PLANNER_DEMO_CHUNKS` chunks): {family: [(bucket, RolloutResult)]}, rolled out once for the
    task and phase tests."""
    from coda.sim.planner import planner_for
    from coda.sim.rollout import make_buckets

    return {
        name: [(b, _demo(native_backend, b, planner_for(b))) for b in make_buckets(compiled)]
        for name, compiled in family_variants.items()
    }


@pytest.fixture(scope="session")
def random_demos(family_variants, native_backend):
    """`RandomPolicy` rollouts of each family's first variant (PRNGKey(0),
    `PLANNER_DEMO_CHUNKS` chunks): {family: (bucket, RolloutResult)}."""
    from coda.sim.planner import RandomPolicy
    from coda.sim.rollout import make_buckets

    out = {}
    for name, compiled in family_variants.items():
        (b,) = make_buckets(compiled[:1])
        out[name] = (b, _demo(native_backend, b, RandomPolicy()))
    return out


@pytest.fixture(scope="module", autouse=True)
def _process_lifetime(request):
    """The suite may run in one process (`pytest -p no:xdist`): after each test module, the
    process's memory mappings are checked against vm.max_map_count (`coda.lifetime.check` warns
    near it, naming the module), and past half of it what the finished modules compiled is
    released (loop runs release their own). With CODA_TEST_PROCESS_LOG=<file>, one JSON line per
    module."""
    yield
    import json

    from coda import lifetime

    s = lifetime.check(f"after {request.module.__name__}")
    if (s.map_fraction or 0.0) > 0.5:
        lifetime.release()
    path = os.environ.get("CODA_TEST_PROCESS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"module": request.module.__name__, **s.to_dict()}) + "\n")


# The test files that take longest on a 2-core CI worker (compiles of whole loops, MJX, the
# policy's train steps), longest first: under `-n auto --dist loadfile` they start first, so the
# suite does not end on one worker running a long file while the other idles.
_LONG_FILES = (
    "test_potentials.py",  # first on its worker: jax.checking_leaks' leak report walks the heap
    "test_policy_protocol.py",
    "test_train_agent.py",
    "test_train_learner.py",
    "test_potentials_demos.py",
    "test_policy_pi05_parity.py",
    "test_libero_planner.py",
    "test_sim_tasks.py",
    "test_task_phases.py",
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(_LONG_FILES)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))  # stable: order kept otherwise
