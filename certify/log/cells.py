"""The law a request asked for, from a reported top-k list: moved to ``certify/topk_laws.py``
(shared with ``certify endpoint``'s ``--reference reported`` and ``--as-client``, which sit below
``certify log`` in the layers); this name stays for ``certify log``'s modules and tests."""

from spectr_gbv.certify.topk_laws import (DEFAULT_MAX_BOUND, SKIP_REASONS, record_arrays,  # noqa: F401
                                          reported_precisions, request_law)
