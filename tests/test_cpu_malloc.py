"""hf_aux.runtime.cpu_malloc: glibc's malloc keeps freed memory on a CPU run (every trainer, unless
cpu_malloc='system').

The setting is process-wide and set once, so each case runs in a fresh Python process. What it changes is read
from the page faults of a buffer made again after it was freed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from transformers import HfArgumentParser

from hf_aux.runtime.config import RUN_CONTROL_FIELDS, TokenSafeTrainingArguments
from hf_aux.runtime import cpu_malloc
from hf_aux.runtime.cpu_malloc import malloc_in_use

HERE = os.path.dirname(os.path.abspath(__file__))
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"

glibc_only = pytest.mark.skipif(malloc_in_use() != "glibc", reason="glibc's malloc only")

# twenty 16 MiB buffers made (every page written), freed and made again: the page faults of each round. With glibc's
# defaults the first round's first buffer is mapped on its own, the rest come from the heap, and the heap's top is
# given back when they are freed, so the second round faults its pages in again; kept (the heap neither trimmed nor
# bypassed), the second round reuses the first one's pages. 320 MiB: more than the 256 MiB top pad, so the trim
# threshold is what keeps them.
PROBE = """
import ctypes, json, resource, sys
from hf_aux.runtime import cpu_malloc
state = cpu_malloc.keep_freed_memory() if sys.argv[1] == "keep" else None
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
size, faults = 16 << 20, []
for _ in range(2):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffers = [libc.malloc(size) for _ in range(20)]
    for buffer in buffers:
        ctypes.memset(buffer, 1, size)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    for buffer in buffers:
        libc.free(buffer)
print(json.dumps({"state": state, "describe": cpu_malloc.describe(), "faults": faults}))
"""
PAGES = 20 * (16 << 20) // 4096


def _probe(mode: str, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=clean | env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@glibc_only
def test_keep_reuses_a_freed_buffers_pages():
    kept = _probe("keep")
    assert kept["state"] == "kept" and kept["describe"] == "glibc malloc, keeping freed memory"
    assert kept["faults"][0] >= 0.9 * PAGES and kept["faults"][1] < 0.01 * PAGES
    system = _probe("system")  # glibc's defaults: the second buffer faults its pages in again
    assert system["describe"] == "glibc malloc"
    assert min(system["faults"]) >= 0.9 * PAGES


@glibc_only
def test_the_users_own_malloc_settings_stand():
    probe = _probe("keep", MALLOC_TOP_PAD_="1048576")
    assert probe["state"] == "user settings: MALLOC_TOP_PAD_"
    assert min(probe["faults"]) >= 0.9 * PAGES  # as with glibc's defaults


@pytest.mark.skipif(not os.path.exists(TCMALLOC), reason="tcmalloc not installed")
def test_nothing_changes_under_another_allocator():
    probe = _probe("keep", LD_PRELOAD=TCMALLOC)
    assert probe["state"] == "tcmalloc" and probe["describe"] == "tcmalloc"


TRAINER = """
import json, sys, tempfile
sys.path.insert(0, sys.argv[1])
import torch
from transformers import AutoModelForSequenceClassification
from tiny import tiny_config, tiny_tokenizer
from hf_aux.runtime import cpu_malloc
from hf_aux.runtime.config import RUN_CONTROL_FIELDS, TokenSafeTrainingArguments
from hf_aux.runtime.trainer import AuxTrainer
model = AutoModelForSequenceClassification.from_config(tiny_config("bert", tiny_tokenizer()))
seen = []
for mode in ("system", "keep"):
    args = TokenSafeTrainingArguments(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], cpu_malloc=mode)
    AuxTrainer(model=model, args=args)
    seen.append(cpu_malloc.describe())
print(json.dumps(seen))
"""


@glibc_only
def test_a_trainer_keeps_freed_memory_on_cpu_unless_told_system():
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "LD_PRELOAD"}
    done = subprocess.run([sys.executable, "-c", TRAINER, HERE], capture_output=True, text=True, env=clean,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["glibc malloc", "glibc malloc, keeping freed memory"]


def test_the_flag_is_parsed_and_checked(capsys):
    parser = HfArgumentParser(TokenSafeTrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", "x", "--cpu_malloc", "system"])
    assert args.cpu_malloc == "system"
    with pytest.raises(SystemExit):
        parser.parse_args_into_dataclasses(["--output_dir", "x", "--cpu_malloc", "never"])
    assert "cpu_malloc" in capsys.readouterr().err
    with pytest.raises(ValueError, match="field 'cpu_malloc'"):
        TokenSafeTrainingArguments(output_dir="x", cpu_malloc="never")
    # the same check serves every run setting that declares its choices
    with pytest.raises(ValueError, match=r"AuxConfig: field 'on_nonfinite': 'retry' is not one of"):
        TokenSafeTrainingArguments(output_dir="x", on_nonfinite="retry")
    # it changes how fast a run goes, not what it trains: a run resumed with the other value is the same run, and
    # the model card does not list it among the hyper-parameters
    assert "cpu_malloc" in RUN_CONTROL_FIELDS


def test_the_setting_changes_malloc_only_on_a_cpu_run_with_keep(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_malloc, "keep_freed_memory", lambda: calls.append(1) or "kept")
    assert cpu_malloc.apply_setting("system", "cpu") is None
    assert cpu_malloc.apply_setting("keep", "cuda") is None
    assert calls == []
    assert cpu_malloc.apply_setting("keep", "cpu") == "kept" and calls == [1]
