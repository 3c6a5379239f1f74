"""The engine's default rule and draft shape, importable without torch (CLI help texts).

Chosen by measurement on the benchmark machine: the lossless rule with the most tokens per
target call on the real models (benchmarks/RESULTS.md, "Findings").
"""

DEFAULT_RULE = "spectr"
DEFAULT_K = 2
DEFAULT_L = 4

# the shapes ``generate`` chooses among from measured costs (gpu_backend.tuning.autoconfig)
K_CANDIDATES = (1, 2, 3, 4)
L_CANDIDATES = (1, 2, 3, 4, 5, 6, 7, 8)
