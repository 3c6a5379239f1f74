"""The engine on llama.cpp's kernels (gpu_backend/llamacpp): the draft tree fed as llama.cpp
sequences gives, for every draft and depth, the rows an uncached forward of that draft's own
prefix gives; the caches are cut back to the selected path; refusals as on the torch backend.

Model: the embedded "tiny" SmolLM2-135M GGUF (Q4_1), loaded twice (draft and target need
their own caches).  llama.cpp's CPU kernels gave bit-identical logits for one token sequence
fed in one batch or split across calls, and for tree nodes versus uncached prefixes, on this
machine; the comparisons allow 1e-5 absolute on probabilities (float32 rounding of a
different batch split), far below any deviation a certificate resolves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install.sh installs it)")

from spectr_gbv.gpu_backend.decoding.sampling import SamplingConfig, probabilities  # noqa: E402
from spectr_gbv.gpu_backend.engine.inputs import NonFiniteError  # noqa: E402
from spectr_gbv.gpu_backend.engine.speculative import SpeculativeEngine  # noqa: E402
from spectr_gbv.gpu_backend.engine.plain import autoregressive_generate  # noqa: E402
from spectr_gbv.gpu_backend.llamacpp.model import Feed, LlamaCppModel  # noqa: E402
from spectr_gbv.gpu_backend.llamacpp.backend import check_llamacpp_pair  # noqa: E402
from spectr_gbv.gpu_backend.llamacpp.pair import load_llamacpp_pair  # noqa: E402

pytestmark = pytest.mark.models

PROMPT = [1, 504, 3575, 282, 4649, 314]  # "<|im_start|>The capital of France is" ids, any will do
ATOL = 1e-5


@pytest.fixture(scope="module")
def pair():
    try:
        return load_llamacpp_pair("tiny", "tiny", threads=2, n_ctx=512)
    except FileNotFoundError as err:  # data wheels not installed
        pytest.skip(str(err))


def _uncached_rows(model: LlamaCppModel, prefix: list[int], sampling: SamplingConfig) -> torch.Tensor:
    model.clear()
    row = probabilities(model.forward_last(prefix, 0)[None], sampling)[0]
    model.clear()
    return row


@pytest.mark.parametrize("K,L,seed", [(1, 4, 3), (2, 3, 1), pytest.param(3, 3, 3, marks=pytest.mark.long)])
def test_tree_rows_are_each_drafts_uncached_rows(pair, K, L, seed):
    """Every draft row and every target row the verifier got (including the bonus row) equals
    the model's uncached row after the context and that draft's own tokens."""
    t_s, d_s = SamplingConfig(1.0), SamplingConfig(3.0)  # a hot draft: the K drafts diverge
    records = []
    engine = SpeculativeEngine(pair.target, pair.draft, rule="sd" if K == 1 else "spectr", K=K, L=L,
                               sampling=t_s, draft_sampling=d_s, backend=pair.backend)
    engine.generate(PROMPT, 12, seed=seed, on_iteration=records.append)
    assert len(records) >= 3
    if K == 3:  # seed 3 accepts a draft other than the first (the case that once broke)
        assert any(int(r.verdict.tau[0]) > 0 and int(r.verdict.selected[0]) > 0 for r in records)
    split = 0
    for rec in records:
        S = rec.draft_tokens.shape[1]
        split += len({tuple(rec.draft_tokens[k, :1].tolist()) for k in range(K)}) > 1
        for k in range(K):
            path = rec.draft_tokens[k].tolist()
            for d in range(S + 1):
                want = _uncached_rows(pair.target, rec.context + path[:d], t_s)
                got = rec.target_probs_raw[k, d]
                assert float((got - want).abs().max()) <= ATOL, (k, d)
                if d < S:
                    want_d = _uncached_rows(pair.draft, rec.context + path[:d], d_s)
                    assert float((rec.draft_probs[k, d] - want_d).abs().max()) <= ATOL, (k, d)
    if K > 1:
        assert split >= 1  # some iteration's drafts really branched


@pytest.mark.parametrize("K", [1, 3])
def test_cut_back_leaves_the_selected_path_on_sequence_zero(pair, K):
    """After each iteration both caches hold their ``t_len`` / ``d_len`` first context
    positions on sequence 0 only: K = 1 keeps the accepted nodes (t_len = n + τ, d_len =
    n + min(τ, S − 1)); K > 1 drops every node (t_len = d_len = n, the accepted tokens are
    fed again)."""
    lengths = []
    engine = SpeculativeEngine(pair.target, pair.draft, rule="spectr", K=K, L=3,
                               sampling=SamplingConfig(1.0), draft_sampling=SamplingConfig(3.0), backend=pair.backend)
    layout = engine._layout
    real_cut = layout.cut_back

    def cut_back(state, row, tau):
        n = len(state.context)
        real_cut(state, row, tau)
        want = (n + tau, n + min(tau, state.S - 1)) if K == 1 else (n, n)
        lengths.append((want, (state.t_len, state.d_len),
                        [pair.target.seq_pos_max(s) for s in range(K)],
                        [pair.draft.seq_pos_max(s) for s in range(K)]))

    layout.cut_back = cut_back
    engine.generate(PROMPT, 12, seed=5)
    assert len(lengths) >= 3
    for want, got, t_pos, d_pos in lengths:
        assert got == want
        assert t_pos == [got[0] - 1] + [-1] * (K - 1)
        assert d_pos == [got[1] - 1] + [-1] * (K - 1)


def test_draft_equal_to_target_accepts_every_draft(pair):
    """Draft rows equal to the target rows: SD accepts every block in full (τ = L) until the
    last, capped block."""
    engine = SpeculativeEngine(pair.target, pair.draft, rule="sd", K=1, L=4,
                               sampling=SamplingConfig(0.8), backend=pair.backend)
    result = engine.generate(PROMPT, 21, seed=0)
    assert result.taus_raw[:-1] == [4] * (len(result.taus_raw) - 1)
    assert result.new_tokens == 21 or result.stop_reason == "eos"


def test_plain_sampling_is_seeded_and_matches_the_rows(pair):
    """The llama.cpp plain sampler is reproducible per seed, and its first token is the
    inverse-CDF draw of the run generator's first uniform on the uncached row."""
    s = SamplingConfig(1.0)
    a = autoregressive_generate(pair.target, PROMPT, 8, s, seed=11, backend=pair.backend)
    b = autoregressive_generate(pair.target, PROMPT, 8, s, seed=11, backend=pair.backend)
    assert a.tokens == b.tokens and len(a.tokens) == 8
    from spectr_gbv.gpu_backend.engine.inputs import seeded_generator

    from spectr_gbv.gpu_backend.decoding.sampling import inverse_cdf_rows

    row = _uncached_rows(pair.target, PROMPT, s)
    u = torch.rand(1, generator=seeded_generator(11, "cpu"), dtype=torch.float64)
    assert a.tokens[0] == int(inverse_cdf_rows(row[None], u)[0])


