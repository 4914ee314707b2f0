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
"""

from __future__ import annotations

import ast
import functools
import math
import multiprocessing as mp
import os
import pickle
import re
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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

SANDBOX_FILENAME = "<sandbox>"
_MB = 1024 * 1024


class SandboxError(Exception):
    """A program was refused or failed; carries what an LLM needs to repair it.

    ``stage`` is one of ``syntax``, ``validate``, ``runtime``, ``timeout``, ``memory``,
    ``result``; ``line`` is the 1-based line in the program (``None`` when unknown).
    """

    STAGES = ("syntax", "validate", "runtime", "timeout", "memory", "result")

    def __init__(self, stage: str, reason: str, line: int | None = None) -> None:
        if stage not in self.STAGES:
            raise ValueError(f"unknown sandbox stage {stage!r}; valid: {self.STAGES}")
        self.stage = stage
        self.reason = reason
        self.line = line
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"[{stage}]{where} {reason}")

    def to_feedback(self) -> dict[str, Any]:
        """JSON-ready form for repair prompts and memory traces."""
        return {"stage": self.stage, "line": self.line, "reason": self.reason}

    def __reduce__(self):  # picklable across the worker pipe
        return (SandboxError, (self.stage, self.reason, self.line))


@dataclass(frozen=True)
class Limits:
    """Static bounds checked before anything runs; generous for real programs."""

    max_source_chars: int = 50_000
    max_nodes: int = 20_000
    max_depth: int = 60
    max_str_len: int = 4_096
    max_int_abs: int = 10**9
    max_display_elems: int = 1_000
    max_pow_exponent: int = 64
    max_range_len: int = 100_000


# Reflection, I/O and process access: never readable, even if a caller lists them.
FORBIDDEN_NAMES = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "input",
        "breakpoint",
        "help",
        "globals",
        "locals",
        "vars",
        "dir",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "type",
        "object",
        "super",
        "memoryview",
        "classmethod",
        "staticmethod",
        "property",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
        "builtins",
        "os",
        "sys",
        "subprocess",
        "importlib",
        "socket",
        "shutil",
        "pickle",
        "ctypes",
    }
)

# Attributes that reach frames, code or globals without a leading underscore, and str.format
# (its mini-language walks attributes: "{0.__class__}".format(x)).
FORBIDDEN_ATTRS = frozenset(
    {
        "format",
        "format_map",
        "mro",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "tb_frame",
        "tb_next",
        "func_globals",
        "func_code",
        "co_code",
    }
)

_ALLOWED_COMMON: tuple[type[ast.AST], ...] = (
    ast.Module,
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Return,
    ast.If,
    ast.For,
    ast.Break,
    ast.Continue,
    ast.Pass,
    ast.Assert,
    ast.FunctionDef,
    ast.Lambda,
    ast.arguments,
    ast.arg,
    ast.keyword,
    ast.Name,
    ast.Load,
    ast.Store,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Dict,
    ast.Set,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.Call,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.IfExp,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.comprehension,
    ast.Starred,
    ast.JoinedStr,
    ast.FormattedValue,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.expr_context,
)
_PROFILES: dict[str, tuple[type[ast.AST], ...]] = {
    "scene": _ALLOWED_COMMON + (ast.While,),
    # Potentials are traced by JAX in-process: no unbounded loops.
    "potential": _ALLOWED_COMMON,
}

_NODE_HINTS: dict[type[ast.AST], str] = {
    ast.Import: "imports are not allowed; use only the provided functions",
    ast.ImportFrom: "imports are not allowed; use only the provided functions",
    ast.ClassDef: "class definitions are not allowed",
    ast.Try: "try/except is not allowed; let errors surface",
    ast.With: "with-statements are not allowed",
    ast.Global: "global/nonlocal are not allowed",
    ast.Nonlocal: "global/nonlocal are not allowed",
    ast.Delete: "del is not allowed",
    ast.Raise: "raise is not allowed; use assert for checks",
    ast.While: "while-loops are not allowed here; use for over a bounded range",
    ast.Yield: "generators (yield) are not allowed",
    ast.YieldFrom: "generators (yield) are not allowed",
    ast.AsyncFunctionDef: "async code is not allowed",
    ast.Await: "async code is not allowed",
}


def _safe_range(limit: int) -> Callable[..., range]:
    def safe_range(*args: int) -> range:
        r = range(*args)
        if len(r) > limit:
            raise ValueError(f"range of length {len(r)} exceeds the sandbox limit {limit}")
        return r

    safe_range.__name__ = "range"
    return safe_range


_SAFE_BUILTINS_BASE: dict[str, Any] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "dict": dict,
    "divmod": divmod,
    "enumerate": enumerate,
    "filter": filter,
    "float": float,
    "int": int,
    "isinstance": isinstance,
    "len": len,
    "list": list,
    "map": map,
    "max": max,
    "min": min,
    "reversed": reversed,
    "round": round,
    "set": set,
    "sorted": sorted,
    "str": str,
    "sum": sum,
    "tuple": tuple,
    "zip": zip,
    "frozenset": frozenset,
    "True": True,
    "False": False,
    "None": None,
    # Assertion failures must be raisable by `assert`.
    "AssertionError": AssertionError,
}
SAFE_BUILTIN_NAMES = frozenset(_SAFE_BUILTINS_BASE) | {"range"}


def _safe_builtins(limits: Limits) -> dict[str, Any]:
    out = dict(_SAFE_BUILTINS_BASE)
    out["range"] = _safe_range(limits.max_range_len)
    return out


def _is_dunder(name: str) -> bool:
    return name.startswith("__")


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the program binds itself (assignments, loop targets, defs, parameters)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.FunctionDef):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


def _is_sequence_display(node: ast.AST) -> bool:
    return isinstance(node, (ast.List, ast.Tuple, ast.ListComp)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


class _Checker(ast.NodeVisitor):
    def __init__(self, allowed: set[str], bound: set[str], profile: str, limits: Limits) -> None:
        self.allowed = allowed
        self.bound = bound
        self.allowed_nodes = _PROFILES[profile]
        self.limits = limits
        self.depth = 0

    def fail(self, node: ast.AST, reason: str) -> None:
        raise SandboxError("validate", reason, getattr(node, "lineno", None))

    def generic_visit(self, node: ast.AST) -> None:
        if not isinstance(node, self.allowed_nodes):
            hint = _NODE_HINTS.get(type(node), "this construct is not allowed")
            self.fail(node, f"{type(node).__name__}: {hint}")
        self.depth += 1
        if self.depth > self.limits.max_depth:
            self.fail(node, f"program nests deeper than {self.limits.max_depth} levels")
        super().generic_visit(node)
        self.depth -= 1

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if _is_dunder(name):
            self.fail(node, f"name {name!r}: dunder names are not allowed")
        if name in FORBIDDEN_NAMES:
            self.fail(node, f"name {name!r} is forbidden (reflection, I/O or process access)")
        if isinstance(node.ctx, ast.Store) and name in self.allowed:
            self.fail(node, f"assigning to provided name {name!r} is not allowed")
        if isinstance(node.ctx, ast.Load) and name not in self.allowed and name not in self.bound:
            self.fail(
                node,
                f"unknown name {name!r}; available: {sorted(self.allowed - SAFE_BUILTIN_NAMES)}",
            )
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        if _is_dunder(node.arg) or node.arg in FORBIDDEN_NAMES:
            self.fail(node, f"parameter name {node.arg!r} is not allowed")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.decorator_list:
            self.fail(node, "decorators are not allowed")
        if _is_dunder(node.name) or node.name in FORBIDDEN_NAMES or node.name in self.allowed:
            self.fail(node, f"function name {node.name!r} is not allowed")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("_"):
            self.fail(node, f"attribute {node.attr!r}: private and dunder attributes are refused")
        if node.attr in FORBIDDEN_ATTRS:
            self.fail(node, f"attribute {node.attr!r} is forbidden (reflection escape)")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value[:1] == "_":
            self.fail(node, f"subscript key {key.value!r}: private keys are refused")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None and _is_dunder(node.arg):
            self.fail(node, f"keyword {node.arg!r} is not allowed")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        lim = self.limits
        if isinstance(v, (str, bytes)) and len(v) > lim.max_str_len:
            self.fail(node, f"string literal of length {len(v)} exceeds {lim.max_str_len}")
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > lim.max_int_abs:
            self.fail(node, f"integer literal {v} exceeds the bound {lim.max_int_abs}")
        if isinstance(v, complex):
            self.fail(node, "complex literals are not allowed")
        self.generic_visit(node)

    def _check_display(self, node: ast.AST, n: int) -> None:
        if n > self.limits.max_display_elems:
            self.fail(node, f"literal with {n} elements exceeds {self.limits.max_display_elems}")

    def visit_List(self, node: ast.List) -> None:
        self._check_display(node, len(node.elts))
        self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        self._check_display(node, len(node.elts))
        self.generic_visit(node)

    def visit_Set(self, node: ast.Set) -> None:
        self._check_display(node, len(node.elts))
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        self._check_display(node, len(node.keys))
        self.generic_visit(node)

    def _check_format_widths(self, node: ast.AST, spec: str) -> None:
        # "{x:>1000000000}" or "%1000000000d" would build a gigantic string in one C call.
        if any(len(run) > 3 for run in re.findall(r"[0-9]+", spec)):
            self.fail(node, "format widths/precisions above 999 are not allowed")

    def visit_FormattedValue(self, node: ast.FormattedValue) -> None:
        spec = node.format_spec
        if spec is not None:
            parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
            if not all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
                self.fail(node, "computed format specs are not allowed; use a literal spec")
            self._check_format_widths(node, "".join(p.value for p in parts))
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        lim = self.limits
        if isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
            if isinstance(node.left.value, str):
                self._check_format_widths(node, node.left.value)
        if isinstance(node.op, ast.Pow):
            exp = node.right
            if isinstance(exp, ast.UnaryOp) and isinstance(exp.operand, ast.Constant):
                exp = exp.operand
            if isinstance(exp, ast.Constant) and isinstance(exp.value, (int, float)):
                if abs(exp.value) > lim.max_pow_exponent:
                    self.fail(node, f"exponent {exp.value} exceeds {lim.max_pow_exponent}")
            elif isinstance(node.left, ast.Constant) and isinstance(node.left.value, int):
                # int ** <expression> can build astronomically large integers.
                self.fail(node, "integer base with a non-literal exponent is not allowed")
        if isinstance(node.op, ast.Mult):
            for seq, other in ((node.left, node.right), (node.right, node.left)):
                if _is_sequence_display(seq) and not (
                    isinstance(other, ast.Constant)
                    and isinstance(other.value, int)
                    and abs(other.value) <= lim.max_display_elems
                ):
                    self.fail(
                        node,
                        "sequence repetition needs a literal count <= "
                        f"{lim.max_display_elems}; build lists with a comprehension instead",
                    )
        if isinstance(node.op, ast.LShift):
            sh = node.right
            if isinstance(sh, ast.Constant) and isinstance(sh.value, int):
                if abs(sh.value) > lim.max_pow_exponent:
                    self.fail(node, f"shift by {sh.value} exceeds {lim.max_pow_exponent}")
            elif isinstance(node.left, ast.Constant):
                self.fail(node, "shifting a literal by a non-literal amount is not allowed")
        self.generic_visit(node)


def validate(
    source: str,
    allowed_names: Iterable[str],
    *,
    profile: str = "scene",
    limits: Limits | None = None,
) -> ast.Module:
    """Check ``source`` against the AST allowlist; return the parsed module.

    Raises ``SandboxError`` (stage ``syntax`` or ``validate``) for a program that must not run.
    ``allowed_names`` are the SDK / helper names the program may read in addition to the safe
    builtins and the names it binds itself.
    """
    if profile not in _PROFILES:
        raise ValueError(f"unknown sandbox profile {profile!r}; valid: {sorted(_PROFILES)}")
    limits = limits or Limits()
    if not isinstance(source, str):
        raise SandboxError("syntax", f"program must be a string, got {type(source).__name__}")
    allowed = set(allowed_names)
    bad = sorted(n for n in allowed if n in FORBIDDEN_NAMES or _is_dunder(n))
    if bad:
        raise ValueError(f"allowed_names contains forbidden names: {bad}")
    if len(source) > limits.max_source_chars:
        raise SandboxError(
            "validate", f"program has {len(source)} characters; limit {limits.max_source_chars}"
        )
    try:
        tree = ast.parse(source, filename=SANDBOX_FILENAME, mode="exec")
    except SyntaxError as e:
        raise SandboxError("syntax", f"{e.msg}", e.lineno) from None
    except (RecursionError, MemoryError, ValueError) as e:
        raise SandboxError("syntax", f"program could not be parsed: {type(e).__name__}") from None
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > limits.max_nodes:
        raise SandboxError("validate", f"program has {n_nodes} AST nodes; limit {limits.max_nodes}")
    checker = _Checker(allowed | SAFE_BUILTIN_NAMES, _bound_names(tree), profile, limits)
    try:
        checker.visit(tree)
    except RecursionError:
        raise SandboxError("validate", "program is nested too deeply") from None
    return tree


# ----------------------------------------------------------------------------- execution core


class _Deadline(BaseException):
    """Raised inside sandboxed frames at the deadline; BaseException so helpers can't swallow it."""


