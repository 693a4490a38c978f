"""The one error type for a mistake in what the user gave: a flag, a value, a file, a task, a column, an output
folder in use. Its message says what is wrong and what to do; the command line (`hf_aux.run_guard.run_command`)
prints it as one line, `<command>: error: <message>`, and exits with status 2, as argparse does for a bad flag,
instead of printing a traceback. Any other exception is a fault of hf_aux or of a library, and keeps its traceback.

It subclasses ValueError, so that code catching ValueError (and tests expecting one) see no difference."""

from __future__ import annotations

__all__ = ["UserInputError"]


class UserInputError(ValueError):
    """What the user gave cannot be used as it is; the message names it and says what to do."""
