"""What every hf_aux trainer and command runs on: the base trainer and its arguments, the run guard (resume,
signals, output folders), the Hub, the non-finite guard, distributed helpers, CPU memory, the training metrics and
LoRA on the shared body."""
