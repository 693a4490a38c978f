#!/usr/bin/env python
"""AMOS pretraining (Meng et al., 2022, arXiv:2204.03243) of an ELECTRA-style discriminator, from scratch or continued
from a pretrained BERT/ELECTRA encoder (--encoder_name_or_path), shaped like transformers' run_mlm.py:
ModelArguments, DataTrainingArguments and AmosConfig through HfArgumentParser (or one JSON/YAML file), text files or
a `datasets` dataset, --tokenizer_name, model sizes, --config_overrides, --do_train / --do_eval, resume from the last
checkpoint, save_metrics, a model card, --push_to_hub.

Embedded default (continued AMOS pretraining of the packaged all-MiniLM-L6-v2 on the demo's IMDB reviews: the
discriminator is MiniLM, the generator MiniLM's first 4 layers with MLM heads at 2, 3, 4; 200 steps of 8 blocks;
prints the RTD AUC, accuracies and mixture weights over training, and the AUC on each head's samples):

    python run_scripts/run_amos.py --output_dir runs/amos-minilm

From scratch on the same demo text (a small ELECTRA pair with the MiniLM tokenizer; it stays near the RTD prior for
hundreds of steps, see the README):

    python run_scripts/run_amos.py --output_dir runs/amos-small --encoder_name_or_path none \
        --demo_sources wikipedia imdb --per_device_train_batch_size 16 --max_steps 150

Your own text, paper-sized models (12-layer discriminator, 8-layer generator with heads at 4, 6, 8), ELECTRA
side by side (one head at the generator's last layer), Table 2 ablations:

    python run_scripts/run_amos.py --train_file corpus.txt --tokenizer_name bert-base-uncased \\
        --hidden_size 768 --num_hidden_layers 12 --num_attention_heads 12 --intermediate_size 3072 \\
        --generator_num_hidden_layers 8 --mlm_layers 4 6 8 --max_seq_length 512 \\
        --output_dir runs/amos-base --do_train --max_steps 125000 --warmup_steps 10000
    python run_scripts/run_amos.py --output_dir runs/electra-small --mlm_layers 4        # ELECTRA
    python run_scripts/run_amos.py --output_dir runs/no-adv --mixture uniform             # - adv. train
    python run_scripts/run_amos.py --output_dir runs/adv-mlm --adv_mlm_multiplier 0.1     # + adv. MLM
    python run_scripts/run_amos.py --output_dir runs/switch --mixture layer_switch        # w. layer switch
    python run_scripts/run_amos.py config.yaml                                            # all in one file

Hub ids work wherever a path does (--tokenizer_name, --model_name_or_path of an AMOS checkpoint, --dataset_name);
HF_HUB_OFFLINE=1 uses the local cache only. The output folder gets a model card (README.md, loss_curve.png,
mixture_weights.png) on every run; --push_to_hub --hub_model_id <user>/<repo> [--hub_token ...] [--hub_strategy
checkpoint] pushes the folder at the end (and checkpoints during training, per --hub_strategy):

    python run_scripts/run_amos.py --output_dir runs/amos-small --push_to_hub --hub_model_id me/amos-small

The output folder holds the discriminator as a plain checkpoint
(ElectraForPreTraining / AutoModel / AutoModelForSequenceClassification) and the generator in generator/.

The same command is installed as `hf-aux amos` (`hf-aux amos --help` lists every flag); both call
hf_aux.amos.command.main. Without --dataset_name / --train_file the demo config hf_aux/amos/demo.yaml supplies
the defaults, and any flag overrides them (e.g. --output_dir X --max_steps 4); `--config my.yaml` adds your own
defaults between the two (a data source in it switches the demo config off):

    python run_scripts/run_amos.py --config my.yaml --output_dir runs/x --max_steps 100
"""

from hf_aux.amos.command import main, parse_args  # noqa: F401  (parse_args: for callers that import this script)
from hf_aux.runtime.run_guard import run_command

if __name__ == "__main__":
    run_command(main)
