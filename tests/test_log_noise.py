"""launch.main silences the noise our setup causes (cache-hit warnings, TPU probing, warp
prints) without hiding Python errors."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Compiles one function twice through the persistent cache: the second process hits the cache,
# which is what makes XLA warn "Assume version compatibility" on every run.
SCRIPT = """
import sys
from absl import logging
logging.use_absl_handler()  # as absl.app.run does: INFO records reach stderr
logging.set_verbosity("info")
if sys.argv[2] == "quiet":
    from launch.main import quiet_third_party_logs
    quiet_third_party_logs()
import jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
print(float(jax.jit(lambda x: jnp.sin(x) * 2.0)(jnp.ones(3)).sum()))
"""


def _run(code, *args):
    env = {
        k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_quiet_logs_drop_cache_hit_warning_and_tpu_probe(tmp_path):
    cache = str(tmp_path / "cache")
    _run(SCRIPT, cache, "quiet")  # fills the cache
    loud, quiet = _run(SCRIPT, cache, "loud"), _run(SCRIPT, cache, "quiet")
    assert loud.returncode == 0 and quiet.returncode == 0, quiet.stderr
    assert abs(float(quiet.stdout) - float(loud.stdout)) < 1e-5
    assert "PjRt-IFRT" in loud.stderr and "libtpu" in loud.stderr  # real without the setup...
    assert "PjRt-IFRT" not in quiet.stderr and "libtpu" not in quiet.stderr  # ... and gone


def test_mjx_import_prints_nothing_and_errors_still_raise():
    out = _run(
        "from launch.main import import_mjx_quietly, quiet_third_party_logs\n"
        "quiet_third_party_logs(); import_mjx_quietly()\n"
        "import jax.numpy as jnp; jnp.ones(3) @ jnp.ones(4)"
    )
    assert out.stdout == "", out.stdout  # mujoco.mjx prints "Failed to import warp" otherwise
    assert out.returncode != 0 and "TypeError" in out.stderr


# The two lines XLA logs per persistent-cache load on an AVX-512 host (shortened), a real
# mismatch in the same format, and a fatal signal: only the tuning-feature lines are dropped.
_XLA = (
    "E1202 07:01:02.123456   4242 cpu_aot_loader.cc:215] Loading XLA:CPU AOT result. Target "
    "machine feature +{} is not  supported on the host machine. Machine type used for XLA:CPU "
    "compilation doesn't match the machine type for execution. Compile machine features: "
    "[+avx512f,+prefer-no-gather] vs host machine features: [avx512f]. This could lead to "
    "execution errors such as SIGILL."
)
STDERR_SCRIPT = f"""
import faulthandler, os, sys
from launch.main import drop_tuning_feature_errors
assert drop_tuning_feature_errors(force=True)
line = {_XLA!r}
for feature in ("prefer-no-gather", "prefer-no-scatter", "avx512f"):
    os.write(2, (line.format(feature) + "\\n").encode())  # as XLA's C++ logging writes it
print("python error line", file=sys.stderr)
sys.stderr.flush()
if sys.argv[1] == "crash":
    faulthandler.enable()
    import ctypes
    ctypes.string_at(0)
"""


def test_stderr_filter_drops_only_tuning_feature_errors_and_keeps_a_crash():
    ok, crash = _run(STDERR_SCRIPT, "exit"), _run(STDERR_SCRIPT, "crash")
    assert ok.returncode == 0, ok.stderr
    assert crash.returncode != 0
    for out in (ok, crash):
        assert "+prefer-no-gather is not" not in out.stderr
        assert "+prefer-no-scatter is not" not in out.stderr
        assert "+avx512f is not  supported" in out.stderr  # a real mismatch still shows
        assert "python error line" in out.stderr
    assert "Fatal Python error: Segmentation fault" in crash.stderr
