"""The engine modes ``spectr-gbv certify engine NAME`` runs: each engine × speculation mode,
its lossless control (speculation off) and its negative controls, on the embedded "tiny"
SmolLM2-135M-Instruct at T = ``DEFAULT_TEMPERATURE``.

A mode builds ``(sample, laws, stats)`` for ``certify_generate`` from models loaded once per
engine (``Models``).  ``expect``: "PASS" (a lossless engine or control) or "FAIL" (a negative
control: the certificate must catch it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ENGINES = ("transformers", "llama-cpp-python", "vllm", "ours", "ours-llama.cpp")
# vLLM's n-gram speculation as the modes run it (k tokens, n-grams of 1-2 tokens)
VLLM_NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2, "prompt_lookup_min": 1}
# one prompt (the first tokens then share one law: the G-test applies) with repetitions, so
# that n-gram (prompt lookup) drafts find matches
DEFAULT_PROMPT = ("The cat sat on the mat. The dog sat on the rug. The cat sat on the mat. "
                  "The dog sat on the")
DEFAULT_TEMPERATURE = 1.0
DEFAULT_NEW_TOKENS = 16
ASSISTANT_FLATTEN = 1.5  # the transformers assistant's logits are divided by this (Models.hf_assistant)


@dataclass(frozen=True)
class Mode:
    """One row: ``name``, ``engine``, ``kind`` ("speculative", "lossless control", "negative
    control"), ``expect`` ("PASS" / "FAIL"), ``build(models) -> (sample, laws, stats)``."""

    name: str
    engine: str
    kind: str
    expect: str
    build: Callable


class Models:
    """The models of one engine's modes, loaded on first use (quiet, CPU, 2 threads)."""

    def __init__(self, temperature: float = DEFAULT_TEMPERATURE, threads: int = 1, log=None):
        self.T = float(temperature)
        self.threads, self.log = int(threads), log
        self._cache: dict = {}

    def _get(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def hf(self, dtype: str = "float32"):
        """(model, tokenizer) of the embedded tiny model through transformers in ``dtype``."""
        from spectr_gbv.gpu_backend.models.weights import load_causal_lm

        return self._get(("hf", dtype), lambda: load_causal_lm("tiny", dtype=dtype))

    def gguf(self):
        """The tiny model's joined GGUF in the model cache (``llamacpp.pair.gguf_path``; the
        cache keeps it while other processes read it, ``models.weights``)."""
        from spectr_gbv.gpu_backend.llamacpp.pair import gguf_path

        return self._get("gguf", lambda: gguf_path("tiny"))

    def llama(self, draft=None, cls=None, key="plain"):
        from spectr_gbv.certify.engine.llama_cpp_python import load_llama

        return self._get(("llama", key), lambda: load_llama(self.gguf(), draft=draft, cls=cls,
                                                                       threads=self.threads))

    def llama_reference(self):
        from spectr_gbv.certify.engine.llama_cpp_python import load_llama
        from spectr_gbv.certify.engine.references import LlamaCppReference

        return self._get("llama-ref", lambda: LlamaCppReference(
            load_llama(self.gguf(), logits_all=True, threads=self.threads), self.T))

    def hf_assistant(self):
        """The assistant of the transformers modes: the tiny model in bfloat16 with its logits
        divided by ``ASSISTANT_FLATTEN`` (a forward hook): a draft that differs from the target,
        so that its candidates are rejected at a measurable rate and a rule that keeps them all
        changes the law (with the target's own weights as draft, every candidate is kept anyway
        up to bfloat16 rounding, and "every draft kept" cannot be told from plain sampling)."""
        def make():
            model = self.hf("bfloat16")[0]

            def flatten(module, args, output):
                output.logits = output.logits / ASSISTANT_FLATTEN
                return output
            model.register_forward_hook(flatten)
            return model
        return self._get("hf-assistant", make)

    def hf_folder(self) -> str:
        """The float32 safetensors folder of the embedded tiny model (what vLLM loads)."""
        from spectr_gbv.gpu_backend.models.weights import embedded_folder

        return self._get("hf-folder", lambda: str(embedded_folder("tiny", "float32")))

    def hf_reference(self):
        from spectr_gbv.certify.engine.references import TransformersReference

        return self._get("hf-ref", lambda: TransformersReference(self.hf()[0], self.T))

    def llamacpp_pair(self):
        from spectr_gbv.gpu_backend.llamacpp.pair import load_llamacpp_pair

        return self._get("lcpp-pair", lambda: load_llamacpp_pair("tiny", "tiny", threads=2, n_ctx=512))

    def prompt_ids(self) -> list[int]:
        """``DEFAULT_PROMPT``'s ids by llama.cpp's tokenizer of the GGUF file (no BOS; the
        transformers copy of the embedded model is converted from the same file, same ids;
        transformers' own reading of a GGUF tokenizer takes minutes)."""
        from spectr_gbv.certify.engine.llama_cpp_python import load_llama

        llama = self._get("tokenizer", lambda: load_llama(self.gguf(), n_ctx=64))
        return [int(t) for t in llama.tokenize(DEFAULT_PROMPT.encode(), add_bos=False)]


# -- builders ---------------------------------------------------------------------------------

def _tf(models: Models, *, assistant=False, lookup=None, T=None, hook=None):
    from spectr_gbv.certify.engine.transformers_generate import TransformersGenerateEngine

    from spectr_gbv.certify.engine.references import TransformersReference

    model = models.hf()[0]
    draft = models.hf_assistant() if assistant else None
    eng = TransformersGenerateEngine(model, T or models.T, assistant_model=draft,
                                     prompt_lookup_num_tokens=lookup,
                                     hook=(lambda: hook(model)) if hook else None)
    if draft is not None:  # the assistant's law (its hook included) at the engine's T: the leak test
        eng.draft_laws = TransformersReference(draft, T or models.T)
    return eng, models.hf_reference(), eng.stats


def _tf_hooked(defect, **kw):
    from spectr_gbv.certify.engine.controls import transformers_hook

    return lambda m: _tf(m, hook=lambda model: transformers_hook(defect, model), **kw)


def _lcpp(models: Models, *, draft=True, defect=None, T=None, penalty=1.0):
    from spectr_gbv.certify.engine.controls import llama_class
    from spectr_gbv.certify.engine.llama_cpp_python import LlamaCppPythonEngine, prompt_lookup

    key = f"{draft}-{defect}"
    llama = models.llama(draft=prompt_lookup() if draft else None,
                         cls=llama_class(defect) if defect else None, key=key)
    eng = LlamaCppPythonEngine(llama, T or models.T, repeat_penalty=penalty)
    return eng, models.llama_reference(), eng.stats


def _vllm(models: Models, *, spec=None, draft_model=False, control=None, T=None):
    from spectr_gbv.certify.engine.vllm_engine import VllmGenerateEngine

    folder = models.hf_folder()
    if draft_model:
        spec = {"model": folder, "num_speculative_tokens": 4}
    eng = VllmGenerateEngine(folder, T or models.T, speculative_config=spec, control=control,
                             threads=models.threads, log=models.log)
    return eng, models.hf_reference(), eng.stats


def _ours(models: Models, *, backend="torch", rule="sd", K=1, L=4, planted=None, T=None):
    from spectr_gbv.certify.engine.controls import planted_verifier
    from spectr_gbv.certify.engine.ours import OursEngine

    verifier = None
    if planted:
        rule, verifier = planted_verifier(planted)
    engine_backend = None  # the engine's default: torch
    if backend == "torch":
        target = draft = models.hf()[0]
        ref = models.hf_reference()
    else:
        pair = models.llamacpp_pair()
        target, draft, engine_backend = pair.target, pair.draft, pair.backend
        ref = models._get("lcpp-ref", lambda: _LlamaCppModelReference(pair.target, models.T))
    eng = OursEngine(target, draft, T or models.T, draft_temperature=1.5 * models.T, rule=rule, K=K, L=L,
                     verifier=verifier, backend=engine_backend)
    if backend == "torch":  # the draft: the target at 1.5 T, its law known (the leak test)
        from spectr_gbv.certify.engine.references import TransformersReference

        eng.draft_laws = TransformersReference(target, 1.5 * models.T)
    return eng, ref, eng.stats


class _LlamaCppModelReference:
    """Reference laws from the project's own llama.cpp binding (``LlamaCppModel``): one
    teacher-forced decode from an empty cache (``llamacpp.costs.teacher_forced_rows``)."""

    def __init__(self, model, temperature):
        self.model, self.T = model, float(temperature)

    def __call__(self, prompt_ids, tokens):
        from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig
        from spectr_gbv.gpu_backend.llamacpp.costs import teacher_forced_rows

        rows = teacher_forced_rows(self.model, list(prompt_ids), list(tokens), SamplingConfig(self.T))
        p = rows.double().numpy()
        return p / p.sum(-1, keepdims=True)


def modes(engine: str) -> list[Mode]:
    """The modes of ``engine`` (one of ``ENGINES``).

    Raises:
        ValueError: unknown engine.
    """
    S, C, N = "speculative", "lossless control", "negative control"
    table = {
        "transformers": [
            Mode("transformers assistant_model (tiny bf16, logits / 1.5)", "transformers", S, "PASS",
                 lambda m: _tf(m, assistant=True)),
            Mode("transformers prompt_lookup_num_tokens=4", "transformers", S, "PASS", lambda m: _tf(m, lookup=4)),
            Mode("transformers no speculation", "transformers", C, "PASS", lambda m: _tf(m)),
            Mode("transformers assistant at T x 1.1", "transformers", N, "FAIL",
                 lambda m: _tf(m, assistant=True, T=1.1 * m.T)),
            Mode("transformers prompt lookup, logits one row late", "transformers", N, "FAIL",
                 _tf_hooked("logits-position", lookup=4)),
            Mode("transformers assistant, every draft kept", "transformers", N, "FAIL",
                 _tf_hooked("draft-kept", assistant=True)),
        ],
        "llama-cpp-python": [
            Mode("llama-cpp-python prompt lookup", "llama-cpp-python", S, "PASS", lambda m: _lcpp(m)),
            Mode("llama-cpp-python no speculation", "llama-cpp-python", C, "PASS", lambda m: _lcpp(m, draft=False)),
            Mode("llama-cpp-python draft kept when it differs", "llama-cpp-python", N, "FAIL",
                 lambda m: _lcpp(m, defect="draft-kept")),
            Mode("llama-cpp-python at T x 1.1", "llama-cpp-python", N, "FAIL", lambda m: _lcpp(m, T=1.1 * m.T)),
            Mode("llama-cpp-python repeat_penalty 1.3", "llama-cpp-python", N, "FAIL",
                 lambda m: _lcpp(m, penalty=1.3)),
        ],
        "vllm": [
            Mode("vllm n-gram (k=4)", "vllm", S, "PASS", lambda m: _vllm(m, spec=VLLM_NGRAM)),
            Mode("vllm draft model (the same model, k=4)", "vllm", S, "PASS", lambda m: _vllm(m, draft_model=True)),
            Mode("vllm no speculation", "vllm", C, "PASS", lambda m: _vllm(m)),
            Mode("vllm n-gram, every draft kept", "vllm", N, "FAIL",
                 lambda m: _vllm(m, spec=VLLM_NGRAM, control="draft-kept")),
            Mode("vllm n-gram at T x 1.1", "vllm", N, "FAIL", lambda m: _vllm(m, spec=VLLM_NGRAM, T=1.1 * m.T)),
        ],
        "ours": [
            Mode("ours sd K=1 L=4 (torch)", "ours", S, "PASS", lambda m: _ours(m)),
            Mode("ours spectr K=2 L=4 (torch)", "ours", S, "PASS", lambda m: _ours(m, rule="spectr", K=2)),
            Mode("ours planted_sd_shared_uniform (torch)", "ours", N, "FAIL",
                 lambda m: _ours(m, planted="planted_sd_shared_uniform", L=8)),
            Mode("ours sd at T x 1.1 (torch)", "ours", N, "FAIL", lambda m: _ours(m, T=1.1 * m.T)),
        ],
        "ours-llama.cpp": [
            Mode("ours sd K=1 L=4 (llama.cpp)", "ours-llama.cpp", S, "PASS", lambda m: _ours(m, backend="llama.cpp")),
            Mode("ours sd at T x 1.1 (llama.cpp)", "ours-llama.cpp", N, "FAIL",
                 lambda m: _ours(m, backend="llama.cpp", T=1.1 * m.T)),
        ],
    }
    if engine not in table:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return table[engine]


# N per mode of each engine: what finishes within ~15 minutes per mode on 2 shared CPU cores
# (docs/engines.md: measured seconds per sample and the power it buys); ours: 100, where its
# shared-uniform control is caught with power ≥ 0.99 (at 40 it was not); transformers: 60, where
# its "assistant at T x 1.1" control is (at 40 it was not): benchmarks/ENGINE_CONTROL_POWER.md
DEFAULT_SAMPLES = {"llama-cpp-python": 200, "transformers": 60, "vllm": 200, "ours": 100, "ours-llama.cpp": 100}
QUICK_SAMPLES = 20


@dataclass
class ModeResult:
    """A mode and its certificate (``certify.generate.GenerateCertificate``), or the error that
    stopped it (one line).  ``as_expected``: PASS for a lossless mode, FAIL for a negative
    control."""

    mode: Mode
    cert: object = None
    error: str = ""

    @property
    def verdict(self) -> str:
        return "ERROR" if self.cert is None else self.cert.verdict

    @property
    def as_expected(self) -> bool:
        return self.cert is not None and self.cert.verdict == self.mode.expect


def run_modes(engine: str, n_samples: int = 200, n_new: int = DEFAULT_NEW_TOKENS,
              alpha: float = 1e-3, seed: int = 0, names=None, progress=None, log=None,
              temperature: float = DEFAULT_TEMPERATURE, mode_list=None, threads: int = 1) -> list[ModeResult]:
    """Certify every mode of ``engine`` (or those whose name contains one of ``names``).

    Args:
        mode_list: the modes to run instead of ``modes(engine)``.
        threads: CPU threads of every model (llama.cpp, vLLM's worker; torch's are the caller's).
        n_samples, n_new, alpha, seed: as ``certify_generate`` (one α per mode).
        progress: optional callable receiving each ``ModeResult`` when done.
        log: optional callable receiving progress lines.
    Returns:
        one ``ModeResult`` per mode run (a mode whose engine cannot be built or run reports
        its error instead of a certificate).
    """
    from spectr_gbv.certify.engine.generate import certify_generate

    models = Models(temperature, threads=threads, log=log)
    prompt = models.prompt_ids()
    out = []
    for mode in (mode_list if mode_list is not None else modes(engine)):
        if names and not any(n in mode.name for n in names):
            continue
        try:
            sample, laws, stats = mode.build(models)
            drafts = sample.drafts if getattr(sample, "gives_drafts", False) else None
            cert = certify_generate(sample, laws, [prompt], n_new, n_samples, alpha=alpha, seed=seed,
                                    name=mode.name, stats=stats, drafts=drafts,
                                    draft_laws=getattr(sample, "draft_laws", None), log=log)
            res = ModeResult(mode, cert)
        except (ValueError, RuntimeError, OSError, ImportError, TypeError, AttributeError) as err:
            res = ModeResult(mode, None, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        out.append(res)
        if progress is not None:
            progress(res)
    return out
