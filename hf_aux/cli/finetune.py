"""Moved to hf_aux.finetune.command; this path works until hf_aux 0.3 (CHANGELOG.md)."""

from hf_aux._moved import alias

alias(__name__, "hf_aux.finetune.command")
