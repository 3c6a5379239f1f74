"""scripts/mutants.py (mutation testing, slow, not in CI) stays applicable: every mutant's old
text occurs exactly once in its file of the current sources, names are unique, and the list
covers every rule family (bv, sd, spectr, gbv, the K-SEQ variants, MDBV) in both the numpy
reference and the torch verifiers.  The mutants' kills: benchmarks/MUTANTS.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("mutants_script", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_mutant_applies_exactly_once():
    mutants = load()
    assert mutants.check_applies(ROOT) == []
    assert len(mutants.MUTANTS) >= 15


def test_the_list_covers_every_rule_family_in_both_implementations():
    mutants = load()
    files = {m.path for m in mutants.MUTANTS}
    for name in ("bv", "sd", "spectr", "gbv", "kseq_bv", "spectr_gbv", "mdbv"):
        assert f"reference/rules/{name}.py" in files, name
    for name in ("bv", "sd", "spectr", "gbv", "kseq_bv", "mdbv_kseq"):
        assert f"gpu_backend/verifiers/{name}.py" in files, name
    assert all(m.path.startswith(("reference/rules/", "gpu_backend/verifiers/")) for m in mutants.MUTANTS)


def test_check_applies_names_a_missing_text(tmp_path):
    mutants = load()
    (tmp_path / "reference" / "rules").mkdir(parents=True)
    (tmp_path / "reference" / "rules" / "bv.py").write_text("x = 1\nx = 1\n", encoding="utf-8")
    bad = (mutants.Mutant("a", "reference/rules/bv.py", "x = 1", "x = 2", ("bv",), ""),
           mutants.Mutant("b", "reference/rules/bv.py", "y = 1", "y = 2", ("bv",), ""),
           mutants.Mutant("b", "reference/rules/nope.py", "y", "z", ("bv",), ""))
    assert mutants.check_applies(tmp_path, bad) == ["a: old text found 2 times in reference/rules/bv.py",
                                                    "b: old text found 0 times in reference/rules/bv.py",
                                                    "b: name repeated", "b: reference/rules/nope.py missing"]
