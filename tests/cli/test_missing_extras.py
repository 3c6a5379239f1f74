"""A sub-command that needs an extra which is not installed says so in one line, exit 2.

The light install (numpy, scipy, tqdm, msgspec) lists every sub-command; those whose ``check`` or
``func`` imports torch, transformers, cvxpy, llama_cpp, ... lazily answer
``spectr-gbv SUB: needs torch, which is not installed here: pip install 'spectr-gbv[torch]' ...``
instead of a traceback (cli/main.py ``run_parsed``).  scripts/light_check.sh checks the same in a
bare environment with the built wheel; here the missing module is simulated (``None`` in
``sys.modules``: an import of it raises ModuleNotFoundError).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from spectr_gbv.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]


def _args(importer, certify_what=None):
    def func(_args):
        importer()
        return 0

    return argparse.Namespace(command="certify" if certify_what else "generate", certify_what=certify_what,
                              func=func)


def _one_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("module,advice", [
    ("torch", "pip install 'spectr-gbv[torch]'"),
    ("transformers", "pip install 'spectr-gbv[torch]'"),
    ("cvxpy", "pip install 'spectr-gbv[oracle]'"),
    ("llama_cpp", "pip install 'spectr-gbv[llamacpp]'"),
    ("vllm", "scripts/install.sh --vllm"),
])
def test_a_missing_extra_is_one_line_naming_it(module, advice, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # import module → ModuleNotFoundError
    code = cli_main.run_parsed(_args(lambda: __import__(f"{module}.sub")))
    line = _one_line(capsys)
    assert code == 2
    assert line.startswith(f"spectr-gbv generate: needs {module}, which is not installed here"), line
    assert advice in line, line


def test_the_line_names_the_certify_sub_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli_main.run_parsed(_args(lambda: __import__("torch"), certify_what="verifiers")) == 2
    assert _one_line(capsys).startswith("spectr-gbv certify verifiers: needs torch")


@pytest.mark.parametrize("name", ["spectr_gbv.no_such_module", "numpy.no_such_module", "no_such_package_xyz"])
def test_other_missing_modules_keep_their_traceback(name):
    """Our own module missing, a missing submodule of an installed package, or an unknown
    package: a bug or a broken install, not a missing extra; the exception propagates."""
    def importer():
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    with pytest.raises(ModuleNotFoundError):
        cli_main.run_parsed(_args(importer))


def test_an_installed_package_is_not_called_missing():
    assert cli_main.missing_dependency(ModuleNotFoundError("x", name="numpy.nope")) is None
    assert cli_main.missing_dependency(ModuleNotFoundError("x", name="tqdm")) is None


@pytest.mark.parametrize("argv,module,extra", [
    (["certify", "verifiers", "--quick"], "torch", "torch"),
    (["oracle", "--K", "1", "--L", "2", "--draft", "examples/toy_draft.json", "--target", "examples/toy_target.json"],
     "cvxpy", "oracle"),
])
def test_real_sub_commands_without_the_extra(argv, module, extra):
    """The real sub-command in a fresh process where ``module`` cannot be imported."""
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            f"from spectr_gbv.cli.main import main\nsys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"needs {module}" in lines[0] and f"pip install 'spectr-gbv[{extra}]'" in lines[0], lines[0]
