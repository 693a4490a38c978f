"""Dependency versions (issue #60): setup.cfg declares minimums (what a feature needs, or the oldest release seen to
run) and no upper bound unless a release is known to break hf_aux; the tested versions (hf_aux._versions.TESTED)
are the ones CI installs (constraints.txt); outside them `import hf_aux` warns once and runs, in a fresh process and
through the installed command, instead of refusing to import."""

import os
import re
import subprocess
import sys
import warnings
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


def setup_cfg_requirements(extra: str | None = None) -> dict[str, Requirement]:
    """setup.cfg's install_requires, or with `extra` that extra's requirements."""
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    lines = parser["options.extras_require"][extra] if extra else parser["options"]["install_requires"]
    found = [Requirement(line) for line in lines.split("\n") if line.strip()]
    return {_versions._normal(r.name): r for r in found}


def declared_ranges() -> dict[str, Requirement]:
    """install_requires and the `evaluate` extra (HfAuxMetric's, a tested library that is not a requirement)."""
    return {**setup_cfg_requirements("evaluate"), **setup_cfg_requirements()}


def test_the_tested_versions_are_the_ones_ci_installs_and_inside_the_declared_ranges():
    declared, pinned = declared_ranges(), pins()
    for package, tested in _versions.TESTED.items():
        name = _versions._normal(package)
        assert name in pinned, f"{package}: no tested version in constraints.txt"
        assert tested == f"{pinned[name].major}.{pinned[name].minor}", (package, tested, pinned[name])
        assert declared[name].specifier.contains(pinned[name]), (package, declared[name])


def test_no_upper_bound_without_a_release_known_to_break_hf_aux():
    """An upper bound refuses a release that may well work (a cluster's torch, a newer transformers): setup.cfg may
    hold one only beside a comment naming the release that breaks hf_aux ("<package> <version> breaks ...")."""
    text = (ROOT / "setup.cfg").read_text()
    for name, requirement in declared_ranges().items():
        for spec in requirement.specifier:
            if spec.operator in ("<", "<=", "==", "~="):
                assert re.search(rf"{name}[ _-]?\S* {re.escape(spec.version)}\S* breaks", text, re.I), \
                    f"{requirement}: an upper bound needs the release that breaks hf_aux named in setup.cfg"
        lower = [spec for spec in requirement.specifier if spec.operator == ">="]
        if name in map(_versions._normal, _versions.TESTED):
            assert lower and re.search(rf"#\s+{name.replace('-', '[_-]')} >= {re.escape(lower[0].version)}: ", text), \
                f"{requirement}: setup.cfg says why its minimum is {lower and lower[0].version}"


def test_an_untested_version_warns_once_naming_it_and_never_refuses(monkeypatch):
    monkeypatch.setattr(_versions, "version", lambda name: {"torch": "2.15.0", "transformers": "5.3.1"}.get(
        name) or __import__("importlib.metadata").metadata.version(name))
    monkeypatch.setattr(_versions, "declared_requirements", lambda: {"torch": Requirement("torch>=2.6"),
                                                                     "transformers": Requirement("transformers>=5.4")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _versions.check_versions()  # no ImportError
    (warning,) = caught
    assert warning.category is _versions.UntestedVersionWarning
    text = str(warning.message)
    assert "torch 2.15.0, tested with 2.13" in text
    assert "transformers 5.3.1, outside what hf_aux declares (>=5.4; tested with 5.24)" in text
    assert "pip install 'torch==2.13.*' 'transformers==5.24.*'" in text
    monkeypatch.undo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _versions.check_versions()
    assert not caught  # the installed versions are the tested ones


FAKE_VERSIONS = """
import importlib.metadata as metadata
real = metadata.version
fake = {"torch": "2.12.1", "transformers": "6.0.0"}
metadata.version = lambda name: fake.get(name) or real(name)
"""


def test_import_and_the_installed_command_run_with_a_cluster_torch_and_a_newer_transformers(tmp_path):
    """A fresh process whose metadata says torch 2.12 (a cluster's) and transformers 6.0 (newer than any tested):
    `import hf_aux` warns once and works, and so does the installed `hf-aux` (it used to raise ImportError)."""
    (tmp_path / "sitecustomize.py").write_text(FAKE_VERSIONS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-W", "default", "-c", "import hf_aux, hf_aux.cli; print(hf_aux.__version__)"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("UntestedVersionWarning") == 1, done.stderr
    # (the ranges come from the installed metadata, which an editable install refreshes only on reinstalling)
    assert re.search(r"torch 2\.12\.1, .*tested with 2\.13\)?; transformers 6\.0\.0, .*tested with 5\.24", done.stderr)
    command = Path(sys.executable).parent / "hf-aux"
    listed = subprocess.run([str(command), "tasks", "--search", "sentiment"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert listed.returncode == 0 and "demo/imdb" in listed.stdout, listed.stderr[-2000:]
    assert listed.stderr.count("UntestedVersionWarning") <= 1


def test_the_versions_the_readme_and_setup_cfg_say_were_tested_are_the_ones_ci_installs():
    """README's "Tested with ..." line and setup.cfg's comment above install_requires name, for each package, the
    major.minor version constraints.txt pins (the one CI installs); the README no longer says hf_aux refuses."""
    pinned = pins()
    readme_text = (ROOT / "README.md").read_text()
    readme = next(line for line in readme_text.splitlines() if line.startswith("Tested with"))
    setup = next(line for line in (ROOT / "setup.cfg").read_text().splitlines() if "Versions we have tested" in line)
    for text in (readme, setup):
        named = dict(re.findall(r"(transformers|datasets|accelerate|peft|torch) (\d+\.\d+)", text))
        assert set(named) == {"transformers", "datasets", "accelerate", "peft", "torch"}, text
        for package, version in named.items():
            assert version == f"{pinned[package].major}.{pinned[package].minor}", (text, package, pinned[package])
    assert "ImportError" not in readme_text and "refuses to import" not in readme_text


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
