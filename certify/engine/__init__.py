"""``spectr-gbv certify engine NAME``: what another engine's own ``generate`` emits with
speculation on, from outside (``generate.certify_generate``).

Each engine adapter exposes ``sample(prompt_ids, n_new, seed) -> list[int]`` (speculation on)
and, where the engine can serve as its own reference, ``laws(prompt_ids, tokens) -> float64
[n, V]`` (``references``: transformers or llama.cpp teacher-forced).  ``controls`` wraps them
into negative controls (defects a certificate must catch); ``modes`` lists the modes the CLI
runs."""
