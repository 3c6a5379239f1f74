"""certify/engine/generate.py without models: a black-box sampler of a synthetic chain (V = 30,
a Dirichlet law per prefix), seeded per sample; ``certify_generate`` passes the exact sampler
(N = 300 sequences of 6 tokens, α = 1e-3) and fails the one sampling at 1.3·T (pooled
probability-order p < 1e-6), in under 5 s.  (A server through its own API: certify/endpoint/ and
tests/certify/endpoint/.)"""

from __future__ import annotations

import numpy as np
import pytest

from spectr_gbv.certify.engine.generate import certify_generate, softmax64, text_table

V = 30


def law(prefix) -> np.ndarray:
    r = np.random.default_rng(abs(hash(tuple(prefix))) % (2**32))
    return r.dirichlet(np.full(V, 0.4))


def laws(prompt, tokens):
    return np.array([law(list(prompt) + list(tokens[:j])) for j in range(len(tokens))])


class Sampler:
    """``sample(prompt_ids, n_new, seed)``: the chain's law at temperature ``temp``, one
    generator per seed; counts its calls."""

    def __init__(self, temp: float):
        self.temp, self.requests = temp, 0

    def __call__(self, prompt_ids, n_new, seed):
        self.requests += 1
        rng = np.random.default_rng(seed)
        ids, out = list(prompt_ids), []
        for _ in range(n_new):
            q = law(ids) ** (1 / self.temp)
            t = int(rng.choice(V, p=q / q.sum()))
            out.append(t)
            ids.append(t)
        return out


@pytest.mark.parametrize("temp,ok", [(1.0, True), (1.3, False)])
def test_exact_passes_and_tempered_fails(temp, ok):
    eng = Sampler(temp)
    cert = certify_generate(eng, laws, [[1, 2, 3]], 6, 300, alpha=1e-3, tolerance=0.0, name=f"T={temp}")
    assert cert.passed is ok and cert.test.n_tokens == 1800 and eng.requests == 300
    if not ok:
        assert cert.test.pooled("probability").pvalue < 1e-6
    assert 0.05 < cert.test.detectable < 0.12  # 1,800 PITs at α/6
    assert "T=" in text_table([cert])


def test_bad_inputs():
    with pytest.raises(ValueError, match="returned 3 tokens"):
        certify_generate(lambda p, n, s: [0, 1, 2], laws, [[1]], 2, 1)
    with pytest.raises(ValueError, match="n_samples"):
        certify_generate(lambda p, n, s: [0], laws, [[1]], 2, 0)
    with pytest.raises(ValueError, match="shape"):
        certify_generate(lambda p, n, s: [0, 1], lambda p, t: np.ones((1, V)) / V, [[1]], 2, 1)
    np.testing.assert_allclose(softmax64(np.array([[0.0, np.log(3.0)]]), 1.0), [[0.25, 0.75]], atol=1e-15)


def test_cli_engine_name_errors(capsys):
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify", "engine", "vllm-engine"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'vllm-engine'" in err and "transformers" in err and "vllm" in err
    assert cli_main.main(["certify", "engine", "transformers", "--rules", "sd"]) == 2
    assert "unrecognized arguments: --rules" in capsys.readouterr().err
    assert cli_main.main(["certify", "engine", "vllm", "--temperature", "0"]) == 2
    assert "--temperature" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--engine", "vllm"], ["--third-party", "vllm"], ["--quick"],
                                  ["--engine-endpoint", "http://127.0.0.1:1"]])
def test_the_one_command_form_is_gone(argv, capsys):
    """``certify --engine``, ``--third-party``, ``--quick`` (the one-command form, past its release)
    are refused with argparse's one line (exit 2), before anything runs."""
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify", *argv]) == 2
    err = capsys.readouterr().err
    assert ("unrecognized arguments" in err or "invalid choice" in err) and len(err.strip().splitlines()) == 1


def test_certify_alone_lists_the_sub_commands(capsys):
    from spectr_gbv.cli import main as cli_main

    assert cli_main.main(["certify"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in ("verifiers", "samplers", "engine", "our-engine", "endpoint"))
