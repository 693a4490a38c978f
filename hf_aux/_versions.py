"""Fail loudly on dependency versions outside the ranges hf_aux was tested with.

transformers 5.x changed the signatures of ``Trainer.compute_loss`` and ``Trainer.training_step``
(``num_items_in_batch``); the trainers here override both, so an untested major version is an error,
not a silent misbehaviour.
"""

from importlib.metadata import version

from packaging.version import Version

# package -> (lowest tested, first untested major)
TESTED_RANGES = {
    "transformers": ("5.20", "6"),
    "torch": ("2.4", "2.15"),
    "datasets": ("4.0", "6"),
    "accelerate": ("1.10", "2"),
}


def check_versions() -> None:
    for package, (low, high) in TESTED_RANGES.items():
        installed = Version(version(package))
        if not Version(low) <= Version(installed.base_version) < Version(high):
            raise ImportError(
                f"hf_aux needs {package}>={low},<{high} (tested ranges, see setup.cfg); found {installed}. "
                f"Install a supported version, e.g. pip install '{package}>={low},<{high}'."
            )
