"""Tests never touch the network: offline mode is set before anything imports huggingface_hub or datasets
(both read these variables once, at import). The local Hub server fixture (tests/hub_server.py) switches its own
tests back online against 127.0.0.1 only."""

import os

for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[variable] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
