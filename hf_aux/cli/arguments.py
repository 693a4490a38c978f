"""Argument dataclasses every hf_aux command shares (each method's command subclasses them for its own flags):
where the model and tokenizer come from, with the Hub's settings (`ModelArguments`), where the data comes from
(`DataSourceArguments`), and LoRA on the shared body (`LoraArguments`, from hf_aux.runtime.lora_settings). Nothing
here imports Trainer or peft (`LoraArguments.lora_config` imports peft when asked), so `--help` stays fast."""

from __future__ import annotations

from dataclasses import dataclass, field

# LoRA on the shared body is a library setting (hf_aux.runtime.lora_settings); the commands take it from here
from ..runtime.lora_settings import MERGED_SUBFOLDER, LoraArguments  # noqa: F401
from ..errors import UserInputError


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
        "help": "The model card's licence, a Hub licence id (e.g. apache-2.0, mit, cc-by-4.0; the Hub's list: "
                "hf_aux.cards.licenses), or 'other' with --license_name. Default: the one the starting model's card or "
                "config states, if any."})
    license_name: str | None = field(default=None, metadata={
        "help": "With --license other: the licence's name, written to the card's license_name (add its text as "
                "LICENSE in the output folder)."})

    def __post_init__(self):
        from ..cards.licenses import license_problem

        problem = license_problem(self.license, self.license_name)
        if problem:
            raise ValueError(f"{type(self).__name__}: field 'license': {problem}")

    def hub_kwargs(self) -> dict:
        """Keyword arguments of every `from_pretrained` of a model or tokenizer."""
        return {"cache_dir": self.cache_dir, "revision": self.model_revision, "token": self.token}


@dataclass
class DataSourceArguments:
    """The data flags of every command that reads a `datasets` dataset or local data files (amos, tartan,
    finetune), with their checks, declared once: each command's `DataTrainingArguments` subclasses it and adds its
    own flags and checks (which run first: their messages name the command's whole set of sources)."""

    dataset_name: str | None = field(default=None, metadata={
        "help": "A `datasets` dataset: Hub id or local dataset folder."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "Its configuration name."})
    train_file: str | None = field(default=None, metadata={
        "help": "Local training data (formats: the command's docs page; labelled data: csv/json/jsonl/parquet; "
                "amos also .txt)."})
    validation_file: str | None = field(default=None, metadata={"help": "Local validation data, same format."})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "Cap on training rows (blocks of text for amos), for quick runs."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Cap on evaluation rows (or blocks)."})

    def __post_init__(self):
        owner = type(self).__name__
        if self.dataset_name is not None and self.train_file is not None:
            raise UserInputError(f"{owner}: give either dataset_name or train_file, not both")
        for name in ("max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserInputError(f"{owner}: field '{name}': must be >= 1, got {value}")


def pooling_field():
    """`--pooling` of the commands whose heads read a sentence vector (MultiTaskModel: muppet, finetune)."""
    from ..modeling.pooling import POOLING_MODES

    return field(default="auto", metadata={
        "choices": ["auto", *POOLING_MODES],
        "help": "How sentence-level heads read the body. auto: the body's own sentence-transformers pooling when it "
                "ships one (e.g. mean for all-MiniLM-L6-v2), else the first token (eos for encoder-decoders); a "
                "MUPPET-style checkpoint keeps the pooling its heads were trained with."})
