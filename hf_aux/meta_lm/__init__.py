"""A meta-learned language-modelling objective: a teacher writes pseudo data, the student steps on it, the
teacher learns from the student's query loss (Shen, MetaLMO).

config.py MetaLMConfig, trainer.py MetaLMTrainer, teacher.py the teacher model, losses.py the loss math,
functional_optim.py the differentiable student updates, support_query.py the support/query task draw, two_moons.py
the paper's Two Moons setting, command.py `hf-aux meta-lm`, demo.yaml its demo defaults."""

from typing import TYPE_CHECKING

from ..registry import Method, Paper

# A Stanford project report with no arXiv version; its code is github.com/jeffdshen/MetaLMO.
METHOD = Method(
    package="meta_lm", command="meta-lm",
    summary="pretraining with a meta-learned language-modelling objective (teacher and student)",
    card_name="a meta-learned language-modelling objective (teacher-student)", card_template="meta_lm.md",
    paper=Paper(
    title="Meta-learning a Language Modeling Objective",
    authors="Jeffrey Shen",
    venue="project report, Stanford University", year=None, arxiv_id=None,
    url="https://github.com/jeffdshen/MetaLMO",
    bibtex="""@misc{shen_metalmo,
  title        = {Meta-learning a Language Modeling Objective},
  author       = {Shen, Jeffrey},
  howpublished = {Project report, Stanford University},
  note         = {Code: \\url{https://github.com/jeffdshen/MetaLMO}}
}""",
),
    exports={"MetaLMConfig": "config",
             "MetaLMTrainer": "trainer",
             "MetaLMCollator": "trainer",
             "MetaLMTeacher": "teacher",
             "MetaLMTeacherConfig": "teacher",
             "MetaLMTokens": "teacher",
             "add_meta_lm_tokens": "teacher"},
    config_class="MetaLMConfig", trainer_class="MetaLMTrainer",
)

if TYPE_CHECKING:  # static analysers see the real imports (tests/test_layout.py: the names of `exports`)
    from .config import MetaLMConfig
    from .teacher import MetaLMTeacher, MetaLMTeacherConfig, MetaLMTokens, add_meta_lm_tokens
    from .trainer import MetaLMCollator, MetaLMTrainer
