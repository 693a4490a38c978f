"""TARTAN: end-task aware training with auxiliary MLM tasks (Dery et al., 2022); MT- and META-TARTAN.

config.py TartanConfig, trainer.py TartanTrainer, model.py TartanModel (end-task classifier, MLM heads, the meta
head), losses.py the loss math (task-weight update from gradient cosines), command.py `hf-aux tartan`, demo.yaml
its demo defaults."""

from typing import TYPE_CHECKING

from ..registry import Method, Paper

METHOD = Method(
    package="tartan", command="tartan",
    summary="TARTAN end-task aware training with auxiliary MLM tasks (Dery et al., 2022)",
    card_name="TARTAN", card_template="tartan.md",
    paper=Paper(
    title="Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative",
    authors="Lucio M. Dery, Paul Michel, Ameet Talwalkar, Graham Neubig",
    venue="ICLR 2022", year=2022, arxiv_id="2109.07437", url="https://arxiv.org/abs/2109.07437",
    bibtex="""@inproceedings{dery2022tartan,
  title         = {Should We Be Pre-training? An Argument for End-task Aware Training as an Alternative},
  author        = {Dery, Lucio M. and Michel, Paul and Talwalkar, Ameet and Neubig, Graham},
  booktitle     = {International Conference on Learning Representations},
  year          = {2022},
  eprint        = {2109.07437},
  archivePrefix = {arXiv}
}""",
),
    exports={"TartanConfig": "config",
             "TartanTrainer": "trainer",
             "TartanModel": "model"},
    config_class="TartanConfig", trainer_class="TartanTrainer",
)

if TYPE_CHECKING:  # static analysers see the real imports (tests/test_layout.py: the names of `exports`)
    from .config import TartanConfig
    from .model import TartanModel
    from .trainer import TartanTrainer
