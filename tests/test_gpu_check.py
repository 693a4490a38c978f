"""tools/gpu_check.py (the checks run on a GPU machine) runs here with --cpu: a command given a user's own files
and a run script under torchrun, each trained with finite logged losses, saved and reloaded with finite weights;
the JSON says so."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_its_checks_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--cpu", "--only", "hf-aux finetune",
                           "torchrun run_muppet", "--out", str(out)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["failed"] == [] and result["passed"] == 2
    for name in ("hf-aux finetune", "torchrun run_muppet"):
        record = result["checks"][name]
        assert record["passed"] and len(record["losses"]) == 2
