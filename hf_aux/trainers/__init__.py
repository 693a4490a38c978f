"""Old home of the methods' trainers; each now lives in its method's folder, hf_aux/<method>/ (CHANGELOG.md).
The modules here only hand over the new ones, until hf_aux 0.3."""
