"""Where an iteration's time goes: the engine's default rule on the real models, by phase.

Wraps, for the duration of the runs, the draft and target forward calls, the probability
processing (``sampling.probabilities``: temperature, softmax), the draft-token sampling, the
verifier, Algorithm 2's stack and the cache cut back, with ``time.perf_counter`` (CPU: every
call is synchronous, so wall time per phase is what the phase costs).  What no wrapper covers
is "other" (tree and mask building, host reads, Python).  Prints one markdown table: per
phase, calls per iteration, milliseconds per iteration and share of the generation's wall
time, summed over ``--prompts`` generations; prefill (the prompt's target and draft forwards)
is reported apart.

    python benchmarks/profile_iteration.py [--rule spectr --K 2 --L 4] [--stop-below P]
        [--prompts 3] [--max-new-tokens 64] [--dtype bfloat16] [--target T --draft D]
        [--draft-quant int8] [--md FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from contextlib import contextmanager


class Clock:
    """Accumulated seconds and calls per phase; phases nest (an inner phase's time is taken
    out of the outer one) so that the shares add up to the wall time."""

    def __init__(self):
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self._stack: list[list] = []

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        self._stack.append([name, 0.0])
        try:
            yield
        finally:
            _, inner = self._stack.pop()
            spent = time.perf_counter() - start
            self.seconds[name] += spent - inner
            self.calls[name] += 1
            if self._stack:
                self._stack[-1][1] += spent

    def wrap(self, name: str, fn):
        def wrapped(*args, **kwargs):
            with self.phase(name):
                return fn(*args, **kwargs)
        return wrapped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rule", default=None)
    parser.add_argument("--K", type=int, default=None)
    parser.add_argument("--L", type=int, default=None)
    parser.add_argument("--stop-below", type=float, default=None)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--dataset", default="humaneval")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--target", default="target")
    parser.add_argument("--draft", default="draft")
    parser.add_argument("--draft-quant", choices=["none", "int8"], default="none")
    parser.add_argument("--md", default=None, help="also write the table to this file")
    args = parser.parse_args(argv)

    from spectr_gbv.gpu_backend.torch_backend import layouts
    from spectr_gbv.gpu_backend.bench.run import machine_description
    from spectr_gbv.gpu_backend.engine.defaults import DEFAULT_K, DEFAULT_L, DEFAULT_RULE
    from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine
    from spectr_gbv.gpu_backend.models.pair import load_pair
    from spectr_gbv.gpu_backend.models.prompts import encode_prompt, load_prompts
    from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
    from spectr_gbv.gpu_backend.engine.stack import ModificationStack
    from spectr_gbv.reference.draft_stopping import ConfidenceStop

    rule, K, L = args.rule or DEFAULT_RULE, args.K or DEFAULT_K, args.L or DEFAULT_L
    pair = load_pair(args.target, args.draft, args.dtype, args.draft_quant)
    prompts = [encode_prompt(pair.tokenizer, t) for t in load_prompts(args.dataset, args.prompts)]
    stop = ConfidenceStop(args.stop_below) if args.stop_below is not None else None
    engine = SpeculativeEngine(pair.target, pair.draft, rule=rule, K=K, L=L,
                               sampling=SamplingConfig(args.temperature), eos_token_ids=pair.eos,
                               draft_stop=stop)
    engine.generate(prompts[0], 8, seed=0)  # warm-up, untimed

    clock = Clock()
    longest_block = 1 + K * L  # a forward over more positions than a block holds is a prompt

    def forward_timer(role, forward):
        def timed(input_ids=None, *a, **kw):
            name = f"{role} prefill (prompt)" if input_ids.shape[-1] > longest_block else f"{role} forward"
            with clock.phase(name):
                return forward(input_ids, *a, **kw)
        return timed

    forwards = {"target": pair.target.forward, "draft": pair.draft.forward}
    pair.target.forward = forward_timer("target", pair.target.forward)
    pair.draft.forward = forward_timer("draft", pair.draft.forward)
    layout_cls = type(engine._layout)
    saved = (layouts.probabilities, layouts.sample_rows, engine.verifier, layout_cls.cut_back,
             ModificationStack.modify, ModificationStack.advance)
    layouts.probabilities = clock.wrap("probabilities (temperature, softmax)", layouts.probabilities)
    layouts.sample_rows = clock.wrap("draft sampling", layouts.sample_rows)
    engine.verifier = clock.wrap("verifier", engine.verifier)
    layout_cls.cut_back = clock.wrap("cache cut back", layout_cls.cut_back)
    ModificationStack.modify = clock.wrap("Algorithm 2 stack", ModificationStack.modify)
    ModificationStack.advance = clock.wrap("Algorithm 2 stack", ModificationStack.advance)
    wall, iterations, tokens = 0.0, 0, 0
    try:
        for p, ids in enumerate(prompts):
            start = time.perf_counter()
            result = engine.generate(ids, args.max_new_tokens, seed=100 + p)
            wall += time.perf_counter() - start
            iterations += result.target_calls
            tokens += result.new_tokens
    finally:
        pair.target.forward, pair.draft.forward = forwards["target"], forwards["draft"]
        (layouts.probabilities, layouts.sample_rows, engine.verifier, layout_cls.cut_back,
         ModificationStack.modify, ModificationStack.advance) = saved

    covered = sum(clock.seconds.values())
    rows = sorted(clock.seconds.items(), key=lambda kv: -kv[1]) + [("other (tree, masks, host reads, Python)",
                                                                     wall - covered)]
    lines = [f"# One iteration of `{rule}` K = {K}, L = {L}" + (f", stop below {args.stop_below}" if stop else "")
             + f" on {pair.description}", "",
             f"{machine_description()}", "",
             f"{len(prompts)} {args.dataset} prompts, {args.max_new_tokens} new tokens each, T = {args.temperature}: "
             f"{tokens} tokens in {iterations} iterations ({tokens / iterations:.2f} tokens per target call), "
             f"wall {wall:.1f} s.  Rows are per iteration (the prompts' prefill rows too, so that the "
             f"shares add up).", "",
             "| phase | calls per iteration | ms per iteration | share of wall time |", "|---|---|---|---|"]
    for name, sec in rows:
        calls = clock.calls.get(name, 0)
        lines.append(f"| {name} | {calls / iterations:.2f} | {1000 * sec / iterations:.1f} | {100 * sec / wall:.1f} % |")
    lines.append(f"| total | | {1000 * wall / iterations:.1f} | 100 % |")
    text = "\n".join(lines)
    print(text, flush=True)
    if args.md:
        with open(args.md, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
