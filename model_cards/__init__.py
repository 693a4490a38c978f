"""Jinja model-card templates: `_base.md` (shared) and one `<method>.md` per method, named by the method's record
(`card_template` in hf_aux/<method>/__init__.py). setup.cfg ships this top-level folder inside the wheel as the
package ``hf_aux.model_cards``; `hf_aux.model_card` is the one loader (`_template_root`), for every method, in an
installed wheel and in a source checkout alike."""
