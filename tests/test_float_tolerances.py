"""Every float comparison in the suite carries an absolute tolerance that fits float32.

An rtol-only check on a value near zero passes on one CPU and fails on another (a critic test
compared values near 0.005 with rtol=1e-5 and failed on an AMD EPYC by 6e-8). This test reads the
suite's source and fails on any `allclose` / `isclose` / `assert_allclose` /
`assert_trees_all_close` without `atol=` or `pytest.approx` without `abs=`.
"""

from __future__ import annotations

import ast
import pathlib

_REQUIRED = {
    "assert_allclose": "atol",
    "allclose": "atol",
    "isclose": "atol",
    "assert_trees_all_close": "atol",
    "approx": "abs",
}


def _missing_tolerances(path: pathlib.Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        need = _REQUIRED.get(name)
        if need is None:
            continue
        kws = {k.arg for k in node.keywords}  # None: a **kwargs splat (checked where defined)
        if need not in kws and None not in kws:
            out.append(f"{path.name}:{node.lineno}: {name}(...) without {need}=")
    return out


def test_every_float_comparison_has_an_absolute_tolerance():
    here = pathlib.Path(__file__).parent
    files = sorted(here.glob("test_*.py")) + [here / "conftest.py"]
    assert len(files) > 10
    missing = [m for p in files for m in _missing_tolerances(p)]
    assert not missing, "float comparisons without an absolute tolerance:\n" + "\n".join(missing)


def test_the_scanner_flags_rtol_only_checks(tmp_path):
    p = tmp_path / "test_x.py"
    p.write_text(
        "np.testing.assert_allclose(a, b, rtol=1e-5)\n"
        "np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)\n"
        "assert x == pytest.approx(0.1)\n"
        "assert x == pytest.approx(0.1, abs=1e-6)\n"
    )
    assert [m.split(":")[1] for m in _missing_tolerances(p)] == ["1", "3"]
