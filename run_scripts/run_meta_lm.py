#!/usr/bin/env python
"""Pretrain a masked-LM student with a meta-learned objective (teacher-student, Shen: *Meta-learning a Language
Modeling Objective*), or with the plain MLM baseline, shaped like transformers' run_mlm.py.

Unlabelled side: text files (`--train_file`, txt/csv/json) or a dataset (`--dataset_name`); labelled side: a
mixture file of classification tasks (`--mixture`, see hf_aux.tasks.loading.load_mixture). With no data arguments it
runs the embedded default: the paper's Two Moons setting (§4.2), reduced (2,000 unlabelled sequences, the 160-point
finetune set, 300 steps: a few minutes on 2 CPU cores).

    # the embedded default (soft labels on Two Moons)
    python run_scripts/run_meta_lm.py --output_dir /tmp/meta-lm-moons
    # hard labels / the MLM baseline on the same data
    python run_scripts/run_meta_lm.py --output_dir /tmp/meta-lm-moons-hard --objective hard
    python run_scripts/run_meta_lm.py --output_dir /tmp/meta-lm-moons-mlm --objective mlm
    # your own text and tasks, a student from scratch with a local tokenizer
    python run_scripts/run_meta_lm.py --train_file wiki.txt --mixture tasks.yaml --tokenizer_name ./tok \
        --model_type bert --config_overrides "hidden_size=256,num_hidden_layers=6,num_attention_heads=4" \
        --objective soft --lambda_meta 10 --learning_rate 8e-4 --warmup_steps 10000 --max_steps 100000 \
        --do_train --output_dir runs/meta-lm
    # one JSON/YAML file with all arguments
    python run_scripts/run_meta_lm.py args.yaml

The student is saved as a plain masked-LM checkpoint (fine-tune it with run_scripts/run_finetune.py), the
teacher in `<output_dir>/teacher/`.

Hub ids work wherever a path does (--model_name_or_path, --tokenizer_name, --teacher_name_or_path, --dataset_name,
a mixture task's dataset_name; --cache_dir, --model_revision, --token for private ones); HF_HUB_OFFLINE=1 uses the
local cache only, and a missing repository or file stops the run with an error naming the argument. Every run
writes a model card (README.md, loss_curve.png) into the output folder; --push_to_hub --hub_model_id <user>/<repo>
[--hub_token ...] pushes the folder (student, teacher/, card, results) at the end:

    python run_scripts/run_meta_lm.py --output_dir /tmp/meta-lm-moons --push_to_hub --hub_model_id me/meta-lm-moons

The same command is installed as `hf-aux meta-lm` (`hf-aux meta-lm --help` lists every flag); both call
hf_aux.meta_lm.command.main. Without --two_moons, --train_file, --dataset_name or --mixture the demo config
hf_aux/meta_lm/demo.yaml supplies the defaults, and any flag overrides them (e.g. --output_dir X --max_steps
4); `--config my.yaml` adds your own defaults between the two (a data source in it switches the demo config off):

    python run_scripts/run_meta_lm.py --config my.yaml --output_dir runs/x --max_steps 100
"""

from hf_aux.meta_lm.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
