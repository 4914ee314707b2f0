"""Sandbox for LLM-written programs (scene programs and potential programs).

Everything an LLM writes is untrusted code. A program passes three gates before it can touch
the run:

1. ``validate``: parse, then walk the AST against an allowlist. Only the names the caller hands in
   (the SDK / helper functions), local names the program binds itself, and a small set of safe
   builtins may be read. Imports, dunder names and attributes, ``exec``/``eval``/``open``/
   ``getattr``-style reflection, classes, ``try``/``with``/``global`` and oversized literals are
   refused with a structured ``SandboxError`` (stage, line, reason) that can be sent back to the
   LLM for repair.
2. ``execute`` (scene programs): run in a worker subprocess with ``RLIMIT_CPU`` and
   ``RLIMIT_AS`` plus a CPU-time deadline in the worker and a wall-clock one in the parent, so
   infinite loops, huge allocations and recursion
   bombs kill only the worker. The value of the program's ``result`` variable is returned.
3. ``compile_function`` (potential programs): Text2potential must trace potentials with JAX in the
   host process, so they cannot live in a subprocess. They are validated with the stricter
   ``"potential"`` profile (no ``while``; ``range`` bounded), optionally probed once in a limited
   worker subprocess on example inputs (which catches non-termination, memory blow-ups and
   non-finite outputs before anything runs in-process), then compiled into a plain Python
   function whose globals hold only the handed-in names and the safe builtins. The caller jits it::

       fn = compile_function(src, "potential", {"distance": distance, "jnp": restricted_module(
           jnp, ["sqrt", "exp", "clip", "minimum", "maximum", "sum"])}, probe_args=(example,))
       phi = jax.jit(fn)          # tracing runs the sandboxed Python once, under a deadline
       value = phi(state)         # compiled XLA afterwards; no sandboxed Python runs any more

   In-process calls are guarded by a CPU-time deadline enforced with a line tracer; this
   interrupts Python-level loops but not a single long C call, which is why the subprocess probe
   is the recommended first step for potentials.

Never hand a module object in a namespace: modules expose file and process access
(``numpy.load``, ``numpy.ctypeslib``). Use ``restricted_module`` to pass a chosen set of functions.

Worker processes come from a ``forkserver`` (a clean single-threaded server, safe next to JAX's
threads). Two consequences of Python's multiprocessing rules: namespace values and results travel
by pickle (module-level functions, bound methods of picklable objects, ``RestrictedModule``), and
a script that calls ``execute``/``compile_function(probe_args=...)`` at top level needs the usual
``if __name__ == "__main__":`` guard, because workers re-import the main module.

Layout of the package: ``base`` (the error, the limits, the safe builtins), ``checker`` (gate 1,
``validate``), ``worker`` (gate 2, the subprocess runner), ``inprocess`` (the deadline tracer and
in-process execution), ``namespace`` (namespace checks, ``restricted_module``) and ``programs``
(the entry points ``execute`` and ``compile_function``).
"""

from __future__ import annotations

from coda.sandbox.base import SAFE_BUILTIN_NAMES, Limits, SandboxError
from coda.sandbox.base import SANDBOX_FILENAME as SANDBOX_FILENAME
from coda.sandbox.checker import FORBIDDEN_ATTRS as FORBIDDEN_ATTRS
from coda.sandbox.checker import FORBIDDEN_NAMES, validate
from coda.sandbox.inprocess import ensure_finite
from coda.sandbox.namespace import RestrictedModule, restricted_module
from coda.sandbox.programs import compile_function, execute

__all__ = [
    "SAFE_BUILTIN_NAMES",
    "FORBIDDEN_NAMES",
    "Limits",
    "SandboxError",
    "compile_function",
    "ensure_finite",
    "execute",
    "restricted_module",
    "RestrictedModule",
    "validate",
]