def _install_deadline(limit_s: float | None) -> Callable[[], None]:
    """Trace only sandboxed frames and interrupt them at the deadline; returns an uninstaller.

    The deadline counts the CPU time of the thread running the program (`time.thread_time`), not
    wall-clock time: on a loaded machine (CI, parallel tests, JAX threads in the host) a program
    that is descheduled would otherwise hit its time limit before the limit it really exceeds
    (e.g. a doubling allocation reported as a timeout instead of a memory blow-up, depending on
    the machine's load). Wall-clock time is still bounded by the parent's deadline
    in subprocess isolation.
    """
    if limit_s is None:
        return lambda: None
    deadline = time.thread_time() + limit_s
    previous = sys.gettrace()

    def local(frame: types.FrameType, event: str, arg: Any):
        if time.thread_time() > deadline:
            raise _Deadline()
        return local

    def global_trace(frame: types.FrameType, event: str, arg: Any):
        if frame.f_code.co_filename != SANDBOX_FILENAME:
            return None
        if time.thread_time() > deadline:
            raise _Deadline()
        return local

    sys.settrace(global_trace)
    return lambda: sys.settrace(previous)


def _program_line(tb: types.TracebackType | None) -> int | None:
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == SANDBOX_FILENAME:
            line = lineno
    return line


