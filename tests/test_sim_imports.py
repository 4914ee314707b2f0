"""The import graph of `coda.sim` has no cycle, counting function-level (lazy) imports too.

A lazy import hides a circle from Python's loader but not from the design: `scene ↔ sdk ↔
tasks` used to import each other inside functions. The graph is built from the AST of every
module under coda/sim (every `import` / `from ... import` anywhere in the file, including inside
functions and `if TYPE_CHECKING:` blocks), restricted to edges between coda.sim modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parent.parent / "coda" / "sim"


def _module_name(path: Path, root: Path) -> str:
    parts = ("coda", "sim", *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The coda.sim module `name` refers to: itself, or its longest known prefix (for
    `from coda.sim.scene import Scene` the target is coda.sim.scene)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(root: Path = SIM) -> dict[str, set[str]]:
    """{module: coda.sim modules it imports anywhere in its source} for root/**/*.py."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from coda.sim import tasks` imports the submodule coda.sim.tasks,
                # `from coda.sim.scene import Scene` the module coda.sim.scene
                targets = [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                dst = _resolve(t, modules)
                if dst is not None and dst != mod:
                    graph[mod].add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (iterative DFS, white / grey / black)."""
    state = dict.fromkeys(graph, 0)  # 0 unvisited, 1 on the stack, 2 done
    for start in sorted(graph):
        if state[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph[nxt]))))
                path.append(nxt)
    return None


def test_coda_sim_imports_are_acyclic():
    graph = import_graph()
    assert "coda.sim.scene" in graph and "coda.sim.tasks.pick_place" in graph
    # the edges that used to close the circle are still there, one way only
    assert "coda.sim.tasks" in graph["coda.sim.scene"]
    assert "coda.sim.tasks" in graph["coda.sim.sdk"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in coda.sim: " + " -> ".join(cycle)


def test_the_checker_sees_function_level_and_from_package_imports(tmp_path):
    """A circle closed only by a lazy `from pkg import mod` inside a function is found."""
    pkg = tmp_path / "sim"
    (pkg / "tasks").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "scene.py").write_text("def resample():\n    from coda.sim import tasks\n")
    (pkg / "tasks" / "__init__.py").write_text("from coda.sim.scene import resample\n")
    graph = import_graph(pkg)
    assert graph["coda.sim.scene"] == {"coda.sim.tasks"}
    assert find_cycle(graph) in (
        ["coda.sim.scene", "coda.sim.tasks", "coda.sim.scene"],
        ["coda.sim.tasks", "coda.sim.scene", "coda.sim.tasks"],
    )
    (pkg / "scene.py").write_text("import numpy\n")
    assert find_cycle(import_graph(pkg)) is None


def test_a_family_module_imports_first_in_a_fresh_interpreter():
    """No import order is needed: a family's own module first (its package init then loads
    every family, the builder and the scene data mid-way) and then the former circle."""
    import subprocess
    import sys

    code = (
        "import coda.sim.tasks.pick_place\n"
        "from coda.sim.scene import resample\n"
        "from coda.sim.sdk import exec_program\n"
        "from coda.sim.planner import planner_for\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
