"""A verifier written for vLLM v1's rejection-sampler layout (``adapters.vllm_layout``) behind
the batched contract (reference/contract.py): ``from_vllm_layout(fn)``, so that
oracle.harness.certify_verifier certifies it.

What ``from_vllm_layout(fn)`` sends (``VLLMLayoutAdapter``, defaults ``realistic=True``,
``temperatures=TEMPERATURES``, ``fillers=True``).  Each contract call of B rows (all with L
drafts) becomes one call of ``fn`` holding B certified requests and ``len(FILLERS)`` filler
requests:

* certified request b (contract row b): L drafts, temperature T_b = temperatures[b mod 3]
  (0.6, 1.0, 1.7), logits T_b·log q for its L draft rows and its bonus row (−inf where
  q = 0), so that softmax(logits / T_b) = q up to rounding (a few ulps); its draft_probs rows
  as given (post-temperature, as vLLM's), or None with ``one_hot_drafts``; its generator
  seeded with ``generator_seed(seeds[b])`` (``generators_from_seeds``), keyed by its batch
  index in the call.  A sampler that tempers the draft rows but not the bonus row, or
  tempers with another request's T, samples another law than q, which the certificate's
  tests can see (tests/gpu_backend/adapters/test_adapter_vllm_realistic.py).
* fillers (``FILLERS``): filler j follows certified request ⌊j·B/F⌋ (F = len(FILLERS) = 8),
  so num_draft_tokens reads [L, 0, 2, 1, L+1, 0, L+1, 2, L] for B = 1 and
  [L, 0, 2, L, 1, L+1, L, 0, L+1, L, 2, L] for B = 4:
  greedy requests (T = 0) with 2, L+1 and 0 drafts, a greedy request with 2 drafts whose rows
  each have an exact tie at their maximum ("greedy tie"), a bonus-only request (0 drafts,
  T = 1.3), sampled requests with 1 and L+1 drafts (T = 0.8, 1.0) and an unseeded sampled
  request with L drafts (T = 0.9, no generator: vLLM's global one); L+1 > L makes max_spec_len
  exceed the certified requests' L, so their output rows carry −1 padding.  Their rows are
  random (normal logits of scale 2; a third of the tokens of each sampled filler's rows at
  −inf, i.e. q = 0; draft rows softmax of normal logits, drafts sampled from them, or uniform
  with one-hot drafts), drawn from a generator seeded by the call's first certified seed
  (seeds[0]; 0 with ``noise=`` and no seeds), so fixed per call; greedy fillers draft the argmax for a random number of leading
  positions, then a non-argmax token; the greedy-tie filler drafts the lower tied id (to be
  accepted) then the higher tied id (to be rejected: plain greedy decoding takes the first
  maximal index, as torch.argmax does); each seeded filler has its own seed from that generator.
* checks of the fillers' output rows (``reference.contract.ContractViolation``, a ValueError,
  naming the filler's batch index, its kind and what was wrong; under certification a failed row
  with that reason, never an exception): every row well formed (at most n + 1 tokens, no −1 before a token, ids
  in [0, V), the accepted tokens are the drafts); a greedy filler equals the exact greedy
  outcome (accept while the draft is the argmax of its row, ties to the lowest id, then emit
  that argmax; the bonus row's argmax when all are accepted); a sampled filler (bonus-only
  too) accepts no draft of q = 0 and emits a token of q > 0 on its row.  A certified
  request's row must be −1 past its L + 1 entries and is read by ``parse_output``.
* the certified requests' outcomes depend on their own rows and generators only: a sampler
  that reads another request's rows (a ragged-batch offset bug) or mixes up generators fails
  the filler checks or the law.

``realistic=False`` sends the plain batch: B requests of L drafts at T = 1 (logits log q), no
fillers.  ``fillers=False`` keeps the temperatures and drops the fillers.

Noise (``VLLMLayoutAdapter.__call__(..., noise=)``, for ``oracle.harness.boundary_probes``):
the contract's noise is (uniforms float64 [B, 1, L+1] in (0, 1], exponentials float64
[B, V]) with the conventions of ``reference.randomness.MatchedSource``: coin (0, i)
succeeds iff u ≤ h.  vLLM draws its uniforms in [0, 1) (``generate_uniform_probs``:
torch.rand, float64 at commit 7f6fc1c5) and accepts when ``target_prob / draft_prob >=
uniform_prob`` (``rejection_random_sample_kernel``; read, not run).  The adapter hands ``fn``
u' = u − 2^-53: exact in float64 on the grid of 53-bit uniforms {k·2^-53} (u = 2^-53 ↦ 0,
u = 1 ↦ 1 − 2^-53; elsewhere rounded to nearest, then clamped at 0).  vLLM's h ≥ u' is then
u ≤ h + 2^-53: it differs from MatchedSource's u ≤ h only for h within 2^-53 below u.  Coin
(0, i), i = 1..L, decides at the request's draft position i − 1 (0-based) and goes to
uniforms[offset_b + i − 1] (sd: accept draft i − 1; bv/gbv: the prefix of length i); coin
(0, 0) is used by no single-draft rule of this project and is not sent.  exponentials[b] is request b's race (vLLM's ``q`` of ``sample_recovered_tokens``,
argmax prob / E).  Fillers get fixed uniforms and exponentials of their own.  A [0, 1)
sampler that compares ``q/p >= u'`` accepts a drafted token of target probability 0 when
u' = 0 (0 ≥ 0), with probability 2^-53 per coin: vLLM v1's kernel does exactly this
comparison.  ``rules_in_vllm_layout`` maps back u = u' + 2^-53 (exact on that grid), so
``boundary_probes(from_vllm_layout(rules_in_vllm_layout("sd")), "sd", K=1)`` passes.  Since
softmax(logits / T) is q only within a few ulps, the adapter's ``probe_tie_ulps`` = 16 makes
the probes treat a coin within 16·2^-53 of its uniform as a tie (``boundary_probes``): on
p = q rows at u = 1 a correct float64 function may see h = 1 − 2^-52 and reject.
"""

