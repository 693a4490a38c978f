"""`hf-aux finetune`: one checkpoint fine-tuned on one task, with a majority baseline, run_glue-style flags.

It follows MUPPET's downstream protocol (§4 head re-use, §5.3 low-resource fractions) and writes MUPPET's
checkpoint format, so its card cites that paper. It trains with the shared base (`hf_aux.runtime.trainer.AuxTrainer`,
`hf_aux.runtime.config.AuxConfig`) and the shared multi-task model; command.py is all it adds.
"""

from ..muppet import METHOD as MUPPET
from ..registry import Method

METHOD = Method(
    package="finetune", command="finetune",
    summary="fine-tune one checkpoint on one task, with a baseline (run_glue-style flags)",
    card_name="single-task fine-tuning (run_finetune.py, MUPPET's downstream protocol)", card_template="finetune.md",
    paper=MUPPET.paper,
)
