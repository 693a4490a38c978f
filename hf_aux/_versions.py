"""Dependency versions: the ranges hf_aux declares, the versions it was tested with, and one warning outside them.

setup.cfg's `install_requires` states, for each library, the minimum that a feature of hf_aux needs (the reason
beside it in setup.cfg) and an upper bound only where a release is known to break hf_aux (setup.cfg names it). CI
tests one version of each, `TESTED` below (constraints.txt pins exactly those; tests/test_versions.py keeps the
two the same). At import, hf_aux warns once (`UntestedVersionWarning`) when an installed version is not the tested
one, or is outside the declared range, naming each such package, what was tested and the pip command that installs
it. It never refuses to import: a cluster's torch or a newer release may well work, and the warning says what to
suspect if something then fails.
"""

from __future__ import annotations

import configparser
import warnings
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as _normal  # Huggingface_Hub -> huggingface-hub
from packaging.version import Version

__version__ = "0.1.0"  # hf_aux's own (setup.cfg reads it here; `hf_aux.__version__` is this)

# the major.minor release of each library that hf_aux depends on closely and CI tests (constraints.txt)
TESTED = {"torch": "2.13", "transformers": "5.24", "datasets": "5.2", "accelerate": "1.15", "peft": "0.21",
          "huggingface_hub": "2.4", "evaluate": "0.4"}


class UntestedVersionWarning(UserWarning):
    """An installed library is not the version hf_aux was tested with (or is outside the range it declares)."""


def declared_requirements() -> dict[str, Requirement]:
    """The install requirements hf_aux declares (no extras), by normalised package name."""
    try:
        lines = requires("hf_aux") or []
    except PackageNotFoundError:  # a source tree used without installing it
        parser = configparser.ConfigParser()
        parser.read(Path(__file__).resolve().parents[1] / "setup.cfg")
        lines = parser.get("options", "install_requires", fallback="").split("\n")
    found = [Requirement(line) for line in lines if line.strip()]
    return {_normal(r.name): r for r in found if r.marker is None or "extra" not in str(r.marker)}


def untested_versions() -> list[str]:
    """One phrase per checked library installed at a version other than the tested one: outside the declared range
    ("torch 2.4.0, below what hf_aux needs (>=2.6)") or only untested ("torch 2.15.0, tested with 2.13")."""
    declared = declared_requirements()
    found = []
    for package, tested in TESTED.items():
        try:
            installed = Version(version(package))
        except PackageNotFoundError:
            continue
        base = Version(installed.base_version)
        requirement = declared.get(_normal(package))
        if requirement is not None and not requirement.specifier.contains(base, prereleases=True):
            found.append(f"{package} {installed}, outside what hf_aux declares ({requirement.specifier}; tested "
                         f"with {tested})")
        elif (base.major, base.minor) != tuple(int(part) for part in tested.split(".")):
            found.append(f"{package} {installed}, tested with {tested}")
    return found


def check_versions() -> None:
    """Warn once (at import) about every library installed at a version hf_aux was not tested with."""
    found = untested_versions()
    if not found:
        return
    pins = " ".join(f"'{package}=={TESTED[package]}.*'" for package in TESTED
                    if any(phrase.startswith(package + " ") for phrase in found))
    warnings.warn(f"hf_aux was not tested with {'; '.join(found)}. It runs, but if training, saving or loading then "
                  f"fails in a library, suspect these versions first; the tested ones: pip install {pins}",
                  UntestedVersionWarning, stacklevel=3)
