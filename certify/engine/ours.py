"""Our own engine (``gpu_backend.engine.speculative.SpeculativeEngine``) as a black box: its
public ``generate(prompt_ids, max_new_tokens, seed)``, on either backend (transformers models or
two ``LlamaCppModel``s).  The white-box engine certificate (``certify.engine``) stays the check of
its internals; this adapter runs it through the same path as any other engine."""

from __future__ import annotations


class OursEngine:
    """``sample(prompt_ids, n_new, seed)`` = ``SpeculativeEngine.generate(...).tokens``.

    Args:
        target, draft: as ``SpeculativeEngine`` (both transformers, or both llama.cpp);
        backend: their ``decoding.backend.Backend`` (None: torch; ``ModelPair.backend``).
        temperature: the target's T; draft_temperature: the draft's (default T).
        rule, K, L: the verification rule and shape.
        verifier: optional custom verifier (negative controls wrap the rule's own).
        eos_token_ids: ids that stop a generation (default none: fixed-length samples).
    Attributes:
        taus: the kept τ of every iteration since the last ``stats()`` call.
    """

    def __init__(self, target, draft, temperature: float = 1.0, draft_temperature: float | None = None,
                 rule: str = "sd", K: int = 1, L: int = 4, verifier=None, eos_token_ids=(), backend=None):
        from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
        from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine

        self.engine = SpeculativeEngine(
            target, draft, rule=rule, K=K, L=L, sampling=SamplingConfig(temperature),
            draft_sampling=SamplingConfig(draft_temperature or temperature), verifier=verifier,
            eos_token_ids=eos_token_ids, backend=backend)
        self.taus: list[int] = []
        self.calls = 0

    def __call__(self, prompt_ids, n_new: int, seed: int) -> list[int]:
        res = self.engine.generate(list(prompt_ids), n_new, seed=seed)
        self.taus += list(res.taus)
        self.calls += res.target_calls
        return list(res.tokens)

    def stats(self) -> dict:
        """Accepted draft tokens per target call (mean kept τ) over the samples since the last
        call, and target calls per sample."""
        out = {"accepted/call": sum(self.taus) / len(self.taus) if self.taus else 0.0,
               "calls": float(self.calls)}
        self.taus, self.calls = [], 0
        return out
