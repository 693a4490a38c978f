"""Moved to hf_aux.muppet.losses; this path works until hf_aux 0.3 (CHANGELOG.md)."""

from hf_aux._moved import alias

alias(__name__, "hf_aux.muppet.losses")
