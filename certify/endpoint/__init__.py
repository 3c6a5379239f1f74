"""``spectr-gbv certify endpoint URL``: certify a deployment, any model behind a server's own API
(OpenAI-compatible completions as vLLM serves them, SGLang, TGI, llama.cpp's server), against the server's own prompt log-probabilities
or another reference, with no local weights needed.

``endpoint`` (``certify_endpoint``: the checks, in order, then the run), ``run`` (the plan, the
engine side, the run loop with C requests in flight, the certificate), ``client`` (HTTP: bounded,
retried, the API key kept secret), ``servers`` (each server's request and response shapes),
``references`` (``self``, ``reported``, ``endpoint:``, ``hf:``, ``gguf:``; the declared law of
``--as-client``), ``prompts`` (the shipped set, JSONL
files), ``store`` (the run file: append, resume), ``report`` (text and JSON).  The statistics
are oracle's (``oracle.sequence_records``, ``sequence_family``).

Imports no torch: a test (tests/certify/endpoint/test_light.py) fails if importing any module
of this folder loads torch, transformers or llama_cpp."""
