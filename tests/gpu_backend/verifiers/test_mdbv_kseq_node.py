"""MDBV-KSEQ's node selection in the batched port (gpu_backend/verifiers/mdbv_kseq.py: K-SEQ
against w·q by kseq.threshold_scaled, histogram refinements) against the reference's
(reference/rules/mdbv.py node_mechanism with families=("classes",), max_cut=0: bisection in κ
over sorted, tie-snapped ratios), node by node: ΣA and every A(x) to 1e-9 relative (the solver's
resolution is (m − 1)/w·2^-36 in θ), at budgets from 1e-6 to 1, m = 1..4, on peaked, flat,
zero-probability, tied and p = q rows, at V = 6 and V = 4,096."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spectr_gbv.gpu_backend.verifiers.kseq import ratios
from spectr_gbv.gpu_backend.verifiers.mdbv_kseq import node_totals
from spectr_gbv.reference.rules import mdbv as ref
from helpers.node_rows import rows

KINDS = ("peaked", "flat", "zeros", "ties", "equal")


@pytest.mark.parametrize("V", [6, 4096])
@pytest.mark.parametrize("kind", KINDS)
def test_port_selection_equals_reference(kind, V):
    rng = np.random.default_rng(7 + V)
    worst = 0.0
    for trial in range(4):
        p, q = rows(kind, V, rng)
        for m in (1, 2, 3, 4):
            for w in (1.0, 0.73, 0.2, 1e-6):
                mech = ref.node_mechanism(p, q, w, m, families=("classes",), max_cut=0)
                pq = ratios(torch.tensor(p)[None], torch.tensor(q)[None])
                theta, s, total = node_totals(pq, torch.tensor([m]), torch.tensor([w], dtype=torch.float64))
                A = (torch.minimum(pq[0], pq[1] / theta[:, None]) * (total / s.clamp_min(1e-300))[:, None])[0].numpy()
                assert abs(float(total) - mech.total) <= 1e-9 * max(mech.total, 1e-12), (kind, V, m, w)
                np.testing.assert_allclose(A, mech.A, rtol=1e-9, atol=1e-15, err_msg=f"{kind} V={V} m={m} w={w}")
                assert np.all(A <= w * q * (1 + 1e-9) + 1e-300)  # A ≤ w·q: the residual is a measure
                worst = max(worst, abs(float(total) - mech.total) / max(mech.total, 1e-12))
    print(f"\n{kind} V={V}: worst relative difference of ΣA {worst:.1e}")