def test_non_finite_target_rows_are_refused(pair, monkeypatch):
    """NaN logits from llama.cpp become a NonFiniteError naming the target; nothing emitted."""
    engine = SpeculativeEngine(pair.target, pair.draft, rule="sd", K=1, L=3,
                               sampling=SamplingConfig(1.0), backend=pair.backend)
    real = pair.target.decode

    def nan_decode(feed):
        out = real(feed)
        if len(feed.logits) > 1:  # the scoring batch
            out[-1, :] = float("nan")
        return out

    monkeypatch.setattr(pair.target, "decode", nan_decode)
    with pytest.raises(NonFiniteError, match="target model"):
        engine.generate(PROMPT, 6, seed=0)


def test_refusals(pair):
    with pytest.raises(ValueError, match=r"prompt_ids: token id 49152 outside \[0, 49152\)"):
        autoregressive_generate(pair.target, [1, 49_152], 2, backend=pair.backend)
    with pytest.raises(ValueError, match="n_seq_max=8"):
        SpeculativeEngine(pair.target, pair.draft, rule="spectr", K=9, L=2, backend=pair.backend)
    with pytest.raises(ValueError, match="token id 70000 outside"):
        pair.target.decode(Feed((70_000,), (0,), ((0,),), (0,)))
    with pytest.raises(ValueError, match=r"sequence ids \(8,\) outside"):
        pair.target.decode(Feed((5,), (0,), ((8,),), (0,)))
    pair.target.clear()
    with pytest.raises(ValueError, match=r"cache \(512 cells\) is too short for 6 prompt and 507 new tokens"):
        autoregressive_generate(pair.target, PROMPT, 507, backend=pair.backend)
    with pytest.raises(ValueError, match=r"llama.cpp cache \(512 cells\) is too short for this generation"):
        SpeculativeEngine(pair.target, pair.draft, rule="spectr", K=2, L=4, backend=pair.backend).generate(PROMPT, 500)
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        LlamaCppModel("/no/such/file.gguf")
    with pytest.raises(ValueError, match="n_seq_max must be an integer in"):
        LlamaCppModel(pair.target.path, n_seq_max=0)


class _FakeVocab:
    def __init__(self, texts, special, V=None):
        self.texts, self.special = texts, special
        self.V = V or len(texts)
        self.name = "fake"
        self.path = object()

    def vocabulary(self):
        return self.texts

    def special_ids(self):
        return self.special