from __future__ import annotations

import inspect

import numpy as np
import torch

from spectr_gbv.reference.contract import BatchVerdict, ContractViolation, to_numpy
from spectr_gbv.reference.seeds import generator_seed

from spectr_gbv.gpu_backend.decoding.temperature import check_temperature
from spectr_gbv.gpu_backend.adapters.vllm_layout import PLACEHOLDER_TOKEN_ID, ULP_HALF, as_tensor, generators_from_seeds

# -- a verifier of vLLM's layout behind the batched contract ----------------------------------------

def parse_output(output_token_ids, drafts: np.ndarray, V: int, names=None):
    """(τ int64 [B], tokens int64 [B, L+1]) from ``output_token_ids`` of B requests that all
    drafted the L tokens ``drafts`` int [B, L].

    Request b emitted n_b = its number of non-placeholder entries, which must come first;
    τ_b = n_b − 1 (the tokens before the first rejection), and those τ_b tokens must be the
    drafts (a rejected draft is replaced by a recovered token and ends the row).

    Args:
        names: optional labels of the B rows for the messages (default "request b").
    Raises:
        ContractViolation (a ValueError): naming the problem: not an integer array of shape [B, L+1]; a row without
            tokens; −1 before a token; a token id outside [0, V) (other than −1); an accepted
            token that is not the drafted one.
    """
    out = to_numpy(output_token_ids)
    B, L = drafts.shape
    label = (lambda b: names[b]) if names is not None else (lambda b: f"request {b}")
    if out.ndim != 2 or out.shape != (B, L + 1):
        raise ContractViolation(f"output_token_ids must have shape [B, max_spec_len + 1] = [{B}, {L + 1}], "
                         f"got {list(out.shape)}")
    if not np.issubdtype(out.dtype, np.integer):
        raise ContractViolation(f"output_token_ids must hold integer token ids, got dtype {out.dtype}")
    out = out.astype(np.int64)
    valid = out != PLACEHOLDER_TOKEN_ID
    n = valid.sum(axis=1)
    if (n == 0).any():
        b = int(np.flatnonzero(n == 0)[0])
        raise ContractViolation(f"output_token_ids: {label(b)} emitted no token (every request emits at least "
                         f"its correction or bonus token)")
    gap = valid[:, 1:] & ~valid[:, :-1]
    if gap.any():
        b = int(np.flatnonzero(gap.any(axis=1))[0])
        raise ContractViolation(f"output_token_ids: {label(b)} has the placeholder -1 before a token: {out[b].tolist()}")
    bad = valid & ((out < 0) | (out >= V))
    if bad.any():
        b = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ContractViolation(f"output_token_ids: {label(b)} has a token id outside [0, V) = [0, {V}): "
                         f"{out[b].tolist()}")
    tau = n - 1
    accepted = np.arange(L)[None, :] < tau[:, None]
    wrong = accepted & (out[:, :L] != drafts)
    if wrong.any():
        b = int(np.flatnonzero(wrong.any(axis=1))[0])
        raise ContractViolation(f"output_token_ids: {label(b)} emitted {out[b].tolist()}, whose first {int(tau[b])} "
                         f"token(s) should be the accepted drafts {drafts[b].tolist()}")
    return tau, out


