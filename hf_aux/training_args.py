"""Moved to hf_aux.base_config; this path works until hf_aux 0.3 (CHANGELOG.md)."""

from hf_aux._moved import alias

alias(__name__, "hf_aux.base_config")
