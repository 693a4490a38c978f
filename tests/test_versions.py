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


def test_the_versions_the_readme_and_setup_cfg_say_were_tested_are_the_ones_ci_installs():
    """README's "Tested with ..." line and setup.cfg's comment above install_requires name, for each package, the
    major.minor version constraints.txt pins (the one CI installs)."""
    import re

    pinned = pins()
    readme = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("Tested with"))
    setup = next(line for line in (ROOT / "setup.cfg").read_text().splitlines() if "Ranges we have tested" in line)
    for text in (readme, setup):
        named = dict(re.findall(r"(transformers|datasets|accelerate|peft|torch) (\d+\.\d+)", text))
        assert set(named) == {"transformers", "datasets", "accelerate", "peft", "torch"}, text
        for package, version in named.items():
            assert version == f"{pinned[package].major}.{pinned[package].minor}", (text, package, pinned[package])


def test_report_to_tensorboard_without_tensorboard_names_the_extra(monkeypatch, tmp_path):
    """--report_to tensorboard needs the tensorboard package, which only the `tensorboard` extra installs: without
    it the arguments are refused before any work, naming the extra (Trainer would fail after loading everything)."""
    import configparser
    import importlib.util

    from hf_aux.finetune import command as finetune

    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg")
    assert extras["options.extras_require"]["tensorboard"].split() == ["tensorboard>=2.21"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("tensorboard", "tensorboardX") else real(name, *a))
    argv = ["--train_file", str(tmp_path / "train.jsonl"), "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"field 'report_to': tensorboard needs the tensorboard package, which is "
                                         r"not installed: pip install 'hf_aux\[tensorboard\]'"):
        finetune.parse_args([*argv, "--report_to", "tensorboard"])
    finetune.parse_args([*argv, "--report_to", "none"])
