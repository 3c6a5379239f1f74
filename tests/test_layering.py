"""The package's layering, read from the source (every import, those inside functions too):

- no module imports a module that imports it back, directly or through others (a circle);
- inside gpu_backend/, no folder imports a folder that imports it back, and each folder imports
  only folders below it in ``GPU_BACKEND_LAYERS`` (no arrow back up);
- the top folders keep their order: reference → oracle → proofs_check / gpu_backend → certify →
  cli (``TOP_LAYERS``; a folder imports only folders of earlier layers);
- inside certify/, the sub-command folders import only the shared modules and folders below them
  in ``CERTIFY_LAYERS`` (the endpoint's local references reach down into engine/'s adapters);
- the engine (engine/) names no backend folder: it is handed one (``decoding.backend.Backend``).

Each check was seen to fail on a planted import (a function-local import of the layer above
added to a module, then removed).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("reference", "oracle", "proofs_check", "gpu_backend", "certify", "cli")
# a folder may import only folders of earlier entries (and itself)
TOP_LAYERS = (("reference",), ("oracle",), ("proofs_check", "gpu_backend"), ("certify",), ("cli",))
CERTIFY_LAYERS = (".", "verifiers", "samplers", "engine", "our_engine", "endpoint", "log")
GPU_BACKEND_LAYERS = ("verifiers", "models", "decoding", "torch_backend", "llamacpp", "engine", "tuning", ".",
                      "bench", "adapters")


def _imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, "file:line") for every spectr_gbv import."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in TOP:
            continue
        src = ".".join(rel.with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spectr_gbv."):
                base = node.module.split(".")[1:]
                for alias in node.names:
                    sub = ROOT.joinpath(*base, alias.name)
                    is_module = sub.with_suffix(".py").is_file() or sub.is_dir()
                    targets.append(".".join(base + [alias.name] if is_module else base))
            elif isinstance(node, ast.Import):
                targets += [".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("spectr_gbv.")]
            out += [(src, t, f"{rel}:{node.lineno}") for t in targets]
    return out


def _folder(module: str) -> str:
    """'gpu_backend.torch_backend.kv' → 'gpu_backend.engine'; a package's own name stays."""
    path = ROOT.joinpath(*module.split("."))
    return module if path.is_dir() else module.rsplit(".", 1)[0]


IMPORTS = _imports()


def test_the_scan_sees_the_package():
    """The scan is not empty and resolves function-local imports (one known each way)."""
    assert len(IMPORTS) > 400
    assert any(s == "gpu_backend.generate" and t == "gpu_backend.tuning.recheck" for s, t, _ in IMPORTS)


def test_no_module_circle():
    g = nx.DiGraph((s, t) for s, t, _ in IMPORTS if s != t)
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], f"module circles: {cycles[:5]}"


def _sub_folder(module: str, top: str) -> str | None:
    """The folder of ``module`` inside the top folder ``top`` ("." for the top folder's own
    modules), or None for a module elsewhere."""
    parts = _folder(module).split(".")
    if parts[0] != top:
        return None
    return parts[1] if len(parts) > 1 else "."


@pytest.mark.parametrize("top,layers", [("gpu_backend", GPU_BACKEND_LAYERS), ("certify", CERTIFY_LAYERS)])
def test_sub_folders_have_no_circle_and_no_arrow_up(top, layers):
    rank = {name: i for i, name in enumerate(layers)}
    up, edges = [], set()
    for s, t, where in IMPORTS:
        a, b = _sub_folder(s, top), _sub_folder(t, top)
        if a is None or b is None or a == b:
            continue
        assert a in rank and b in rank, f"{where}: a {top} folder not in its layers ({a}, {b})"
        edges.add((a, b))
        if rank[b] > rank[a]:
            up.append(f"{where}: {top}/{a} imports {top}/{b}")
    assert list(nx.simple_cycles(nx.DiGraph(edges))) == []
    assert up == [], "\n".join(up)


def test_top_folders_keep_their_order():
    rank = {name: i for i, layer in enumerate(TOP_LAYERS) for name in layer}
    up = [f"{where}: {s.split('.')[0]} imports {t.split('.')[0]}" for s, t, where in IMPORTS
          if t.split(".")[0] in rank and rank[t.split(".")[0]] > rank[s.split(".")[0]]]
    assert up == [], "\n".join(up)


@pytest.mark.parametrize("folder,backend_folder", [
    ("gpu_backend.engine.", "gpu_backend.llamacpp"), ("gpu_backend.tuning.", "gpu_backend.llamacpp"),
    ("gpu_backend.decoding.", "gpu_backend.llamacpp"), ("gpu_backend.decoding.", "gpu_backend.torch_backend")])
def test_the_engine_names_no_backend_folder(folder, backend_folder):
    named = [where for s, t, where in IMPORTS if s.startswith(folder) and t.startswith(backend_folder)]
    assert named == []


def test_reference_names_no_torch_class():
    """The lowest layer does not name the top one by string either (the registry once held
    "spectr_gbv.gpu_backend...:Class" paths): no string in reference/'s code, docstrings
    aside, names a gpu_backend module (a file path in a message is not a module)."""
    named = []
    for path in sorted((ROOT / "reference").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        named += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                  and "spectr_gbv.gpu_backend" in n.value]
    assert named == []


def test_no_module_uses_another_modules_private_names():
    """A name starting with one underscore stays in its module: no ``from m import _x`` and no
    ``m._x`` on an imported project module (tests aside; they may reach in)."""
    used = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in TOP:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spectr_gbv"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        used.append(f"{rel}:{node.lineno}: from {node.module} import {a.name}")
                    if ROOT.joinpath(*node.module.split(".")[1:], a.name).with_suffix(".py").is_file():
                        modules.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname for a in node.names if a.name.startswith("spectr_gbv.") and a.asname}
        used += [f"{rel}:{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules
                 and n.attr.startswith("_") and not n.attr.startswith("__")]
    assert used == [], "\n".join(used)
