"""Toy models: suffix fallback, temperature, joints, block laws, model-file round trip."""

import json

import numpy as np
import pytest

from spectr_gbv.reference.models import ContextFree, RandomModel, TableModel, Tempered, load_model_file, model_from_json


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


@pytest.mark.parametrize("key", ["00", "01", " 0 ", "0 ", "\u0661", "-0", "+1", "1,,0", "1,", ",1", "1.0", " "])
def test_model_file_refuses_non_canonical_keys(key, tmp_path):
    """Two keys that parse to the same prefix ("0", "00", " 0 ", Arabic "١") would silently
    overwrite each other: only canonical keys are accepted."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "0": [0.5, 0.5],
                                                                  key: [0.7, 0.3]}}))
    with pytest.raises(ValueError, match="is not a prefix key"):
        load_model_file(path)


def test_model_file_refuses_a_key_listed_twice(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "0": [0.5, 0.5], "0": [0.7, 0.3]}}')
    with pytest.raises(ValueError, match="key '0' is listed twice"):
        load_model_file(path)


def test_model_file_canonical_keys_parse():
    m = model_from_json({"vocab_size": 11, "conditionals": {
        "": [1 / 11] * 11, "0": [1.0] + [0.0] * 10, "10,0": [0.0] * 10 + [1.0]}})
    assert set(m.table) == {(), (0,), (10, 0)}


def test_model_file_number_too_large_for_a_float_is_a_value_error(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"vocab_size":2,"conditionals":{"":[1,0],"1":[1' + "0" * 400 + ',0]}}')
    with pytest.raises(ValueError, match="too large for a float"):
        load_model_file(path)


@pytest.mark.parametrize("text,needle", [
    ('{"vocab_size":2,"conditionals":{"":[1,0],"1":[1' + "0" * 400 + ',0]}}', "too large for a float"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"vocab_size": 2, "conditionals": {"": [0.5, 0.5], "00": [0.5, 0.5]}}', "not a prefix key"),
])
def test_load_model_arg_names_flag_and_file(text, needle, tmp_path):
    from spectr_gbv.cli.exact import load_model_arg
    from spectr_gbv.cli.args import UsageError

    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        load_model_arg("--target", str(path))
    assert str(err.value).startswith(f"--target {path}: ") and needle in str(err.value)
