"""``spectr-gbv certify verifiers``: every registered torch verifier against its reference rule's
exact law (``run``: the plan of cases, the run, the report), on a real model's rows
(``real_rows``) and at temperature 0 (``greedy``).  Cases: ``certify.suite``; planted defects:
``certify.planted``."""
