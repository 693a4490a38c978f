"""The settings of LoRA on the shared body (MUPPET and TARTAN): `LoraArguments`, usable as an `HfArgumentParser`
dataclass (the commands' --use_lora --lora_r --lora_alpha --lora_dropout --lora_target_modules --merge_lora) or
built in code. Light on purpose: peft is imported only by `lora_config()`, when a LoRA run asks for it
(`hf_aux.runtime.adapters` applies the config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UserInputError

MERGED_SUBFOLDER = "merged"  # where merge_lora writes the merged copy; model cards point at it


@dataclass
class LoraArguments:
    """LoRA on the shared body (MUPPET and TARTAN)."""

    use_lora: bool = field(default=False, metadata={
        "help": "Train LoRA adapters on the shared body (frozen base weights) and the task heads, instead of every "
                "weight. Checkpoints then hold the adapter and the heads only."})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank r."})
    lora_alpha: float = field(default=16.0, metadata={
        "help": "LoRA scaling alpha (the update is scaled by alpha / r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch's input."})
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "Body modules that get adapters (names or name suffixes, e.g. query key value dense; 'all-linear' "
                "for every linear layer). Default: peft's choice for the architecture (BERT-likes: query value)."})
    merge_lora: bool = field(default=False, metadata={
        "help": "After training, also write a merged plain checkpoint (adapters folded into the base weights) to "
                "<output_dir>/merged, loadable by transformers alone."})

    def __post_init__(self):
        if self.lora_r < 1:
            raise UserInputError(f"LoraArguments: field 'lora_r': needs a positive integer, got {self.lora_r}")
        if not self.lora_alpha > 0:
            raise UserInputError(f"LoraArguments: field 'lora_alpha': must be > 0, got {self.lora_alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise UserInputError(f"LoraArguments: field 'lora_dropout': {self.lora_dropout} not in [0, 1)")
        if self.merge_lora and not self.use_lora:
            raise UserInputError("LoraArguments: field 'merge_lora': needs --use_lora")
        if self.lora_target_modules is not None and not self.lora_target_modules:
            raise UserInputError("LoraArguments: field 'lora_target_modules': give at least one module name")

    def check_targets(self, body) -> None:
        """With --use_lora and named --lora_target_modules: each name matches a module of `body` (the shared body) as
        peft matches names (the whole dotted name or its last parts). Checked once the model is loaded, so a misspelt
        name stops the run before any data is tokenised (peft would say it only when the trainer is built, and only
        when no name matches)."""
        targets = self.lora_target_modules
        if not self.use_lora or targets is None or targets == ["all-linear"]:
            return
        names = [name for name, _ in body.named_modules() if name]
        missing = [target for target in targets if not any(name == target or name.endswith("." + target)
                                                           for name in names)]
        if missing:
            linear = sorted({name.rsplit(".", 1)[-1] for name, module in body.named_modules()
                             if type(module).__name__ in ("Linear", "Conv1D")})
            raise UserInputError(f"LoraArguments: field 'lora_target_modules': {missing} name no module of the model; "
                                 f"pass --lora_target_modules with names of its linear layers {linear}, or all-linear")

    def lora_config(self):
        """The `peft.LoraConfig` these flags describe, or None without --use_lora."""
        if not self.use_lora:
            return None
        from peft import LoraConfig

        targets = "all-linear" if self.lora_target_modules == ["all-linear"] else self.lora_target_modules
        return LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                          target_modules=targets)
