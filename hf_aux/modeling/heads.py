"""The task heads of `MultiTaskModel` (hf_aux.modeling.multitask), on the body's sentence or token states."""

from __future__ import annotations

import torch
from torch import nn


class ClassificationHead(nn.Module):
    """dense -> tanh -> dropout -> projection, on the sentence representation (the fairseq/RoBERTa head MUPPET
    uses). With `spectral_norm`, both linear maps are spectrally normalised (R4F)."""

    def __init__(self, hidden_size: int, num_outputs: int, dropout: float, spectral_norm: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, num_outputs)
        if spectral_norm:
            self.dense = nn.utils.parametrizations.spectral_norm(self.dense)
            self.out_proj = nn.utils.parametrizations.spectral_norm(self.out_proj)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, num_outputs]
        x = self.dropout(features)
        x = torch.tanh(self.dense(x))
        return self.out_proj(self.dropout(x))


class TokenClassificationHead(nn.Module):
    """dropout -> projection on every token's state, as transformers' *ForTokenClassification (so a one-task model
    exports it as their `classifier`). With `spectral_norm`, the projection is spectrally normalised (R4F)."""

    def __init__(self, hidden_size: int, num_tags: int, dropout: float, spectral_norm: bool = False):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_tags)
        if spectral_norm:
            self.classifier = nn.utils.parametrizations.spectral_norm(self.classifier)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, length, hidden] -> [N, length, num_tags]
        return self.classifier(self.dropout(hidden))
