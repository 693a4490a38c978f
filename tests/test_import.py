"""`import hf_aux` is lazy: the public names resolve on first use, and nothing heavy is imported before."""

import subprocess
import sys

import pytest

import hf_aux

HEAVY = ("torch", "transformers", "peft", "datasets", "matplotlib", "evaluate", "accelerate")


def test_import_hf_aux_imports_nothing_heavy():
    probe = f"import sys, hf_aux; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.split() == []


def test_first_use_imports_the_trainer():
    probe = "import sys; from hf_aux import MuppetTrainer; print(MuppetTrainer.__module__, 'peft' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["hf_aux.muppet.trainer", "True"]


def test_every_public_name_resolves_to_its_definition():
    wrong = []
    for name in sorted(set(hf_aux.__all__) - {"__version__"}):
        value = getattr(hf_aux, name)
        module = sys.modules[f"hf_aux.{hf_aux._LAZY_NAMES[name]}"]
        if value is not getattr(module, name) or name not in dir(hf_aux):
            wrong.append(name)
    assert wrong == []


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NoSuchTrainer'"):
        hf_aux.NoSuchTrainer  # noqa: B018
    with pytest.raises(ImportError):
        exec("from hf_aux import NoSuchTrainer", {})
