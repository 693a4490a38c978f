"""The declared dependency ranges are the tested ones: their lower ends are the versions CI installs
(constraints.txt, which setup_env.sh gives pip), the installed versions are inside them, and hf_aux refuses to
import outside them with a message naming the package, the range and the fix."""

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from hf_aux import _versions

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, Version]:
    lines = [line.split("#")[0].strip() for line in (ROOT / "constraints.txt").read_text().splitlines()]
    found = [Requirement(line) for line in lines if line]
    return {_versions._normal(r.name): Version(str(r.specifier).lstrip("=")) for r in found}


def test_every_checked_range_starts_at_the_version_ci_tests():
    declared, pinned = _versions.declared_requirements(), pins()
    for package in _versions.CHECKED:
        name = _versions._normal(package)
        lower = next(s.version for s in declared[name].specifier if s.operator == ">=")
        assert name in pinned, f"{package}: no tested version in constraints.txt"
        assert Version(lower) == Version(f"{pinned[name].major}.{pinned[name].minor}") or \
            Version(lower) == pinned[name], f"{package}: range starts at {lower}, CI tests {pinned[name]}"
        assert declared[name].specifier.contains(pinned[name]), package


def test_a_version_outside_the_range_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(_versions, "declared_requirements", lambda: {"torch": Requirement("torch>=99,<100")})
    with pytest.raises(ImportError, match=r"hf_aux needs torch<100,>=99 .*found 2\.\d+.*pip install 'torch<100,>=99'"):
        _versions.check_versions()
    monkeypatch.undo()
    _versions.check_versions()  # the installed versions are inside the declared ranges
