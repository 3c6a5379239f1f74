"""Certification: the torch verifiers (``verifiers``, cases ``suite``, planted defects ``planted``,
``planted_laws``), vLLM's samplers (``vllm``), the engine end to end (``engine``, ``engine_runs``,
``engine_power``), any engine's ``generate`` from outside (``generate``, ``engines/``)."""
