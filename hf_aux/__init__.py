"""hf_aux: Hugging Face Trainer subclasses for training language encoders with auxiliary objectives."""

__version__ = "0.1.0"

from ._versions import check_versions

check_versions()

# Public API (filled in as the modules land)
__all__ = ["__version__"]
