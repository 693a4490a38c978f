"""AMOS: ELECTRA-style pretraining with an adversarial mixture of generators (Meng et al., 2022).

config.py AmosConfig, trainer.py AmosTrainer, model.py the generator and discriminator, losses.py the loss
math (Gumbel-Softmax mixture, gradient reversal), command.py `hf-aux amos` (its downstream probe: hf_aux.amos.probe),
demo.yaml its demo defaults."""

from typing import TYPE_CHECKING

from ..registry import Method, Paper

METHOD = Method(
    package="amos", command="amos",
    summary="AMOS pretraining of an ELECTRA-style discriminator with a mixture of generators (Meng et al., 2022)",
    card_name="AMOS", card_template="amos.md",
    paper=Paper(
    title="Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators",
    authors="Yu Meng, Chenyan Xiong, Payal Bajaj, Saurabh Tiwary, Paul Bennett, Jiawei Han, Xia Song",
    venue="ICLR 2022", year=2022, arxiv_id="2204.03243", url="https://arxiv.org/abs/2204.03243",
    bibtex="""@inproceedings{meng2022amos,
  title         = {Pretraining Text Encoders with Adversarial Mixture of Training Signal Generators},
  author        = {Meng, Yu and Xiong, Chenyan and Bajaj, Payal and Tiwary, Saurabh and Bennett, Paul and
                   Han, Jiawei and Song, Xia},
  booktitle     = {International Conference on Learning Representations},
  year          = {2022},
  eprint        = {2204.03243},
  archivePrefix = {arXiv}
}""",
),
    exports={"AmosConfig": "config",
             "AmosTrainer": "trainer",
             "AmosGenerator": "model",
             "AmosGeneratorConfig": "model",
             "AmosModel": "model",
             "AmosModelConfig": "model"},
    config_class="AmosConfig", trainer_class="AmosTrainer",
)

if TYPE_CHECKING:  # static analysers see the real imports (tests/test_layout.py: the names of `exports`)
    from .config import AmosConfig
    from .model import AmosGenerator, AmosGeneratorConfig, AmosModel, AmosModelConfig
    from .trainer import AmosTrainer
