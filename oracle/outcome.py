"""The word a certification row ends in, from whether its tests passed and whether they should.

PASS / FAIL for a row expected to pass (a rule, a verifier, a seed check); CAUGHT / MISSED for a
negative control (a planted or lossy-by-design row, which must fail its tests).  Every report of
the project (oracle.certify, oracle.lossless, oracle.seed_contract, certify/) uses
these words; a row that could not run says ERROR on its own.
"""

from __future__ import annotations


def verdict_word(passed: bool, expect_pass: bool = True) -> str:
    """"PASS"/"FAIL" when ``expect_pass``, else "CAUGHT" (its tests rejected) / "MISSED"."""
    if expect_pass:
        return "PASS" if passed else "FAIL"
    return "CAUGHT" if not passed else "MISSED"
