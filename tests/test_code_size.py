"""Split by concept (issue 27 item 8): every module under coda/ is under 600 lines and every
function under 80, unless a `# long: <reason>` comment in its first lines says why not."""

from __future__ import annotations

import ast
from pathlib import Path

CODA = Path(__file__).resolve().parent.parent / "coda"
MAX_FILE, MAX_FUNCTION = 600, 80


def sizes(root: Path = CODA) -> tuple[list[tuple[str, int]], list[tuple[str, str, int]]]:
    """(files over MAX_FILE lines, functions over MAX_FUNCTION lines without a reason)."""
    files, functions = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        if len(lines) > MAX_FILE:
            files.append((str(path), len(lines)))
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                head = lines[node.lineno - 1 : node.lineno + 3]
                if n > MAX_FUNCTION and not any("# long:" in x for x in head):
                    functions.append((str(path), node.name, n))
    return files, functions


def test_modules_and_functions_stay_small():
    files, functions = sizes()
    assert not files, f"modules over {MAX_FILE} lines (split by concept): {files}"
    assert not functions, (
        f"functions over {MAX_FUNCTION} lines (or say why: '# long:'): {functions}"
    )


def test_the_size_check_sees_long_functions(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION))
    (tmp_path / "a.py").write_text(f"def f():\n{body}\n")
    (tmp_path / "b.py").write_text(f"def g():\n    # long: a table\n{body}\n")
    _, functions = sizes(tmp_path)
    assert [(Path(p).name, name) for p, name, _ in functions] == [("a.py", "f")]
