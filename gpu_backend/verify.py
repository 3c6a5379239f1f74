"""Facade: the batched verifiers of gpu_backend.verifiers under a short import path."""

from .verifiers import (VERIFIERS, BatchModification, BatchVerdict, Verifier, get_verifier,
                        verify)

__all__ = ["VERIFIERS", "BatchModification", "BatchVerdict", "Verifier", "get_verifier", "verify"]
