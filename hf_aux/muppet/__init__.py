"""MUPPET: multi-task pre-finetuning with task heads (Aghajanyan et al., 2021).

config.py MuppetConfig, trainer.py MuppetTrainer, losses.py the loss math (eq. 1, R3F/R4F), command.py
`hf-aux muppet`, demo.yaml its demo defaults. The multi-task model it trains (`hf_aux.modeling.multitask`) is
shared with `hf-aux finetune`."""

from typing import TYPE_CHECKING

from ..registry import Method, Paper

METHOD = Method(
    package="muppet", command="muppet",
    summary="MUPPET multi-task pre-finetuning of an encoder on a task mixture (Aghajanyan et al., 2021)",
    card_name="MUPPET pre-finetuning", card_template="muppet.md",
    paper=Paper(
    title="Muppet: Massive Multi-task Representations with Pre-Finetuning",
    authors="Armen Aghajanyan, Anchit Gupta, Akshat Shrivastava, Xilun Chen, Luke Zettlemoyer, Sonal Gupta",
    venue="EMNLP 2021", year=2021, arxiv_id="2101.11038", url="https://arxiv.org/abs/2101.11038",
    bibtex="""@inproceedings{aghajanyan2021muppet,
  title         = {Muppet: Massive Multi-task Representations with Pre-Finetuning},
  author        = {Aghajanyan, Armen and Gupta, Anchit and Shrivastava, Akshat and Chen, Xilun and
                   Zettlemoyer, Luke and Gupta, Sonal},
  booktitle     = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year          = {2021},
  eprint        = {2101.11038},
  archivePrefix = {arXiv}
}""",
),
    exports={"MuppetConfig": "config",
             "MuppetTrainer": "trainer",
             "MultiTaskDataset": "batches",
             "TaskBatchSampler": "batches"},
    config_class="MuppetConfig", trainer_class="MuppetTrainer",
)

if TYPE_CHECKING:  # static analysers see the real imports (tests/test_layout.py: the names of `exports`)
    from .batches import MultiTaskDataset, TaskBatchSampler
    from .config import MuppetConfig
    from .trainer import MuppetTrainer
