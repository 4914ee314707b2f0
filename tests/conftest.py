"""Test-wide setup: JAX persistent compilation cache, CPU platform, shared fixtures."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MUJOCO_GL", "osmesa")

import jax  # noqa: E402

_CACHE = os.environ.get(
    "CODA_JAX_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".jax_cache")
)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
