"""`coda.blas`: OpenBLAS's kernels pinned before numpy loads, so runs give the same bits on
AVX2 and AVX-512 machines."""

import os
import subprocess
import sys

import pytest

from coda import blas

AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
AVX512 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw\n"
OLD = "processor\t: 0\nflags\t\t: fpu sse2 avx\n"


def test_pin_sets_the_kernels_only_where_it_can_and_keeps_a_users_choice():
    env = {}
    assert blas.pin(env, AVX512, loaded={}) == "Haswell"
    assert env == {"OPENBLAS_CORETYPE": "Haswell"}
    env = {}
    assert blas.pin(env, AVX2, loaded={}) == "Haswell"
    assert env["OPENBLAS_CORETYPE"] == "Haswell"
    env = {"OPENBLAS_CORETYPE": "SkylakeX"}  # set by the user: kept
    assert blas.pin(env, AVX512, loaded={}) is None
    assert env == {"OPENBLAS_CORETYPE": "SkylakeX"}
    env = {}
    assert blas.pin(env, OLD, loaded={}) is None  # no AVX2: OpenBLAS's own choice
    assert blas.pin(env, "", loaded={}) is None  # no /proc/cpuinfo (macOS)
    assert blas.pin(env, AVX2, loaded={"numpy": object()}) is None  # too late: already loaded
    assert env == {}


@pytest.mark.skipif(not blas.supported(), reason="needs an AVX2 + FMA CPU")
def test_the_launchers_run_numpy_on_the_pinned_kernels():
    """Importing `launch` before numpy (as `python -m launch.libero` does) pins the kernels;
    a user's own OPENBLAS_CORETYPE wins."""
    code = "import launch, numpy; from coda import blas; print(blas.core())"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Haswell"
    env["OPENBLAS_CORETYPE"] = "Sandybridge"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "Sandybridge"


@pytest.mark.skipif(not blas.supported(), reason="needs an AVX2 + FMA CPU")
def test_the_test_process_runs_on_the_kernels_its_environment_names():
    """conftest pins the kernels before numpy loads, as `launch` does (or keeps a user's): a
    pytest plugin that imports numpy first (jaxtyping's does; pyproject turns it off) would
    leave them unpinned."""
    import numpy  # noqa: F401  (loaded already: what this process's linear algebra runs on)

    assert "OPENBLAS_CORETYPE" in os.environ
    assert blas.core() == os.environ["OPENBLAS_CORETYPE"]
