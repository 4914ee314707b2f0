"""CoDA: a JAX-first research codebase for co-evolving a simulation data engine and a policy."""

__version__ = "0.1.0"
