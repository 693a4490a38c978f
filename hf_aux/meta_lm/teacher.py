"""The teacher of the meta-learned LM objective (§4.1): an encoder with two LM heads, one generating the pseudo
input x-hat and one the pseudo output y-hat, plus the task-token conventions shared by teacher and student.

Token conventions (added to the tokenizer by `add_meta_lm_tokens`, looked up by `MetaLMTokens.from_tokenizer`):
  unlabelled text x_u starts with the tokenizer's own [CLS]/<s>; an MLM example starts with `[TASK_MLM]`; a
  labelled example of task `name` starts with `[TASK_name]`; label k of any task is the token `[LABEL_k]`,
  repeated at every position of the output (the paper's "label token as output"); the separator is the
  tokenizer's [SEP]/</s>; PAD as a target means "no target here".
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import ModelOutput
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from hf_aux.runtime.tensor_ops import vocabulary_projection, vocabulary_projections

MLM_TASK_TOKEN = "[TASK_MLM]"


def task_token(name: str) -> str:
    return f"[TASK_{name}]"


def label_token(index: int) -> str:
    return f"[LABEL_{index}]"


def add_meta_lm_tokens(tokenizer, task_names: list[str], num_labels: int) -> int:
    """Add the MLM task token, one token per labelled task and `num_labels` label tokens to `tokenizer` as
    special tokens. Returns how many were new (resize the student's embeddings to `len(tokenizer)`)."""
    tokens = [MLM_TASK_TOKEN] + [task_token(n) for n in task_names] + [label_token(k) for k in range(num_labels)]
    return tokenizer.add_special_tokens({"additional_special_tokens": tokens}, replace_extra_special_tokens=False)


@dataclass
class MetaLMTokens:
    """Token ids the trainer needs; built from a tokenizer that went through `add_meta_lm_tokens`."""

    pad: int
    mask: int
    unlabelled: int
    separator: int
    mlm_task: int
    tasks: dict[str, int]
    labels: list[int]
    vocab_size: int

    @classmethod
    def from_tokenizer(cls, tokenizer, task_names: list[str], num_labels: int) -> MetaLMTokens:
        vocab = tokenizer.get_vocab()

        def need(token: str, what: str) -> int:
            if token not in vocab:
                raise ValueError(f"meta_lm tokens: field 'tokenizer': no {what} token {token!r}; call "
                                 "hf_aux.meta_lm.teacher.add_meta_lm_tokens(tokenizer, task_names, num_labels) and "
                                 "resize the student's embeddings")
            return vocab[token]

        start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        for value, what in ((tokenizer.pad_token_id, "pad"), (tokenizer.mask_token_id, "mask"), (start, "cls/bos"),
                            (sep, "sep/eos")):
            if value is None:
                raise ValueError(f"meta_lm tokens: field 'tokenizer': it has no {what} token")
        return cls(pad=tokenizer.pad_token_id, mask=tokenizer.mask_token_id, unlabelled=start, separator=sep,
                   mlm_task=need(MLM_TASK_TOKEN, "MLM task"),
                   tasks={n: need(task_token(n), f"task '{n}'") for n in task_names},
                   labels=[need(label_token(k), "label") for k in range(num_labels)], vocab_size=len(tokenizer))


class MetaLMTeacherConfig(PretrainedConfig):
    """`encoder`: the config dict of the encoder body (any `AutoModel` type, e.g. the student's config)."""

    model_type = "meta_lm_teacher"
    has_no_defaults_at_init = True

    def __init__(self, encoder: dict | PretrainedConfig | None = None, **kwargs):
        if isinstance(encoder, PretrainedConfig):
            encoder = encoder.to_dict()
        if encoder is not None and "model_type" not in encoder:
            raise ValueError("MetaLMTeacherConfig: field 'encoder': the encoder config dict has no 'model_type'")
        self.encoder = encoder
        super().__init__(**kwargs)

    def encoder_config(self) -> PretrainedConfig:
        if self.encoder is None:
            raise ValueError("MetaLMTeacherConfig: field 'encoder': no encoder config given")
        encoder = dict(self.encoder)
        return AutoConfig.for_model(encoder.pop("model_type"), **encoder)

    @property
    def vocab_size(self) -> int:
        return self.encoder_config().vocab_size


@dataclass
class MetaLMTeacherOutput(ModelOutput):
    """input_logits, output_logits: [B, L, V] for x-hat and y-hat."""

    input_logits: torch.Tensor | None = None
    output_logits: torch.Tensor | None = None


class LMHead(nn.Module):
    """dense -> GELU -> LayerNorm -> vocabulary projection (BERT's MLM head shape). The projection is
    `decoder` (an nn.Linear, saved as one) applied by `vocabulary_projections`, whose backward makes the weight
    gradient in the order that suits a gradient arriving at the end of the meta step."""

    def __init__(self, hidden_size: int, vocab_size: int, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.decoder = nn.Linear(hidden_size, vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return vocabulary_projection(self._transform(hidden), self.decoder.weight, self.decoder.bias)

    def forward_each(self, hiddens: list[torch.Tensor]) -> list[torch.Tensor]:
        """The head on each of several hidden states ([..., H] each), their projections in one call
        (`vocabulary_projections`: one weight gradient for all of them)."""
        return vocabulary_projections([self._transform(h) for h in hiddens], self.decoder.weight, self.decoder.bias)

    def _transform(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(nn.functional.gelu(self.dense(hidden)))


class MetaLMTeacher(PreTrainedModel):
    """Encoder + `input_head` (x-hat) + `output_head` (y-hat). Same architecture as the student, separate weights
    (§4.1): build it with `MetaLMTeacher.from_student_config(student.config)`."""

    config_class = MetaLMTeacherConfig
    base_model_prefix = "teacher"
    supports_gradient_checkpointing = False

    def __init__(self, config: MetaLMTeacherConfig):
        super().__init__(config)
        encoder_config = config.encoder_config()
        encoder_class = MODEL_MAPPING[type(encoder_config)]
        if isinstance(encoder_class, (tuple, list)):  # Funnel: (FunnelModel, FunnelBaseModel), AutoModel's first
            encoder_class = encoder_class[0]
        # the pooler of BERT-like encoders is unused here: leave it out so every parameter gets a gradient
        pooler = "add_pooling_layer" in inspect.signature(encoder_class).parameters
        self.encoder = AutoModel.from_config(encoder_config, **({"add_pooling_layer": False} if pooler else {}))
        hidden = encoder_config.hidden_size
        eps = getattr(encoder_config, "layer_norm_eps", 1e-12)
        self.input_head = LMHead(hidden, encoder_config.vocab_size, eps)
        self.output_head = LMHead(hidden, encoder_config.vocab_size, eps)
        self.post_init()

    @classmethod
    def from_student_config(cls, student_config: PretrainedConfig) -> MetaLMTeacher:
        return cls(MetaLMTeacherConfig(encoder=student_config.to_dict()))

    def _init_weights(self, module):
        std = getattr(self.config.encoder_config(), "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self):
        return self.encoder.get_input_embeddings()

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's last hidden states [B, L, H], before either head. The trainer applies each head only to
        the rows and positions whose logits a loss or a sample needs (the vocabulary projections are most of the
        teacher's work when the vocabulary is large)."""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs) -> MetaLMTeacherOutput:
        hidden = self.encode(input_ids, attention_mask)  # [B, L, H]
        return MetaLMTeacherOutput(input_logits=self.input_head(hidden), output_logits=self.output_head(hidden))


def check_same_vocabulary(student: PreTrainedModel, teacher: MetaLMTeacher, tokenizer=None) -> None:
    """Teacher and student must agree on the vocabulary (the teacher's tokens are the student's input)."""
    student_vocab = student.get_input_embeddings().num_embeddings
    teacher_vocab = teacher.get_input_embeddings().num_embeddings
    out_vocab = teacher.input_head.decoder.out_features
    if len({student_vocab, teacher_vocab, out_vocab}) != 1:
        raise ValueError(f"meta_lm: field 'teacher': vocabulary sizes differ (student embeddings {student_vocab}, "
                         f"teacher embeddings {teacher_vocab}, teacher heads {out_vocab}); build the teacher with "
                         "MetaLMTeacher.from_student_config(student.config) after resizing the student")
    if tokenizer is not None and len(tokenizer) > student_vocab:
        raise ValueError(f"meta_lm: field 'tokenizer': it has {len(tokenizer)} tokens but the student's embeddings "
                         f"only {student_vocab}; call student.resize_token_embeddings(len(tokenizer))")


AutoConfig.register(MetaLMTeacherConfig.model_type, MetaLMTeacherConfig, exist_ok=True)
AutoModel.register(MetaLMTeacherConfig, MetaLMTeacher, exist_ok=True)
