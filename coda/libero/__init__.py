"""LIBERO inside CoDA: BDDL tasks -> our Scene, compiled with the real LIBERO assets, LIBERO's
goal predicates as pure-JAX ν, suites and their fixed initial states (see scene.py)."""
