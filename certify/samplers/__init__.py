"""``spectr-gbv certify samplers vllm``: a library's own rejection samplers through the batched
contract (``vllm``: vLLM's, run in its own environment when it is not importable here)."""
