"""oracle.look_spending: the series α/(j(j+1)) of the fixed-sample tests over a certificate's looks."""

import math

import pytest

from spectr_gbv.oracle.look_spending import look_alpha, look_share, spent


def test_the_shares_telescope_below_one_for_any_number_of_looks():
    assert [look_share(j) for j in (1, 2, 3, 5, 100)] == [1 / 2, 1 / 6, 1 / 12, 1 / 30, 1 / 10100]
    for J in (1, 5, 100, 10_000):
        assert math.fsum(look_share(j) for j in range(1, J + 1)) == pytest.approx(J / (J + 1), rel=1e-12)
        assert spent(1e-3, J) == pytest.approx(1e-3 * J / (J + 1), rel=1e-12) and spent(1e-3, J) < 1e-3
    assert spent(1e-3, 0) == 0 and look_alpha(1e-3, 4) == pytest.approx(5e-5, rel=1e-12)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_look_number_is_an_integer_from_one(bad):
    with pytest.raises((ValueError, TypeError), match="look|int"):
        look_share(bad)
