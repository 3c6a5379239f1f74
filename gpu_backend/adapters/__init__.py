"""Third-party verifiers behind the batched contract (reference/contract.py), so that the same
harness (oracle.harness.certify_verifier) certifies them."""