def test_pair_check_names_the_first_difference(monkeypatch):
    import spectr_gbv.gpu_backend.llamacpp.backend as b

    monkeypatch.setattr(b, "LlamaCppModel", _FakeVocab)  # the fakes pass as llama.cpp models
    sp = {"eos": 2, "bos": 1, "eot": -1}
    assert check_llamacpp_pair(_FakeVocab([b"a", b"b"], sp), _FakeVocab([b"a", b"b"], sp)) == 2
    with pytest.raises(ValueError, match="differ at token id 1: b'c' in the draft's, b'b'"):
        check_llamacpp_pair(_FakeVocab([b"a", b"c"], sp), _FakeVocab([b"a", b"b"], sp))
    with pytest.raises(ValueError, match="special ids"):
        check_llamacpp_pair(_FakeVocab([b"a"], {**sp, "eos": 0}), _FakeVocab([b"a"], sp))
    with pytest.raises(ValueError, match="has 3 logits but target fake has 2"):
        check_llamacpp_pair(_FakeVocab([b"a"], sp, V=3), _FakeVocab([b"a", b"b"], sp))
    with pytest.raises(ValueError, match="draft is not"):
        check_llamacpp_pair(object(), _FakeVocab([b"a"], sp))


def test_generate_runs_on_llamacpp_by_default_for_gguf_models(capsys, tmp_path, monkeypatch):
    """``spectr-gbv generate`` on the embedded (GGUF) models picks llama.cpp; draft = target, so
    every block is accepted in full (K = 2: the accepted tokens are fed again, still τ = L)."""
    from spectr_gbv.cli import main as cli_main

    monkeypatch.chdir(tmp_path)
    argv = ["generate", "--prompt", "Say hi.", "--target", "tiny", "--draft", "tiny", "--max-new-tokens", "8",
            "--no-stream", "--threads", "2", "--no-auto", "--rule", "spectr", "--K", "2", "--L", "3",
            "--seed", "0", "--temperature", "0"]
    assert cli_main.main(argv) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("rule "))
    assert "gguf (llama.cpp)" in line and "K=2  L=3" in line
    assert "block efficiency 4.00" in out or "stop: eos" in line


def test_backend_resolution():
    from spectr_gbv.gpu_backend.llamacpp.pair import resolve_backend

    assert resolve_backend("auto", "tiny", "tiny") == "llama.cpp"
    assert resolve_backend("auto", "tiny", None) == "llama.cpp"
    assert resolve_backend("auto", "some/hub-model", "tiny") == "torch"
    assert resolve_backend("torch", "tiny", "tiny") == "torch"
    with pytest.raises(ValueError, match="--backend llama.cpp runs GGUF files .* not 'some/hub-model'"):
        resolve_backend("llama.cpp", "tiny", "some/hub-model", name="--backend")
    with pytest.raises(ValueError, match="--backend must be one of auto, torch, llama.cpp"):
        resolve_backend("cuda", "tiny", "tiny", name="--backend")


def test_autoconfig_times_the_refed_tokens(pair, tmp_path, monkeypatch):
    """K > 1 on llama.cpp re-feeds up to L accepted tokens (llamacpp.layout): the costs are
    timed over 1 + K·L + L target tokens and 1..L + 1 draft tokens, and marked so."""
    from spectr_gbv.gpu_backend.tuning import cache as tuning_cache
    from spectr_gbv.gpu_backend.tuning.autoconfig import PairSpec, configure

    monkeypatch.setattr(tuning_cache, "cache_path", lambda: tmp_path / "autoconfig.json")
    auto = configure(pair.target, pair.draft, None, PairSpec("tiny.gguf", "tiny.gguf", "gguf"), "spectr",
                     SamplingConfig(0.7), Ks=(1, 2), Ls=(1, 2, 3), fallback_prompt=PROMPT, log=lambda line: None, backend=pair.backend)
    c = auto.costs
    assert c.refeed_accepted and c.target_n == (1, 2, 4, 8, 10) and c.draft_n == (1, 2, 3, 4)
    assert {(p.K, p.L) for p in auto.choice.candidates} == {(K, L) for K in (1, 2) for L in (1, 2, 3)}
    # the costs are filed under the llama.cpp build they were timed on: another build times again
    assert pair.target.build in auto.costs_key and "extra weight buffers" in pair.target.build
    calls = []
    monkeypatch.setattr(pair.target, "build", "llama-cpp-python 9.9; built with AVX2; extra weight buffers on")
    configure(pair.target, pair.draft, None, PairSpec("tiny.gguf", "tiny.gguf", "gguf"), "spectr",
              SamplingConfig(0.7), Ks=(1, 2), Ls=(1, 2, 3), fallback_prompt=PROMPT, log=calls.append, backend=pair.backend)
    assert any("timing the models" in line for line in calls)


def test_extra_buffers_are_off_where_the_build_has_amx():
    """llama.cpp 0.3.36's AMX buffer segfaults on multi-token batches
    (docs/upstream/llamacpp_amx_segfault.md): off when the build reports AMX_INT8 = 1."""
    from spectr_gbv.gpu_backend.llamacpp.model import default_extra_buffers

    assert default_extra_buffers("CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |") is False
    assert default_extra_buffers("CPU : AVX2 = 1 | AVX512 = 1 | REPACK = 1 |") is True
