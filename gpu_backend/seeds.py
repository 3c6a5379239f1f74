"""Moved: reference/seeds.py (backend-free, shared with oracle.certify)."""

from reference.seeds import generator_seed  # noqa: F401
