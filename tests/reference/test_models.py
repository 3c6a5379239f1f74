"""Toy models: suffix fallback, temperature, joints, block laws, model-file round trip."""

import json

import numpy as np
import pytest

from reference.models import ContextFree, RandomModel, TableModel, Tempered, load_model_file


def test_table_longest_suffix_fallback():
    m = TableModel(2, {(): [0.5, 0.5], (1,): [0.9, 0.1], (0, 1): [0.2, 0.8]})
    assert m.conditional((0, 0, 1)).tolist() == [0.2, 0.8]   # suffix (0, 1)
    assert m.conditional((1, 1)).tolist() == [0.9, 0.1]      # suffix (1,)
    assert m.conditional((1, 0)).tolist() == [0.5, 0.5]      # falls back to ()


def test_joint_and_block_law():
    m = TableModel(2, {(): [0.25, 0.75], (0,): [0.6, 0.4]})
    assert m.joint((0, 1)) == pytest.approx(0.25 * 0.4, abs=1e-15)
    law = m.block_law(2)
    assert law.shape == (2, 2)
    assert law[0, 1] == pytest.approx(0.1, abs=1e-15) and law[1, 1] == pytest.approx(0.5625, abs=1e-15)  # (1) falls back to ()
    assert law.sum() == pytest.approx(1.0, abs=1e-15)


def test_random_model_reproducible_and_prefix_dependent():
    a, b = RandomModel(3, 7, 0.5), RandomModel(3, 7, 0.5)
    assert np.array_equal(a.conditional((1, 2)), b.conditional((1, 2)))
    assert not np.array_equal(a.conditional((1,)), a.conditional((2,)))
    assert not np.array_equal(a.conditional(()), RandomModel(3, 8, 0.5).conditional(()))


def test_random_model_zero_prob_has_zeros_but_mass():
    m = RandomModel(4, 3, 1.0, zero_prob=0.6)
    rows = [m.conditional((i,)) for i in range(4)]
    assert any((r == 0).any() for r in rows)
    assert all(r.sum() == pytest.approx(1.0, abs=1e-15) for r in rows)


def test_temperature():
    base = ContextFree([0.2, 0.8])
    t = Tempered(base, 0.5).conditional(())  # ∝ p^2
    assert t.tolist() == pytest.approx([0.04 / 0.68, 0.64 / 0.68], abs=1e-15)
    assert Tempered(ContextFree([0.0, 1.0]), 0.1).conditional(()).tolist() == [0.0, 1.0]


def test_model_file_round_trip(tmp_path):
    m = RandomModel(3, 1, 0.5, 0.3).to_table(3)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m.to_json()))
    back = load_model_file(path)
    for prefix in [(), (0,), (2, 1), (1, 2, 0, 1)]:
        assert np.array_equal(back.conditional(prefix), m.conditional(prefix))
