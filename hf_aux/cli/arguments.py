"""Argument dataclasses every hf_aux command shares: where the model and tokenizer come from (with the Hub's
`cache_dir`, `model_revision` and `token`), and LoRA on the shared body. Each method's command subclasses
`ModelArguments` for its own model flags; its data flags are its own dataclass.

Nothing here imports Trainer or peft (`LoraArguments.lora_config` imports peft when a LoRA run asks for it), so
`hf-aux <method> --help` stays fast."""

from __future__ import annotations

from dataclasses import dataclass, field

MERGED_SUBFOLDER = "merged"  # where --merge_lora writes the merged copy; model cards point at it


@dataclass
class ModelArguments:
    """Where the model and tokenizer come from, and how the Hub is reached."""

    model_name_or_path: str | None = field(default=None, metadata={
        "help": "Starting checkpoint (Hub id or local folder). Default: the method's own (see its docs page)."})
    tokenizer_name: str | None = field(default=None, metadata={
        "help": "Tokenizer (Hub id or folder), if not the model's own."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where Hub downloads are stored."})
    model_revision: str = field(default="main", metadata={"help": "Branch, tag or commit of Hub models."})
    token: str | None = field(default=None, metadata={
        "help": "Hub token for private models, tokenizers and datasets (default: the stored login or HF_TOKEN). "
                "Never written to the output folder."})
    license: str | None = field(default=None, metadata={
        "help": "The model card's licence, a Hub licence id (e.g. apache-2.0, mit). Default: the one the starting "
                "model's card or config states, if any."})

    def hub_kwargs(self) -> dict:
        """Keyword arguments of every `from_pretrained` of a model or tokenizer."""
        return {"cache_dir": self.cache_dir, "revision": self.model_revision, "token": self.token}


def pooling_field():
    """`--pooling` of the commands whose heads read a sentence vector (MultiTaskModel: muppet, finetune)."""
    from ..modeling.pooling import POOLING_MODES

    return field(default="auto", metadata={
        "choices": ["auto", *POOLING_MODES],
        "help": "How sentence-level heads read the body. auto: the body's own sentence-transformers pooling when it "
                "ships one (e.g. mean for all-MiniLM-L6-v2), else the first token (eos for encoder-decoders); a "
                "MUPPET-style checkpoint keeps the pooling its heads were trained with."})


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
            raise ValueError(f"LoraArguments: field 'lora_r': needs a positive integer, got {self.lora_r}")
        if not self.lora_alpha > 0:
            raise ValueError(f"LoraArguments: field 'lora_alpha': must be > 0, got {self.lora_alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"LoraArguments: field 'lora_dropout': {self.lora_dropout} not in [0, 1)")
        if self.merge_lora and not self.use_lora:
            raise ValueError("LoraArguments: field 'merge_lora': needs --use_lora")
        if self.lora_target_modules is not None and not self.lora_target_modules:
            raise ValueError("LoraArguments: field 'lora_target_modules': give at least one module name")

    def lora_config(self):
        """The `peft.LoraConfig` these flags describe, or None without --use_lora."""
        if not self.use_lora:
            return None
        from peft import LoraConfig

        targets = self.lora_target_modules
        if targets == ["all-linear"]:
            targets = "all-linear"
        return LoraConfig(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                          target_modules=targets)
