"""Old module paths, kept working for one release after the layout by method (see CHANGELOG.md): importing one
warns (DeprecationWarning) and hands over the module at its new path, the very same module object, so every name
(and every pickle that names the old path, such as a checkpoint's training_args.bin) resolves as before."""

from __future__ import annotations

import importlib
import sys
import warnings

REMOVED_IN = "0.3"


def alias(old: str, new: str) -> None:
    """Make module `old` (being imported now) the module `new`."""
    warnings.warn(f"{old} moved to {new}; the old path works until hf_aux {REMOVED_IN}", DeprecationWarning,
                  stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
