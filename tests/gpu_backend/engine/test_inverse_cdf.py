"""``sampling.inverse_cdf_rows``: the llama.cpp backend's plain-sampling draw.  Exact interval
boundaries, zero-probability tokens never drawn, and the law by a G-test."""

from __future__ import annotations

import numpy as np
import torch

from spectr_gbv.gpu_backend.decoding.sampling import inverse_cdf_rows
from spectr_gbv.oracle.gtest import gtest


def draw(row, u):
    return int(inverse_cdf_rows(torch.tensor([row], dtype=torch.float32), torch.tensor([u], dtype=torch.float64))[0])


def test_interval_boundaries_and_zero_probability_tokens():
    row = [0.25, 0.0, 0.5, 0.25]  # exact in binary: c = 0.25, 0.25, 0.75, 1
    assert [draw(row, u) for u in (0.0, 0.2499999, 0.25, 0.7499999, 0.75, 1 - 2**-53)] == [0, 0, 2, 2, 3, 3]
    assert draw([0.5, 0.5, 0.0, 0.0], 1 - 2**-53) == 1  # trailing zeros are never reached
    assert draw([0.0, 0.0, 1.0], 0.0) == 2  # leading zeros neither
    assert draw([2.0, 0.0, 2.0], 0.5) == 2  # unnormalised rows: u scales the total
    batch = inverse_cdf_rows(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.tensor([0.9, 0.1], dtype=torch.float64))
    assert batch.tolist() == [0, 1] and batch.dtype == torch.int64


def test_law_by_gtest():
    """N = 200,000 draws from a V = 6 row with a zero entry, G-test at α = 1e-6: the smallest
    deviation it detects with power 0.99 is stated by the result (δ ≈ 0.01)."""
    p = np.array([0.05, 0.3, 0.0, 0.15, 0.4, 0.1])
    gen = torch.Generator().manual_seed(7)
    N = 200_000
    u = torch.rand(N, generator=gen, dtype=torch.float64)
    tokens = inverse_cdf_rows(torch.tensor(p, dtype=torch.float32).expand(N, -1), u).numpy()
    counts = np.bincount(tokens, minlength=6)
    assert counts[2] == 0
    res = gtest(counts, p, alpha=1e-6)
    assert res.passed and res.detectable_tv < 0.015