# The certified requests' temperatures, cycled over the contract rows (module doc).
TEMPERATURES = (0.6, 1.0, 1.7)

# The filler requests of each call (module doc): (kind, drafts, temperature); drafts "L+1" is
# one more than the certified requests' L.  "greedy" (T = 0) is checked against the exact
# greedy outcome, "bonus only" (0 drafts) and "sampled" for well-formed rows and a q > 0 token.
FILLERS = (
    ("bonus only", 0, 1.3),
    ("greedy", 2, 0.0),
    ("sampled", 1, 0.8),
    ("greedy", "L+1", 0.0),
    ("greedy", 0, 0.0),
    ("sampled", "L+1", 1.0),
    ("greedy tie", 2, 0.0),
    ("unseeded", "L", 0.9),
)
# "greedy tie": every row has its maximum logit at two token ids; the request drafts the lower
# one (accepted) then the higher one (rejected: plain greedy decoding, torch.argmax, takes the
# first maximal index), so the exact outcome is [low_0, low_1].  "unseeded": a sampled request
# with no generator (vLLM: a request without a seed draws from the global generator), beside the
# seeded ones: a sampler that hands a seeded request the global generator, or another
# request's generator, makes the certified outcomes depend on the batch (the seed contract's
# replay and batch-independence checks).
_GREEDY_KINDS = ("greedy", "greedy tie")
_FILLER_STREAM = 0x76_6C_6C_6D  # separates the fillers' generator from any other use of the seeds


def _accepts_noise(fn) -> bool:
    """``fn`` has a parameter named ``noise`` (its signature, or its ``__call__``'s)."""
    try:
        return "noise" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _noise_to_layout(uniforms: np.ndarray) -> np.ndarray:
    """u' = u − 2^-53 ∈ [0, 1) from MatchedSource uniforms u ∈ (0, 1] (module doc): exact on
    the grid k·2^-53, rounded to nearest elsewhere, clamped at 0."""
    return np.maximum(np.asarray(uniforms, dtype=np.float64) - ULP_HALF, 0.0)


