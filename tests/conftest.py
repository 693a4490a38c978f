"""Tests never touch the network: offline mode is set before anything imports huggingface_hub or datasets
(both read these variables once, at import). The local Hub server fixture (tests/hub_server.py) switches its own
tests back online against 127.0.0.1 only."""

import os

import torch

for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[variable] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# hf_aux retries a failing Hub call after 2 s, then 4 s: the local test Hub fails on purpose, so retry at once
os.environ.setdefault("HF_AUX_HUB_BACKOFF", "0.05")

# The test models are tiny (hidden 32): one thread avoids synchronisation costs that dominate at this size and
# on shared cores (a 25-step fine-tune measured 2.5 s with 1 thread against 27 s with 2 under load).
torch.set_num_threads(1)
