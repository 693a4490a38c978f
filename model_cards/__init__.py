"""Jinja model-card templates, shipped inside the wheel as ``hf_aux.model_cards`` (see hf_aux/model_card.py)."""