class _Filler:
    """One filler request of a call: its kind, drafts, temperature, rows, seed and noise."""

    def __init__(self, kind: str, n: int, T: float, V: int, rng: np.random.Generator, one_hot: bool):
        self.kind, self.n, self.T = kind, n, float(T)
        logits = 2.0 * rng.standard_normal((n + 1, V))
        if kind == "greedy tie" and V > 1:  # two ids share each row's maximum
            for r in range(n + 1):
                i, j = sorted(rng.choice(V, size=2, replace=False).tolist())
                logits[r, i] = logits[r, j] = logits[r].max() + 1.0
        if kind not in _GREEDY_KINDS and V > 1:  # a third of each row's tokens get q = 0
            k = V // 3
            for r in range(n + 1):
                logits[r, rng.choice(V, size=k, replace=False)] = -np.inf
        self.logits = logits
        self.draft_probs = None
        if not one_hot:
            d = rng.standard_normal((n, V))
            self.draft_probs = np.exp(d - d.max(axis=1, keepdims=True))
            self.draft_probs /= self.draft_probs.sum(axis=1, keepdims=True)
        if kind in _GREEDY_KINDS:
            top = logits.argmax(axis=1)  # ties to the lowest id
            if kind == "greedy tie":  # the lowest tied id, then the higher tied id
                m = min(1, n)
                drafts = [int(top[i]) for i in range(m)]
                if m < n and V > 1:
                    drafts.append(int(np.flatnonzero(logits[m] == logits[m].max())[-1]))
            else:
                m = int(rng.integers(0, n + 1))  # leading drafts that are the argmax
                drafts = [int(top[i]) for i in range(m)]
            if len(drafts) < n and m < n and V > 1 and kind == "greedy":  # then a token that is not the argmax
                drafts.append(int((top[m] + 1 + rng.integers(0, V - 1)) % V))
            while len(drafts) < n:
                drafts.append(int(rng.integers(0, V)))
            self.drafts = np.array(drafts[:n], dtype=np.int64)
            expect = []
            for i in range(n):
                expect.append(int(top[i]))
                if self.drafts[i] != top[i]:
                    break
            else:
                expect.append(int(top[n]))
            self.expected = expect
        else:
            if self.draft_probs is None:
                self.drafts = rng.integers(0, V, size=n).astype(np.int64)
            else:
                self.drafts = np.array([rng.choice(V, p=row) for row in self.draft_probs], dtype=np.int64)
            self.expected = None
        self.seed = int(rng.integers(0, 2**62))
        self.uniforms = (rng.integers(0, 2**53, size=n) * 2.0**-53).astype(np.float64)  # [0, 1)
        self.exponentials = -np.log((rng.integers(0, 2**53, size=V) + 0.5) * 2.0**-53)

    def describe(self, pos: int) -> str:
        return f"filler request {pos} ({self.kind}: {self.n} drafts, T = {self.T:g})"

    def check(self, pos: int, row: np.ndarray, V: int) -> None:
        """ContractViolation (a ValueError) naming the filler when its output row is wrong (module doc)."""
        what = self.describe(pos)
        n = self.n
        valid = row != PLACEHOLDER_TOKEN_ID
        count = int(valid.sum())
        if count == 0:
            raise ContractViolation(f"{what} emitted no token: {row.tolist()}")
        if valid[count:].any():
            raise ContractViolation(f"{what} has the placeholder -1 before a token: {row.tolist()}")
        if count > n + 1:
            raise ContractViolation(f"{what} emitted {count} tokens, more than its {n} drafts + 1: {row.tolist()}")
        toks = row[:count]
        if ((toks < 0) | (toks >= V)).any():
            raise ContractViolation(f"{what} has a token id outside [0, V) = [0, {V}): {row.tolist()}")
        tau = count - 1
        if not np.array_equal(toks[:tau], self.drafts[:tau]):
            raise ContractViolation(f"{what} emitted {row.tolist()}, whose first {tau} token(s) should be the accepted "
                             f"drafts {self.drafts.tolist()}")
        if self.expected is not None:
            if toks.tolist() != self.expected:
                raise ContractViolation(f"{what} emitted {toks.tolist()}, not the exact greedy outcome {self.expected} "
                                 f"(drafts {self.drafts.tolist()}; accept while the draft is its row's argmax, "
                                 f"then emit that argmax, the bonus row's when all are accepted)")
        elif any(not np.isfinite(self.logits[i, int(toks[i])]) for i in range(tau)):
            i = next(i for i in range(tau) if not np.isfinite(self.logits[i, int(toks[i])]))
            raise ContractViolation(f"{what} accepted draft {int(toks[i])} at position {i}, of target probability 0 "
                             f"on its row (logit -inf): {row.tolist()}")
        elif not np.isfinite(self.logits[tau, int(toks[tau])]):
            raise ContractViolation(f"{what} emitted token {int(toks[tau])} at position {tau}, of target probability 0 "
                             f"on its row (logit -inf): {row.tolist()}")


