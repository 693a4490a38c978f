#!/usr/bin/env python
"""MUPPET pre-finetuning (Aghajanyan et al., 2021) of any encoder on a task mixture, shaped like transformers'
run_glue.py: ModelArguments, DataTrainingArguments and MuppetConfig through HfArgumentParser (or one JSON/YAML
file), --do_train / --do_eval, resume from the last checkpoint, save_metrics, a model card, --push_to_hub.

The main job (embedded default: the real all-MiniLM-L6-v2 pre-finetuned on 5 real demo tasks at the budget where
docs/evidence/muppet.md measured a held-out benefit; 5-10 min on 2 CPU cores):

    python run_scripts/run_muppet.py --output_dir runs/muppet-minilm

Any Hub encoder (online), your own mixture file (see hf_aux.tasks.loading.load_mixture), R3F, the §5.2 ablations:

    python run_scripts/run_muppet.py --model_name_or_path roberta-base --mixture_file mixture.yaml \\
        --output_dir runs/muppet-roberta --do_train --do_eval --per_device_train_batch_size 16 \\
        --gradient_accumulation_steps 8 --learning_rate 2e-5 --max_steps 2000 --robust_finetuning r3f
    python run_scripts/run_muppet.py --output_dir runs/ablation --batching batch_homogeneous
    python run_scripts/run_muppet.py config.yaml        # every argument in one file

LoRA on the shared body (peft; frozen base weights, every task head trains; checkpoints hold the adapter and the
heads), with a merged plain checkpoint written to <output_dir>/merged at the end:

    python run_scripts/run_muppet.py --output_dir runs/muppet-lora --use_lora --lora_r 8 --lora_alpha 16 \
        --lora_dropout 0.05 --lora_target_modules query key value dense --merge_lora

The LoRA output folder loads with MultiTaskModel.from_pretrained(output_dir) (the base model is the one recorded
in adapter_config.json); output_dir/merged with AutoModel.from_pretrained alone.

The same command is installed as `hf-aux muppet` (`hf-aux muppet --help` lists every flag); both call
hf_aux.muppet.command.main. Without --mixture_file the demo config hf_aux/muppet/demo.yaml supplies the defaults,
and any flag overrides them (e.g. --output_dir X --max_steps 4); `--config my.yaml` adds your own defaults between
the two (a data source in it switches the demo config off):

    python run_scripts/run_muppet.py --config my.yaml --output_dir runs/x --max_steps 100
"""

from hf_aux.muppet.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
