"""Real models: weights and their cache (``weights``), the catalog of embedded models (``catalog``),
loading a draft/target pair (``pair``), end-of-text ids (``eos``), the int8 draft (``draft_quant``),
benchmark prompts (``prompts``)."""