class VLLMLayoutAdapter:
    """A function of vLLM's layout (module doc) behind the batched contract (K = 1).

    Each call maps ``draft_tokens`` [B, 1, L], ``draft_probs`` [B, 1, L, V] and
    ``target_probs`` [B, 1, L+1, V] to one call of ``fn`` (module doc, "What
    ``from_vllm_layout(fn)`` sends"): the B certified requests at temperatures T_b from the
    ``temperatures`` cycle with logits T_b·log q (−inf where q = 0) and the draft rows as given
    (None with ``one_hot_drafts``), interleaved with the ``FILLERS`` (greedy, 0-draft and
    ragged requests) whose outputs are checked; per-row seeds become vLLM's ``generators``
    ({batch index: torch.Generator seeded with generator_seed(seeds[b])} on the inputs'
    device, ``generators_from_seeds``; without seeds, fresh ones).  The certified requests'
    output rows are read back by ``parse_output`` into τ and tokens [B, L+1].

    Args:
        fn: ``fn(num_draft_tokens, draft_token_ids, draft_probs, target_logits, temperatures,
            *, generators)`` → output_token_ids int [B', max_spec_len + 1] (tensor or array);
            with a ``noise`` parameter it can also take explicit noise (``__call__``).
        one_hot_drafts: hand fn ``draft_probs=None`` (vLLM's n-gram / greedy-draft mode); the
            draft rows handed in must then be the indicators of the drafted tokens
            (``oracle.harness.one_hot_draft_case``; ``certify_verifier(..., one_hot_drafts=True)``).
        realistic: False sends the plain batch (T = 1, logits log q, no fillers).
        temperatures: the certified requests' temperature cycle (each finite and > 0;
            default ``TEMPERATURES`` = (0.6, 1.0, 1.7)).
        fillers: interleave the ``FILLERS`` (default True; only with ``realistic``).
    Raises:
        ValueError (at construction): fn not callable, a temperature not finite and > 0.
        ValueError (at call time): K ≠ 1 or malformed shapes, naming the argument; draft rows
            not one-hot at the drafted tokens with ``one_hot_drafts``.
        ContractViolation (a ValueError, at call time): fn's malformed output (``parse_output``)
            or a filler's wrong output (naming its batch index and kind): a defect of fn, which
            certification reports as a failed row with this message (oracle.certify.certify_case).
        TypeError (at call time): ``noise=`` given and fn takes no ``noise``.
    """

    # oracle.harness.boundary_probes: fn gets softmax(T·log q / T), which is q within a few ulps,
    # so coins within 16·2^-53 of their uniform are ties there (that function's docstring)
    probe_tie_ulps = 16

    def __init__(self, fn, one_hot_drafts: bool = False, *, realistic: bool = True,
                 temperatures=TEMPERATURES, fillers: bool = True):
        if not callable(fn):
            raise ValueError(f"fn must be callable in vLLM's layout, got {type(fn).__name__}")
        temps = tuple(temperatures if temperatures is not None else TEMPERATURES)
        if not temps:
            raise ValueError(f"temperatures must be a non-empty cycle (0, greedy, changes the law), got {temperatures!r}")
        # the floor of every entry point; 0 (greedy) changes the law, so it is not a certified cycle value
        temps = tuple(check_temperature(t.item() if isinstance(t, torch.Tensor) else t, f"temperatures[{i}]",
                                        greedy_ok=False) for i, t in enumerate(temps))
        self.fn = fn
        self.one_hot_drafts = bool(one_hot_drafts)
        self.realistic = bool(realistic)
        self.temperatures = temps if self.realistic else (1.0,)
        self.fillers = bool(fillers) and self.realistic

    @property
    def certifies_temperatures(self) -> bool:
        """Its calls carry per-request temperatures other than 1 (the realistic batches): the
        public certifier then does not list temperatures as unseen (oracle.harness.not_seen_by)."""
        return self.realistic and any(t != 1.0 for t in self.temperatures)

    def __repr__(self) -> str:
        return (f"from_vllm_layout({self.fn!r}, one_hot_drafts={self.one_hot_drafts}, realistic={self.realistic}, "
                f"temperatures={self.temperatures}, fillers={self.fillers})")

    # -- the certified requests' rows -------------------------------------------------------------

    def _inputs(self, draft_tokens, draft_probs, target_probs):
        tokens = as_tensor(draft_tokens, "draft_tokens")
        if tokens.dim() != 3 or tokens.shape[1] != 1 or tokens.dtype.is_floating_point:
            raise ValueError(f"draft_tokens must be integers of shape [B, 1, L] (vLLM's layout has one draft "
                             f"per request), got shape {list(tokens.shape)} dtype {tokens.dtype}")
        B, _, L = tokens.shape
        device = tokens.device
        dp = as_tensor(draft_probs, "draft_probs", device).to(device)
        tp = as_tensor(target_probs, "target_probs", device).to(device)
        if dp.dim() != 4 or tuple(dp.shape[:3]) != (B, 1, L):
            raise ValueError(f"draft_probs must have shape [B, 1, L, V] = [{B}, 1, {L}, V], got {list(dp.shape)}")
        V = dp.shape[3]
        if tuple(tp.shape) != (B, 1, L + 1, V):
            raise ValueError(f"target_probs must have shape [B, 1, L+1, V] = [{B}, 1, {L + 1}, {V}], "
                             f"got {list(tp.shape)}")
        ids = tokens[:, 0].to(torch.int64)  # [B, L]
        dp = dp[:, 0]  # [B, L, V]
        if self.one_hot_drafts:
            one_hot = torch.nn.functional.one_hot(ids.clamp(0, V - 1), V).to(dp.dtype)
            if not bool((dp == one_hot).all()):
                raise ValueError("draft_probs must be the one-hot rows of the drafted tokens with one_hot_drafts=True")
        temps = torch.tensor([self.temperatures[b % len(self.temperatures)] for b in range(B)],
                             dtype=torch.float64, device=device)
        q = tp[:, 0]  # [B, L+1, V]
        logits = torch.log(q) * temps.to(q.dtype if q.dtype.is_floating_point else torch.float64)[:, None, None]
        return B, L, V, device, ids, dp, logits, temps

    # -- one call --------------------------------------------------------------------------------

    def _fillers(self, L: int, V: int, seeds) -> list[_Filler]:
        if not self.fillers:
            return []
        entropy = [_FILLER_STREAM] + ([int(seeds[0]) % 2**64] if seeds is not None and len(seeds) else [])
        rng = np.random.default_rng(np.random.SeedSequence(entropy))
        return [_Filler(kind, {"L+1": L + 1, "L": L}.get(n, n), T, V, rng, self.one_hot_drafts)
                for kind, n, T in FILLERS]

    def __call__(self, draft_tokens, draft_probs, target_probs, *, seeds=None, noise=None) -> BatchVerdict:
        """Verify B contract rows through one call of ``fn`` (class doc).

        Args:
            draft_tokens, draft_probs, target_probs: the batched contract with K = 1.
            seeds: int64 [B]; row b's request gets a generator seeded with generator_seed(seeds[b]).
            noise: (uniforms float64 [B, 1, L+1] in (0, 1], exponentials float64 [B, V] > 0),
                the MatchedSource conventions: ``fn`` gets ``noise=(u' [num_tokens] float64,
                exponentials [B', V])`` with u' = u − 2^-53 in [0, 1), coin (0, i) at the
                request's draft position i − 1 (i = 1..L; coin (0, 0) is not sent), each filler
                with noise of its own (module doc).
        Returns:
            BatchVerdict (τ [B], tokens [B, L+1]) of the certified requests.
        Raises:
            ValueError, TypeError: class doc.
        """
        B, L, V, device, ids, dp, logits, temps = self._inputs(draft_tokens, draft_probs, target_probs)
        if noise is not None:
            if not _accepts_noise(self.fn):
                raise TypeError(f"{self.fn!r} does not take noise=: the layout function cannot be given the "
                                "probes' uniforms (add a noise= keyword: uniforms [num_tokens] in [0, 1), "
                                "exponentials [B, V])")
            if not isinstance(noise, (tuple, list)) or len(noise) != 2:
                raise ValueError("noise must be a pair (uniforms [B, 1, L+1], exponentials [B, V])")
            u = np.asarray(to_numpy(noise[0]), dtype=np.float64)
            e = np.asarray(to_numpy(noise[1]), dtype=np.float64)
            if u.shape != (B, 1, L + 1) or e.shape != (B, V):
                raise ValueError(f"noise must be (uniforms [B, 1, L+1] = [{B}, 1, {L + 1}], exponentials [B, V] = "
                                 f"[{B}, {V}]), got {list(u.shape)} and {list(e.shape)}")
            if not ((u > 0) & (u <= 1)).all():
                raise ValueError("noise: uniforms must lie in (0, 1] (MatchedSource convention)")
        if seeds is None:  # fresh seeds; fixed ones under noise, so that a probe is deterministic
            seeds = np.zeros(B, dtype=np.int64) if noise is not None else np.random.default_rng().integers(0, 2**62, size=B)
        seeds = to_numpy(seeds).reshape(-1)
        certified_generators = generators_from_seeds(seeds, device)
        fillers = self._fillers(L, V, seeds)

        # the batch: filler j follows certified request floor(j·B/F)
        after = {}
        for j, f in enumerate(fillers):
            after.setdefault((j * B) // len(fillers), []).append(f)
        order = []  # (kind, b or filler)
        for b in range(B):
            order.append(("certified", b))
            order.extend(("filler", f) for f in after.get(b, []))

        dtype = logits.dtype
        counts, id_parts, dp_parts, logit_parts, temp_list, generators = [], [], [], [], [], {}
        u_parts, e_rows = [], []
        for pos, (kind, x) in enumerate(order):
            if kind == "certified":
                counts.append(L)
                id_parts.append(ids[x])
                dp_parts.append(dp[x])
                logit_parts.append(logits[x])
                temp_list.append(float(temps[x]))
                generators[pos] = certified_generators[x]
                if noise is not None:
                    u_parts.append(_noise_to_layout(u[x, 0, 1:]))
                    e_rows.append(e[x])
            else:
                counts.append(x.n)
                id_parts.append(torch.as_tensor(x.drafts, device=device))
                if x.draft_probs is not None:
                    dp_parts.append(torch.as_tensor(x.draft_probs, dtype=dp.dtype, device=device))
                logit_parts.append(torch.as_tensor(x.logits, dtype=dtype, device=device))
                temp_list.append(x.T)
                if x.kind != "unseeded":  # an unseeded request has no generator (vLLM's global one)
                    g = torch.Generator(device=device)
                    g.manual_seed(generator_seed(x.seed))
                    generators[pos] = g
                if noise is not None:
                    u_parts.append(x.uniforms)
                    e_rows.append(x.exponentials)
        flat_ids = torch.cat(id_parts).to(torch.int64)
        flat_dp = None if self.one_hot_drafts else torch.cat(dp_parts).reshape(-1, V)
        flat_logits = torch.cat(logit_parts).reshape(-1, V)
        temperatures = torch.tensor(temp_list, dtype=dtype, device=device)
        kwargs = {"generators": generators}
        if noise is not None:
            kwargs["noise"] = (torch.as_tensor(np.concatenate(u_parts), dtype=torch.float64, device=device),
                               torch.as_tensor(np.stack(e_rows), dtype=torch.float64, device=device))
        out = self.fn(counts, flat_ids, flat_dp, flat_logits, temperatures, **kwargs)
        return self._read(out, order, counts, to_numpy(ids).astype(np.int64), L, V)

    def _read(self, out, order, counts, drafts: np.ndarray, L: int, V: int) -> BatchVerdict:
        """Check the fillers' rows, then parse the certified requests' rows."""
        arr = to_numpy(out)
        width = max(counts) + 1
        if arr.ndim != 2 or arr.shape != (len(counts), width):
            raise ContractViolation(f"output_token_ids must have shape [B, max_spec_len + 1] = [{len(counts)}, {width}] "
                             f"({len(counts) - len(drafts)} of the B requests are fillers), got {list(arr.shape)}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise ContractViolation(f"output_token_ids must hold integer token ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        certified_pos = []
        for pos, (kind, x) in enumerate(order):
            if kind == "filler":
                x.check(pos, arr[pos], V)
            else:
                certified_pos.append(pos)
        rows = arr[certified_pos]
        if width > L + 1:
            extra = (rows[:, L + 1:] != PLACEHOLDER_TOKEN_ID).any(axis=1)
            if extra.any():
                b = int(np.flatnonzero(extra)[0])
                raise ContractViolation(f"output_token_ids: certified request {certified_pos[b]} (contract row {b}, "
                                 f"{L} drafts) has tokens past its {L + 1} entries: {arr[certified_pos[b]].tolist()}")
        names = [f"request {pos} (contract row {b})" for b, pos in enumerate(certified_pos)]
        tau, toks = parse_output(rows[:, :L + 1], drafts, V, names=names if len(order) > len(drafts) else None)
        return BatchVerdict(tau, np.where(tau > 0, 0, -1), toks, tau + 1)


def from_vllm_layout(fn, one_hot_drafts: bool = False, *, realistic: bool = True, temperatures=TEMPERATURES,
                     fillers: bool = True) -> VLLMLayoutAdapter:
    """``fn`` written for vLLM's layout as a verifier of the batched contract
    (``VLLMLayoutAdapter``; module doc for what each call sends):
    ``certify_verifier(from_vllm_layout(fn), "sd", K=1)``."""
    return VLLMLayoutAdapter(fn, one_hot_drafts, realistic=realistic, temperatures=temperatures, fillers=fillers)
