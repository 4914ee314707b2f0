"""One registry style (`coda.registry.Registry`) for every pluggable part; every built-in name
is declared in `coda.registries` without importing what it names."""

import subprocess
import sys

import pytest

from coda import registries
from coda.registry import Registry, UnknownName


class _Widget:
    def __init__(self, size, *, colour="red"):
        self.size, self.colour = size, colour


def test_register_lookup_and_unknown_names_list_the_valid_ones():
    reg = Registry("widget", {"lazy": "collections:OrderedDict"})
    reg.register("small", _Widget)

    @reg.register("big")
    def big(size=10):
        return _Widget(size)

    assert reg.names() == ("lazy", "small", "big") and len(reg) == 3 and "small" in reg
    assert reg.make("small", 2).size == 2 and reg.make("big").size == 10
    import collections

    assert reg["lazy"] is collections.OrderedDict  # imported on first lookup
    with pytest.raises(UnknownName) as e:
        reg["smal"]
    assert str(e.value) == "unknown widget 'smal'; valid: lazy, small, big"
    # a KeyError for lookups, a ValueError for config values: either `except` catches it
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="'small' is already registered"):
        reg.register("small", _Widget)
    reg.register("small", big, replace=True)
    assert reg["small"] is big
    with pytest.raises(ValueError, match="'module:attribute'"):
        reg.register("bad", "no_colon_here")
    reg.unregister("big")
    assert "big" not in reg


def test_build_passes_what_each_entry_names_and_reports_what_is_missing():
    reg = Registry("widget", {"w": _Widget})
    w = reg.build("w", size=3, colour="blue", client=object(), memory=None)  # extras ignored
    assert (w.size, w.colour) == (3, "blue")
    with pytest.raises(TypeError, match=r"widget 'w' needs \['size'\]"):
        reg.build("w", colour="blue")
    reg.register("any", lambda **kw: kw)
    assert reg.build("any", a=1, b=2) == {"a": 1, "b": 2}


@pytest.mark.parametrize(
    "registry",
    [
        registries.FAMILIES,
        registries.POLICIES,
        registries.PHYSICS_BACKENDS,
        registries.CRITICS,
        registries.ENGINES,
        registries.COMPILERS,
        registries.LLM_BACKENDS,
        registries.MEMORY_MODES,
        registries.STRATEGIES,
        registries.CONFIG_CHECKS,
        registries.SCENE_KINDS,
    ],
    ids=lambda r: r.kind,
)
def test_every_built_in_name_resolves_to_an_entry_of_that_name(registry):
    for name in registry:
        obj = registry[name]
        own = getattr(obj, "name", None)
        if isinstance(own, str):  # families, strategies, critics, engines, compilers
            assert own == name, (registry.kind, name, own)


def test_the_modules_that_own_a_kind_share_its_registry():
    from coda import critic, memory
    from coda.engine import engines
    from coda.llm import backends
    from coda.loop import strategies
    from coda.policy import configs
    from coda.potentials import task
    from coda.sim import rollout, tasks

    assert tasks.FAMILIES is registries.FAMILIES and configs.CONFIGS is registries.POLICIES
    assert critic.CRITICS is registries.CRITICS and engines.ENGINES is registries.ENGINES
    assert task.COMPILERS is registries.COMPILERS and backends.BACKENDS is registries.LLM_BACKENDS
    assert memory.MEMORY_MODES is registries.MEMORY_MODES
    assert rollout.BACKENDS is registries.PHYSICS_BACKENDS
    assert strategies.STRATEGIES is registries.STRATEGIES


def test_names_and_config_checks_import_no_jax():
    code = (
        "import sys\n"
        "from coda import registries, runconfig\n"
        "names = [list(r) for r in (registries.FAMILIES, registries.CRITICS, registries.ENGINES)]\n"
        "assert 'pick_place' in names[0] and 'vlm' in names[1]\n"
        "bad = [m for m in ('jax', 'mujoco', 'flax', 'coda.sim.tasks') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