def _translate(exc: BaseException, limit_s: float | None) -> SandboxError:
    """Map an exception raised while running a program to a structured error."""
    if isinstance(exc, SandboxError):
        return exc
    line = _program_line(exc.__traceback__)
    if isinstance(exc, _Deadline):
        return SandboxError("timeout", f"program exceeded its time limit of {limit_s} s", line)
    if isinstance(exc, MemoryError):
        return SandboxError("memory", "program exceeded its memory limit", line)
    if isinstance(exc, RecursionError):
        return SandboxError("runtime", "recursion too deep (RecursionError)", line)
    if isinstance(exc, AssertionError):
        msg = str(exc) or "assertion failed"
        return SandboxError("runtime", f"AssertionError: {msg}", line)
    msg = str(exc)
    if len(msg) > 500:
        msg = msg[:500] + "..."
    return SandboxError("runtime", f"{type(exc).__name__}: {msg}", line)


def _check_namespace(namespace: Mapping[str, Any]) -> None:
    for k, v in namespace.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ValueError(f"namespace key {k!r} is not an identifier")
        if isinstance(v, types.ModuleType):
            raise ValueError(
                f"namespace[{k!r}] is a module; modules expose file and process access. "
                "Pass restricted_module(module, names) instead."
            )


def _run_in_process(
    tree: ast.Module,
    namespace: Mapping[str, Any],
    limits: Limits,
    time_limit_s: float | None,
) -> dict[str, Any]:
    code = compile(tree, SANDBOX_FILENAME, "exec")
    env: dict[str, Any] = {"__builtins__": _safe_builtins(limits)}
    env.update(namespace)
    uninstall = _install_deadline(time_limit_s)
    try:
        exec(code, env)  # noqa: S102 - the whole point: validated, restricted globals
    except BaseException as e:  # noqa: BLE001 - every failure becomes a structured value
        uninstall()
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise _translate(e, time_limit_s) from None
    uninstall()
    return env


