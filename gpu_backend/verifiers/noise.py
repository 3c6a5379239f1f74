"""Randomness of the batched verifiers: per-row seeded noise and the exponential race.

Each verification consumes, per batch row,
    uniforms  float64 [K, L+1] in (0, 1]: coin (k, i) succeeds iff uniforms[k, i] <= h
              (h = 0 never fires, h = 1 always does), the addresses of reference/randomness.py;
    exponentials float64 [V] > 0: the single correction or bonus draw is the exponential race
              argmax_x log w_x − log E_x over the positive weights (P(x) = w_x / Σ w), with no
              normalisation and no torch.multinomial.
These are exactly the conventions of reference.randomness.MatchedSource, so explicit noise
reproduces the reference's choices (matched-noise tests).

Seeded noise is a counter-based generator: the value at slot s of row b is
SplitMix64(key_b + (s + 1)·γ) (Steele, Lea, Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; the SplitMix64 finaliser), key_b = mix(seed_b XOR stream), computed
with int64 tensor ops on the inputs' device and turned into 53-bit uniforms.  Row b's noise is a
function of seeds[b] alone, so outputs do not depend on the batch layout, nothing synchronises
with the host, and no host-side seeds are needed on CUDA (a per-row torch.Generator would need
them, and B generator calls).

Seeded verification draws with the *grouped* race (``grouped_race``): a race between the G
group totals of the weights, then one inside the winning group of S tokens (G·S ≥ V, S ≈ √V),
exactly ∝ w like the flat race but with G + S exponentials per row instead of V (the race
noise's cost against the flat race and a per-row torch.Generator, from
benchmarks/verify_latency.py: benchmarks/MEASUREMENTS.md, "gpu_backend/verifiers/noise.py").
Explicit noise (``noise=``) keeps the flat race of MatchedSource, so the matched-noise tests
replay the reference's draws exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def _signed(c: int) -> int:
    """A 64-bit constant as the int64 with the same bits (torch int64 arithmetic wraps)."""
    return c - (1 << 64) if c >= (1 << 63) else c


_GAMMA = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
_STREAM_COINS = _signed(0x243F6A8885A308D3)  # digits of π: arbitrary, distinct stream tags
_STREAM_RACE = _signed(0x13198A2E03707344)
_MASK53 = (1 << 53) - 1


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> is arithmetic: mask off the sign fill)."""
    return torch.bitwise_and(torch.bitwise_right_shift(x, s), (1 << (64 - s)) - 1)


def splitmix64_mix(x: torch.Tensor) -> torch.Tensor:
    """The SplitMix64 finaliser on int64 tensors (bijective 64-bit mix), out of place."""
    x = torch.bitwise_xor(x, _shr(x, 30)) * _MIX1
    x = torch.bitwise_xor(x, _shr(x, 27)) * _MIX2
    return torch.bitwise_xor(x, _shr(x, 31))


def _bits53(seeds: torch.Tensor, stream: int, n: int) -> torch.Tensor:
    """int64 [B, n]: 53 random bits for slots 0..n-1 of each row's stream."""
    keys = splitmix64_mix(torch.bitwise_xor(seeds, stream))
    ctr = torch.arange(1, n + 1, dtype=torch.int64, device=seeds.device) * _GAMMA
    x = splitmix64_mix(keys.unsqueeze(1) + ctr.unsqueeze(0))
    return _shr(x, 11)


def seeded_uniforms(seeds: torch.Tensor, n: int) -> torch.Tensor:
    """float64 [B, n] in (0, 1]: (bits + 1)·2^-53 (1 is reachable, 0 is not)."""
    return (_bits53(seeds, _STREAM_COINS, n) + 1).to(torch.float64) * 2.0**-53


def seeded_exponentials(seeds: torch.Tensor, V: int) -> torch.Tensor:
    """float64 [B, V] Exp(1) draws −log(u), u = (bits + 1/2)·2^-53 ∈ (0, 1): all > 0, finite."""
    u = (_bits53(seeds, _STREAM_RACE, V).to(torch.float64) + 0.5) * 2.0**-53
    return -torch.log(u)


