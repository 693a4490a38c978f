"""Tasks, from their description to batches: the spec, the registry, reading and checking data, preprocessing,
tokenising and collating, the demo data, metrics, streaming corpora and MUPPET's task batches.

The names of the old module `hf_aux.tasks` (now `hf_aux.tasks.loading`) stay importable from here, as docs/tasks.md
shows them (`from hf_aux.tasks import load_mixture, load_task_splits`)."""

from .loading import *  # noqa: F401,F403
from .loading import __all__  # noqa: F401