def _set_worker_limits(time_limit_s: float | None, memory_limit_mb: float | None) -> None:
    import resource

    if time_limit_s is not None:
        cpu = int(math.ceil(time_limit_s)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if memory_limit_mb is not None:
        # Budget on top of what the interpreter already maps, so limits mean "extra memory".
        with open("/proc/self/statm") as f:
            vm_pages = int(f.read().split()[0])
        current = vm_pages * os.sysconf("SC_PAGE_SIZE")
        cap = current + int(memory_limit_mb * _MB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _worker_main(
    conn: Any,
    source: str,
    namespace: dict[str, Any],
    allowed: list[str],
    profile: str,
    limits: Limits,
    time_limit_s: float | None,
    memory_limit_mb: float | None,
    result_name: str | None,
    call: tuple[str, tuple[Any, ...]] | None,
) -> None:
    """Subprocess body: limit itself, run the program, send ('ok', value) or ('err', error)."""
    try:
        _set_worker_limits(time_limit_s, memory_limit_mb)
        sys.setrecursionlimit(2_000)
        tree = validate(source, allowed, profile=profile, limits=limits)
        env = _run_in_process(tree, namespace, limits, time_limit_s)
        if call is not None:
            fn_name, args = call
            fn = _wrap_function(env[fn_name], time_limit_s)
            value = fn(*args)
            if profile == "potential":
                ensure_finite(value, f"{fn_name}(probe)")
        elif result_name is None:
            value = None
        elif result_name not in env:
            raise SandboxError(
                "result", f"program did not assign the variable {result_name!r} with its result"
            )
        else:
            value = env[result_name]
        try:
            payload = pickle.dumps(("ok", value))
        except Exception as e:  # noqa: BLE001
            raise SandboxError(
                "result", f"program result is not transferable ({type(e).__name__}: {e})"
            ) from None
        conn.send_bytes(payload)
    except BaseException as e:  # noqa: BLE001
        err = _translate(e, time_limit_s)
        try:
            conn.send_bytes(pickle.dumps(("err", err)))
        except BaseException:  # noqa: BLE001 - e.g. out of memory while reporting
            os._exit(3)
    finally:
        conn.close()


def _default_start_method() -> str:
    # forkserver: the server is a clean single-threaded process, so forking from it is safe even
    # when the host runs JAX/XLA threads; namespaces travel by pickle.
    methods = mp.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _run_worker(
    source: str,
    namespace: Mapping[str, Any],
    *,
    profile: str,
    limits: Limits,
    time_limit_s: float,
    memory_limit_mb: float | None,
    result_name: str | None,
    call: tuple[str, tuple[Any, ...]] | None,
    start_method: str | None,
) -> Any:
    ctx = mp.get_context(start_method or _default_start_method())
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_worker_main,
        args=(
            child,
            source,
            dict(namespace),
            sorted(namespace),
            profile,
            limits,
            time_limit_s,
            memory_limit_mb,
            result_name,
            call,
        ),
        daemon=True,
    )
    try:
        proc.start()
    except Exception as e:  # noqa: BLE001 - e.g. unpicklable namespace
        raise ValueError(f"could not start the sandbox worker: {type(e).__name__}: {e}") from e
    child.close()
    # The worker's own limits are CPU time (the tracer deadline, RLIMIT_CPU), which machine load
    # does not change. The wall-clock backstop only catches a worker that stops making progress
    # without using CPU; it is generous so that a loaded machine (worker start, unpickling, a
    # descheduled program) cannot turn a memory or runtime failure into a timeout.
    backstop = 4.0 * time_limit_s + 10.0
    try:
        if not parent.poll(backstop):
            raise SandboxError(
                "timeout",
                f"program exceeded its time limit of {time_limit_s} s "
                f"(no answer within the {backstop:.0f} s wall-clock backstop)",
            )
        try:
            status, value = pickle.loads(parent.recv_bytes())
        except (EOFError, OSError):
            proc.join(1.0)
            code = proc.exitcode
            import signal

            if code == -signal.SIGXCPU or code == -signal.SIGKILL:
                raise SandboxError(
                    "timeout", f"program exceeded its CPU-time limit of {time_limit_s} s"
                ) from None
            if code == 3:
                raise SandboxError("memory", "program exceeded its memory limit") from None
            raise SandboxError(
                "runtime", f"sandbox worker died unexpectedly (exit code {code})"
            ) from None
    finally:
        parent.close()
        if proc.is_alive():
            proc.kill()
        proc.join(2.0)
    if status == "err":
        raise value
    return value


def execute(
    source: str,
    namespace: Mapping[str, Any],
    *,
    time_limit_s: float = 5.0,
    memory_limit_mb: float | None = 512.0,
    result_name: str | None = "result",
    profile: str = "scene",
    isolation: str = "subprocess",
    limits: Limits | None = None,
    start_method: str | None = None,
) -> Any:
    """Validate and run a program; return the value it bound to ``result_name``.

    ``isolation="subprocess"`` (default, required for scene programs) runs it in a worker with
    ``RLIMIT_CPU``/``RLIMIT_AS``, a CPU-time deadline and a wall-clock backstop; the namespace and
    the result travel by pickle, so SDK objects mutated by the program come back only through
    the result.
    ``isolation="inprocess"`` runs it here with only the line-tracer deadline (no memory limit);
    use it for trusted-shape programs such as already-probed potentials.
    Raises ``SandboxError`` for every failure of the program.
    """
    limits = limits or Limits()
    _check_namespace(namespace)
    if isolation not in ("subprocess", "inprocess"):
        raise ValueError(f"unknown isolation {isolation!r}; valid: ['inprocess', 'subprocess']")
    tree = validate(source, namespace.keys(), profile=profile, limits=limits)
    if isolation == "inprocess":
        env = _run_in_process(tree, namespace, limits, time_limit_s)
        if result_name is None:
            return None
        if result_name not in env:
            raise SandboxError(
                "result", f"program did not assign the variable {result_name!r} with its result"
            )
        return env[result_name]
    return _run_worker(
        source,
        namespace,
        profile=profile,
        limits=limits,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
        result_name=result_name,
        call=None,
        start_method=start_method,
    )


def ensure_finite(value: Any, what: str = "potential") -> None:
    """Raise ``SandboxError('result')`` unless ``value`` is numeric and all-finite."""
    import numpy as np

    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SandboxError(
            "result", f"{what} returned a non-numeric value of type {type(value).__name__}"
        ) from None
    if not np.all(np.isfinite(arr)):
        n_bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise SandboxError("result", f"{what} returned non-finite values (NaN/inf in {n_bad})")


def _wrap_function(fn: Callable[..., Any], time_limit_s: float | None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        uninstall = _install_deadline(time_limit_s)
        try:
            return fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            if type(e).__module__.startswith("jax") and not isinstance(e, _Deadline):
                raise  # JAX tracing errors (e.g. concretization) keep their own type and message
            raise _translate(e, time_limit_s) from None
        finally:
            uninstall()

    return guarded


def compile_function(
    source: str,
    entry: str,
    namespace: Mapping[str, Any],
    *,
    time_limit_s: float = 5.0,
    probe_args: tuple[Any, ...] | None = None,
    probe_memory_limit_mb: float | None = 1024.0,
    limits: Limits | None = None,
    start_method: str | None = None,
) -> Callable[..., Any]:
    """Validate a potential program and return its ``entry`` function, usable in-process.

    The function's globals are only ``namespace`` plus the safe builtins; calls run under a
    CPU-time deadline (of the calling thread) of ``time_limit_s``. With ``probe_args`` the
    program is first run once in a limited worker subprocess as ``entry(*probe_args)`` and its
    output must be finite, so a non-terminating, memory-hungry or NaN-producing potential is
    refused before it runs here.
    The result may be passed to ``jax.jit``; JAX's own tracing errors propagate unchanged.
    """
    limits = limits or Limits()
    _check_namespace(namespace)
    tree = validate(source, namespace.keys(), profile="potential", limits=limits)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if entry not in defs:
        raise SandboxError(
            "validate", f"program must define a top-level function {entry!r}; found {sorted(defs)}"
        )
    if probe_args is not None:
        _run_worker(
            source,
            namespace,
            profile="potential",
            limits=limits,
            time_limit_s=time_limit_s,
            memory_limit_mb=probe_memory_limit_mb,
            result_name=None,
            call=(entry, tuple(probe_args)),
            start_method=start_method,
        )
    env = _run_in_process(tree, namespace, limits, time_limit_s)
    return _wrap_function(env[entry], time_limit_s)


class RestrictedModule:
    """Chosen attributes of a module; pickles by (module name, names) so it reaches workers."""

    def __init__(self, module_name: str, names: Iterable[str]) -> None:
        import importlib

        module = importlib.import_module(module_name)
        self._spec = (module_name, tuple(names))
        for name in self._spec[1]:
            if name.startswith("_"):
                raise ValueError(f"cannot expose private attribute {name!r}")
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                raise ValueError(f"{module_name}.{name} is a module; expose its functions instead")
            setattr(self, name, value)

    def __reduce__(self):
        return (RestrictedModule, self._spec)

    def __repr__(self) -> str:
        return f"RestrictedModule({self._spec[0]!r}, {list(self._spec[1])})"


def restricted_module(module: types.ModuleType, names: Iterable[str]) -> RestrictedModule:
    """Expose chosen attributes of a module (e.g. ``jax.numpy``) without the rest of it.

    Program code cannot reach the module itself: the object holds only the listed attributes
    (its private bookkeeping is behind an underscore, which the validator refuses).
    """
    return RestrictedModule(module.__name__, names)
