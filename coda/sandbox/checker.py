"""Gate 1: the AST allowlist. ``validate`` parses a program and refuses every construct, name and
literal outside the profile (``scene`` or the stricter ``potential``) with a ``SandboxError``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from coda.sandbox.base import SAFE_BUILTIN_NAMES, SANDBOX_FILENAME, Limits, SandboxError

__all__ = ["FORBIDDEN_ATTRS", "FORBIDDEN_NAMES", "validate"]

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
