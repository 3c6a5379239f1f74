"""certify.declared_laws.declared_records: the records certify endpoint shares with certify log."""

import numpy as np
import pytest

from spectr_gbv.certify.declared_laws import declared_records
from spectr_gbv.oracle.sequence_records import records_from_top


def _lists(rng, n=12, V=40, k=8, T=1.0):
    tokens, ids, lps, own = [], [], [], []
    for _ in range(n):
        z = rng.normal(0, 2, V)
        lp = z - np.logaddexp.reduce(z)
        top = np.argsort(-lp)[:k]
        p = np.exp(z / T - np.logaddexp.reduce(z / T))
        x = int(rng.choice(V, p=p))
        tokens.append(x)
        ids.append(top.tolist())
        lps.append([float(np.float32(v)) for v in lp[top]])
        own.append(float(np.float32(lp[x])))
    return tokens, ids, lps, own


def test_temperature_one_equals_records_from_top():
    rng = np.random.default_rng(5)
    tokens, ids, lps, own = _lists(rng)
    mine, skipped = declared_records(tokens, ids, lps, own)
    ref = records_from_top(tokens, ids, lps, own)
    assert skipped == {} and len(mine) == len(ref) == 12
    for a, b in zip(mine, ref):
        assert set(b) - {"lp"} <= set(a), set(b) - set(a)
        for key in ("c", "lo", "li", "tg", "tm", "tv", "tr", "pe", "pr", "o"):
            if key in b:
                assert a[key] == pytest.approx(b[key], abs=1e-12), key
        for key in ("tk", "tx", "nu", "se", "sm", "sv", "sq"):
            if key in b:
                np.testing.assert_allclose(np.asarray(a[key], float), np.asarray(b[key], float), atol=1e-12)


def test_declared_top_k_inside_the_list_is_exact_and_bad_fields_are_named():
    rng = np.random.default_rng(6)
    tokens, ids, lps, own = _lists(rng)
    recs, _ = declared_records(tokens, ids, lps, own, top_k=3)
    kept = [r for r in recs if "c" in r]
    assert kept and all(r["k"] == 3 for r in recs if not r.get("skip"))
    # a renormalised top 3: the cells sum to 1 with no "other" mass
    assert all(r["o"] == 0.0 for r in kept)
    with pytest.raises(ValueError, match="top_p"):
        declared_records(tokens, ids, lps, own, top_p=0.0)
    with pytest.raises(ValueError, match="one entry per token"):
        declared_records(tokens[:-1], ids, lps, own)
