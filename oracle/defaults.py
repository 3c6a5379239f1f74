"""The certification defaults of the public API, in one place (standard library only, so that
the pytest plugin can import them without torch or scipy).

``DEFAULT_SAMPLES`` is N per case of ``oracle.harness.certify_verifier``, of the pytest
plugin's helpers (``--spectr-samples`` overrides it for a run), of ``oracle.certify.certify``
/ ``certify_case`` and of the third-party certificate (``gpu_backend.adapters.third_party``);
``DEFAULT_ALPHA`` is the false-alarm rate per case.  At N = 20,000 and α = 10^-6 the
detectable δ (TV, power 0.99) is about 0.03 on the small-vocabulary families and 0.14 at
V = 4,096 (docs/api.md).  The ``spectr-gbv certify`` command has its own sizes (cli/certify.py).
"""

DEFAULT_SAMPLES = 20_000
DEFAULT_ALPHA = 1e-6
