"""Engine adapters for ``certify.generate.certify_generate``: each exposes ``sample(prompt_ids,
n_new, seed) -> list[int]`` (speculation on) and, where the engine can serve as its own
reference, ``laws(prompt_ids, tokens) -> float64 [n, V]``.  ``controls`` wraps them into
negative controls (defects a certificate must catch); ``modes`` lists the modes the CLI runs."""
