"""α spending over a certificate's looks: the false-alarm rate of a certificate that is continued.

A certificate is *looked at* each time its tests are computed and shown: every look of
``certify endpoint``'s sequential plan, a run stopped and tested on its prefix, a run continued
with ``--resume`` over more samples, ``certify log`` run again on a grown log.  The looks are
counted over every run that continued the certificate (the run file or the partial result keeps
them), so the false-alarm rate holds whatever the number of looks and whoever decided to look
again:

- **the e-values** (the directional tests, the other-cell and independence tests where they are
  e-values) are test supermartingales over the samples in their order; by Ville's inequality
  P(W ≥ 1/a at some look) ≤ a, whatever the looks, so they run at their whole share at every
  look — provided each look extends the same product (the earlier samples a prefix of the later:
  the run file's indices, the log's lines);
- **the fixed-sample tests** (the omnibus KS rows, the report tests and the audit taken from the
  same share) are spent: look j = 1, 2, … takes α_j = α / (j (j + 1)) of their share.
  Σ_{j ≤ J} α_j = α·J/(J + 1) < α for every J (the sum telescopes), so by the union bound over the
  looks their false-alarm rate stays < α however many looks follow; look 1 takes α/2, look 5
  α/30, look 100 α/10,100.

Together the certificate's false-alarm rate stays ≤ α over any number of looks (each share of α
as the family splits it: ``oracle.sequence_family``).  The price: the fixed-sample tests of look
j are those of a test at α_j: the pooled KS row's detectable per-token TV grows about as
√(log(1/α_j)), on 20,480 tokens at α = 10^-3 by 7 % from look 1 to look 5 and by 21 % to look 100
(``certify.endpoint.sequential.omnibus_detectable``).

Source: Ville (1939) for the e-values; the series is the α-spending idea of Lan and DeMets
(1983) with an infinite, pre-stated schedule, needing no maximum number of looks.
"""

from __future__ import annotations


def look_share(j: int) -> float:
    """The fraction 1 / (j (j + 1)) of the fixed-sample tests' α that look j (1, 2, …) takes.

    Raises:
        ValueError: ``j`` < 1 or not an integer.
    """
    if isinstance(j, bool) or int(j) != j or j < 1:
        raise ValueError(f"look: need an integer >= 1, got {j!r}")
    j = int(j)
    return 1.0 / (j * (j + 1))


def look_alpha(alpha: float, j: int) -> float:
    """α_j = α / (j (j + 1)): the α the fixed-sample tests take at look j of a certificate of α."""
    return float(alpha) * look_share(j)


def spent(alpha: float, looks: int) -> float:
    """α·J/(J + 1): what J looks spend of the fixed-sample tests' α in all (0 for J = 0)."""
    if looks < 0:
        raise ValueError(f"looks: need >= 0, got {looks!r}")
    return float(alpha) * looks / (looks + 1)
