"""gpu_backend.models.pair: one loader of a draft/target pair, and the tokenizer check (same
token strings for the same ids below V, same special ids).  No download: small in-memory
tokenizers and toy models; ``weights.load_causal_lm`` is replaced."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from spectr_gbv.gpu_backend.models import weights
from spectr_gbv.gpu_backend.models.pair import ModelLoadError, check_same_tokenizer, load_pair  # noqa: E402

V = 12
WORDS = ["<unk>", "<eos>", "def", "fib", "(", "n", ")", ":", "return", "if", "else", "+"]


def _tokenizer(words=WORDS, eos="<eos>"):
    """A real transformers fast tokenizer over ``words`` (id = position), built in memory."""
    model = tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token=eos)


def _one_token_changed(i=7, word="::"):
    words = list(WORDS)
    words[i] = word
    return _tokenizer(words)


def _toy_lm(vocab=V):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config)


def test_equal_tokenizers_pass():
    check_same_tokenizer(_tokenizer(), _tokenizer(), V)


def test_one_differing_token_is_named_with_draft_and_target():
    with pytest.raises(ValueError, match=r"draft d0 and target t0 differ at token id 7: "
                                         r"'::' in the draft's, ':' in the target's"):
        check_same_tokenizer(_one_token_changed(), _tokenizer(), V, "d0", "t0")


def test_a_token_only_one_tokenizer_has_is_a_difference_ids_from_V_up_are_not():
    longer = _tokenizer(WORDS + ["pad"])
    with pytest.raises(ValueError, match="token id 12: no token in the draft's, 'pad' in"):
        check_same_tokenizer(_tokenizer(), longer, V + 1)
    check_same_tokenizer(_tokenizer(), longer, V)  # id 12 has no logit: not compared


def test_a_differing_eos_id_is_a_difference():
    with pytest.raises(ValueError, match="eos_token_id is 1 in the draft's, 9 in the target's"):
        check_same_tokenizer(_tokenizer(), _tokenizer(eos="if"), V)


@pytest.fixture
def loader(monkeypatch):
    """``weights.load_causal_lm`` returning toy models with the tokenizers of ``made``."""
    made = {}

    def load(spec, dtype):
        if spec not in made:
            raise OSError(f"spec={spec!r}: no such model\nsecond line")
        return _toy_lm(), made[spec]

    monkeypatch.setattr(weights, "load_causal_lm", load)
    return made


def test_load_pair_checks_the_tokenizers(loader):
    loader.update(t=_tokenizer(), d=_tokenizer(), odd=_one_token_changed())
    pair = load_pair("t", "d", "float32")
    assert pair.draft is not None and pair.tokenizer is loader["t"] and 1 in pair.eos
    with pytest.raises(ValueError, match="draft odd and target t differ at token id 7"):
        load_pair("t", "odd", "float32")
    assert load_pair("t", None, "float32").draft is None  # no draft: nothing to compare
    with pytest.raises(ModelLoadError, match="draft nope: cannot load the model") as err:
        load_pair("t", "nope", "float32")
    assert (err.value.role, err.value.spec) == ("draft", "nope")
    assert isinstance(err.value.__cause__, OSError)


def test_cli_refuses_different_tokenizers_in_one_line(loader):
    from spectr_gbv.cli.models import load_models
    from spectr_gbv.cli.args import UsageError

    loader.update(t=_tokenizer(), odd=_one_token_changed())
    with pytest.raises(UsageError) as err:
        load_models("t", "odd", "float32")
    message = str(err.value)
    assert message.startswith("--draft odd and --target t: ") and "token id 7" in message
    assert "\n" not in message
    with pytest.raises(UsageError, match="^--target nope: cannot load the model: spec='nope': no such model$"):
        load_models("nope", "odd", "float32")
