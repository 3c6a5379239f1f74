"""Certification, one folder per ``spectr-gbv certify`` sub-command; each holds its whole path.

- ``verifiers/``  ``certify verifiers``: the registered torch verifiers against the reference
  rules' exact laws (``run``: plan, run, report; ``real_rows``: a real model's rows; ``greedy``:
  temperature 0 exactly);
- ``samplers/``   ``certify samplers vllm``: a library's own rejection samplers (``vllm``);
- ``engine/``     ``certify engine NAME``: another engine's ``generate``, black box
  (``generate.certify_generate``; one adapter per engine; ``modes``, ``controls``);
- ``our_engine/`` ``certify our-engine``: our speculative-decoding engine end to end, white box
  (``certificate``, ``runs``, ``power``);
- ``endpoint/``   ``certify endpoint URL``: any deployment through its own API.  Imports no torch
  (numpy, scipy and the standard library; a local ``hf:``/``gguf:`` reference loads torch or
  llama.cpp when it is asked for), so it runs from the light install (``pip install spectr-gbv``).

Shared where more than one certification uses them: ``planted`` (the planted defects of the torch
verifiers: ``certify verifiers``, ``certify our-engine`` and the engine controls), ``planted_laws``
(their exact laws of τ and stated power, read by both) and ``suite`` (the
verifiers' case plan, also read by ``planted_laws``).  The statistics are ``oracle``'s.
"""
