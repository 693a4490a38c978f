"""`hf-aux compare`: several checkpoints fine-tuned alike on one task, each compared with a baseline by more than
noise (docs/compare.md). command.py: the flags, the fine-tunings by `hf-aux finetune`'s steps, `run_comparison`
(the Python entry point the evidence studies call too) and `main`; engine.py: the arms, the plan and compare.json;
statistics.py: the intervals and q values; report.py: compare.md, compare.png and the summary."""
