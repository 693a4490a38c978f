"""The one setting setup.cfg cannot state: hf_aux's packages as found (a new method's folder ships with no edit
here), plus the model-card templates, which live at the top of the repository (model_cards/) and ship as the package
hf_aux.model_cards (setup.cfg's package_dir). Everything else is in setup.cfg."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["hf_aux", "hf_aux.*"]), "hf_aux.model_cards"])
