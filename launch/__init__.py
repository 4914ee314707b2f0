"""absl entry points: `launch.main` (the CoDA loop), `launch.libero` (LIBERO evaluation),
`launch.study` (registered studies)."""

from coda import blas

blas.pin()  # before anything imports numpy: the same OpenBLAS kernels on every x86-64 machine
