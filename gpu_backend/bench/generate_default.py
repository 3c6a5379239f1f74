"""What ``spectr-gbv generate`` runs by default, as a benchmark method: decided per generation.

``generate`` decides between speculating and plain sampling for each request, for its
prompt's length and ``max_new_tokens`` (``tuning.shape.choose_shape`` →
``speed_model.choose``: the draft's prefill included).  A benchmark that measured the costs
once (``autoconfig.configure``) gets the same per-prompt decision from
``AutoConfig.for_generation``; ``DefaultMethod`` makes that decision for each call, runs plain
sampling or the ``SpeculativeEngine`` (built on the first call that speculates), and counts what
it chose so that a benchmark can report it.  The best shape does not depend on the lengths (the
draft's prefill is the same for every shape), so that one engine serves every call that
speculates.  It is ``generate`` without ``--rule``: a measured "plain sampling" is run.
"""

from __future__ import annotations

from collections import Counter

from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_RULE


class DefaultMethod:
    """Callable ``(ids, max_new_tokens, seed) -> GenerationResult`` running generate's default.

    Args:
        auto: ``autoconfig.AutoConfig`` measured for this pair (its candidates and margin).
        target, draft: the loaded models (``SpeculativeEngine``'s).
        sampling: ``sampling.SamplingConfig``; eos: the EOS token ids.
        rule: the speculative rule (default ``defaults.DEFAULT_RULE``, generate's).
        backend: the models' ``decoding.backend.Backend`` (None: torch; ``ModelPair.backend``).
    Attributes:
        decisions: Counter of "plain" and "K=k L=l" over the calls so far.
    """

    def __init__(self, auto, target, draft, sampling, eos, rule: str = DEFAULT_RULE, backend=None):
        self.auto, self.target, self.draft = auto, target, draft
        self.sampling, self.eos, self.rule = sampling, tuple(eos), rule
        self.backend = backend
        self.engine = None
        self.decisions: Counter = Counter()

    def __call__(self, ids, max_new_tokens: int, seed):
        from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
        from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate

        choice = self.auto.for_generation(len(ids), max_new_tokens).choice
        if not choice.speculate:
            self.decisions["plain"] += 1
            return autoregressive_generate(self.target, ids, max_new_tokens, self.sampling, seed, self.eos,
                                           backend=self.backend)
        K, L = choice.best.K, choice.best.L
        self.decisions[f"K={K} L={L}"] += 1
        if self.engine is None:
            self.engine = SpeculativeEngine(self.target, self.draft, rule=self.rule, K=K, L=L,
                                            sampling=self.sampling, eos_token_ids=self.eos,
                                            backend=self.backend)
        return self.engine.generate(ids, max_new_tokens, seed=seed)

    def line(self) -> str:
        """Which choice the calls got, e.g. "plain sampling in 30 of 32 generations, K=1 L=3 in 2"."""
        total = sum(self.decisions.values())
        parts = [f"{'plain sampling' if k == 'plain' else k} in {n}" for k, n in self.decisions.most_common()]
        if not parts:
            return "no generations"
        return f"{parts[0]} of {total} generations" + "".join(", " + p for p in parts[1:])
