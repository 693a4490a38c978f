"""Fail loudly on dependency versions outside the ranges hf_aux was tested with.

The ranges are declared once, in setup.cfg's `install_requires`, and are what CI tests: their lower ends are the
versions CI installs (`bash setup_env.sh`), their upper ends the next release that may break the Trainer overrides
(transformers 5.x changed the signatures of ``Trainer.compute_loss`` and ``Trainer.training_step``; the trainers
here override both). At import, hf_aux reads the ranges back from its installed metadata (or, in a source tree
that was never installed, from setup.cfg) and refuses an installed version outside them, naming the package, the
range and the pip command that fixes it.
"""

from __future__ import annotations

import configparser
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

# the libraries whose internals hf_aux depends on: checked at import
CHECKED = ("torch", "transformers", "datasets", "accelerate", "peft", "huggingface_hub", "evaluate")


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


def _normal(name: str) -> str:
    return name.lower().replace("_", "-")


def check_versions() -> None:
    declared = declared_requirements()
    for package in CHECKED:
        requirement = declared.get(_normal(package))
        if requirement is None:
            continue
        installed = Version(version(package))
        if not requirement.specifier.contains(Version(installed.base_version), prereleases=True):
            raise ImportError(
                f"hf_aux needs {package}{requirement.specifier} (the tested range, see setup.cfg); found {installed}. "
                f"Install a supported version, e.g. pip install '{package}{requirement.specifier}'."
            )
