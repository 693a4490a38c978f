"""Model cards: their rendering, their figures and the Hub's licence identifiers (the templates live in the
top-level model_cards/)."""
