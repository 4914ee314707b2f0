"""The lock file is the install: it agrees with pyproject's direct pins and with this venv."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
_LINE = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)\s*(?:;\s*(.*))?$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, list[tuple[str, str | None]]]:
    out: dict[str, list[tuple[str, str | None]]] = {}
    for raw in (ROOT / "requirements.lock").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, f"requirements.lock: not an exact pin: {line!r}"
        out.setdefault(_norm(m[1]), []).append((m[2], m[3]))
    return out


def _direct_pins() -> dict[str, str]:
    """Quoted `name==version` requirements of pyproject.toml (dependencies and extras); a regex,
    not tomllib, so that the check runs on Python 3.10 too."""
    text = (ROOT / "pyproject.toml").read_text()
    return {
        _norm(n): v for n, v in re.findall(r'^\s*"([A-Za-z0-9_.\-]+)==([^\s";,]+)"', text, re.M)
    }


def test_every_direct_pin_is_locked_at_the_same_version():
    lock, pins = _lock(), _direct_pins()
    assert len(pins) >= 15 and len(lock) > len(pins)
    wrong = {
        n: (v, lock.get(n)) for n, v in pins.items() if v not in [x for x, _ in lock.get(n, [])]
    }
    assert not wrong, f"pyproject pins differ from requirements.lock (run `make lock`): {wrong}"


def test_installed_packages_match_the_lock():
    """A venv installed some other way (drifting transitive versions) is caught here."""
    lock = _lock()
    drift = {}
    for name, versions in lock.items():
        if any(marker for _, marker in versions):
            continue  # platform- or python-specific entries: not checked here
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            drift[name] = (versions[0][0], None)
            continue
        if have != versions[0][0]:
            drift[name] = (versions[0][0], have)
    assert not drift, (
        f"installed versions differ from requirements.lock (run `make setup`): {drift}"
    )