def race_groups(V: int) -> tuple[int, int]:
    """(G, S): the grouped race splits the vocabulary into G groups of S tokens (G·S ≥ V).

    S is a power of two near √V, preferring one that divides V (no padding): V = 151,936 gives
    S = 128, G = 1,187; V = 4,096 gives S = G = 64.
    """
    j0 = max(0, round(math.log2(max(1.0, math.sqrt(V)))))
    for j in range(j0, max(-1, j0 - 3), -1):
        if V % (1 << j) == 0:
            return V >> j, 1 << j
    S = 1 << j0
    return -(-V // S), S


@dataclass
class Noise:
    """The noise of one batch.

    Attributes:
        uniforms: float64 [B, K, L+1]; coin (k, i) of row b succeeds iff uniforms[b, k, i] <= h.
        gumbel: explicit noise: [B, V] −log E of the flat race (MatchedSource convention).
            Seeded noise: [B, G + S], −log E of the grouped race (``race_groups``): G for the
            race between group totals, S for the race inside the winning group.
        grouped: which of the two layouts ``gumbel`` has.
    """

    uniforms: torch.Tensor
    gumbel: torch.Tensor
    grouped: bool = False

    def draw(self, weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
        """One categorical draw per row ∝ weights (fallback where they have no mass); see
        ``race`` and ``grouped_race``."""
        if self.grouped:
            return grouped_race(weights, fallback, self.gumbel)
        return race(weights, fallback, self.gumbel)


def make_noise(B: int, K: int, L: int, V: int, device: torch.device, dtype: torch.dtype,
               seeds=None, noise=None, validate: bool = True) -> Noise:
    """Noise from explicit values, from per-row seeds, or (neither given) from fresh seeds.

    Args:
        B, K, L, V: batch shape.
        device: the inputs' device.
        dtype: work dtype of the race (float64 or float32).
        seeds: int [B] (tensor or sequence); row b's noise depends on seeds[b] only.
        noise: (uniforms float [B, K, L+1] in (0, 1], exponentials float [B, V] > 0); overrides
            seeds.
        validate: check the explicit noise's values (synchronises).
    Returns:
        Noise.  Without seeds or noise, seeds are drawn from torch's default generator.
    Raises:
        ValueError: naming the argument: wrong shapes, uniforms outside (0, 1], exponentials
            not finite and > 0, seeds not integer or not of shape [B].
    """
    if noise is not None:
        if not isinstance(noise, (tuple, list)) or len(noise) != 2:
            raise ValueError("noise must be a pair (uniforms [B, K, L+1], exponentials [B, V])")
        uniforms, exponentials = noise
        uniforms = torch.as_tensor(uniforms, dtype=torch.float64, device=device)
        exponentials = torch.as_tensor(exponentials, dtype=torch.float64, device=device)
        if tuple(uniforms.shape) != (B, K, L + 1):
            raise ValueError(f"noise: uniforms must have shape [B, K, L+1] = [{B}, {K}, {L + 1}], "
                             f"got {tuple(uniforms.shape)}")
        if tuple(exponentials.shape) != (B, V):
            raise ValueError(f"noise: exponentials must have shape [B, V] = [{B}, {V}], "
                             f"got {tuple(exponentials.shape)}")
        if validate:
            if not bool(((uniforms > 0) & (uniforms <= 1)).all()):
                raise ValueError("noise: uniforms must lie in (0, 1]")
            if not bool((torch.isfinite(exponentials) & (exponentials > 0)).all()):
                raise ValueError("noise: exponentials must be finite and > 0")
        return Noise(uniforms, (-torch.log(exponentials)).to(dtype))
    if seeds is None:
        seeds = torch.randint(-(2**63), 2**63 - 1, (B,), dtype=torch.int64, device=device)
    seeds = torch.as_tensor(seeds, device=device)
    if seeds.dtype.is_floating_point or seeds.dtype == torch.bool or seeds.dtype.is_complex:
        raise ValueError(f"seeds must be integers, got dtype {seeds.dtype}")
    if tuple(seeds.shape) != (B,):
        raise ValueError(f"seeds must have shape [B] = [{B}], got {tuple(seeds.shape)}")
    seeds = seeds.to(torch.int64)
    uniforms = seeded_uniforms(seeds, K * (L + 1)).reshape(B, K, L + 1)
    G, S = race_groups(V)
    # −log E in float64 (E near 0 needs the 53 bits), then the work dtype for the race.
    gumbel = (-torch.log(seeded_exponentials(seeds, G + S))).to(dtype)
    return Noise(uniforms, gumbel, grouped=True)


def race(weights: torch.Tensor, fallback: torch.Tensor, gumbel: torch.Tensor) -> torch.Tensor:
    """One categorical draw per row ∝ ``weights``, or ∝ ``fallback`` where the weights have no mass.

    The exponential race argmax_x log w_x − log E_x: negative weights count as 0, log 0 = −inf
    removes zero weights, so a zero-weight token is never drawn when some weight is positive
    (reference/rules/base.py draw_residual; reference.randomness.MatchedSource.draw).

    Args:
        weights: [B, V], work dtype (any sign; clipped at 0); overwritten.
        fallback: [B, V] non-negative (the target row of the same position).
        gumbel: [B, V], −log E.
    Returns:
        int64 [B], token ids in [0, V).
    """
    return (torch.log(_with_fallback(weights, fallback)) + gumbel).argmax(dim=-1)


def _with_fallback(weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """max(weights, 0), or the fallback row where that has no mass.  Works in place on
    ``weights`` (the rules hand over a temporary)."""
    w = weights.clamp_min_(0)
    empty = (w.amax(dim=-1, keepdim=True) <= 0).to(w.dtype)
    return w.addcmul_(fallback, empty)  # rows with mass: + 0·fallback


def grouped_race(weights: torch.Tensor, fallback: torch.Tensor, gumbel: torch.Tensor) -> torch.Tensor:
    """The draw of ``race`` with G + S exponentials instead of V (the seeded path).

    Two exponential races: the group g is the argmax of log W_g − log E_g over the group totals
    W_g = Σ_{x ∈ g} w_x, then the token the argmax of log w_x − log E'_x inside g.  P(g) = W_g/W
    and P(x | g) = w_x/W_g, so P(x) = w_x/W exactly, as with the flat race; zero weights (and
    empty groups) get log 0 = −inf and are never drawn while some weight is positive.

    Args:
        weights, fallback: [B, V] (see ``race``); weights are overwritten.
        gumbel: [B, G + S], −log E; (G, S) = race_groups(V).
    Returns:
        int64 [B] in [0, V).
    """
    B, V = weights.shape
    G, S = race_groups(V)
    w = _with_fallback(weights, fallback)
    if G * S != V:
        w = torch.nn.functional.pad(w, (0, G * S - V))
    w = w.reshape(B, G, S)
    group = (torch.log(w.sum(dim=-1)) + gumbel[:, :G]).argmax(dim=-1)
    inner = w[torch.arange(B, device=w.device), group]
    return group * S + (torch.log(inner) + gumbel[:, G:]).argmax(dim=-1)
