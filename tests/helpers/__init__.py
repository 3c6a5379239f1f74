"""Code shared by the test modules (imported as ``helpers.<module>``: tests/ is on sys.path
through tests/conftest.py): the small random engine models (``engine_models``), the verifier
case generators and comparators (``verifier_cases``), planted wrong rules and verifiers."""
