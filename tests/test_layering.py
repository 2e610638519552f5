"""The layering the README's map shows holds in the code: each part of `src/agentrt` imports only
the parts in its own layer or before it (function-level imports included), and no two parts of one
layer import each other in a cycle. A new top-level package or module must be placed in the map."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "agentrt"


def readme_layers() -> dict[str, int]:
    text = (ROOT / "README.md").read_text()
    start = text.index("Layers, each importing only those before it")
    para = text[start:text.index("\n\n", start)]
    layers = {}
    for rank, segment in enumerate(para.split("→")):
        for name in re.findall(r"`([a-z_]+)`", segment):
            layers[name] = rank
    return layers


def part_of(path: Path) -> str:
    rel = path.relative_to(SRC).parts
    return rel[0][:-3] if len(rel) == 1 else rel[0]


def imported_parts(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = ([f"agentrt.{a.name}" for a in node.names] if node.module == "agentrt"
                     else [node.module])
        else:
            continue
        out.update(n.split(".")[1] for n in names if n.startswith("agentrt."))
    return out


def import_graph() -> dict[str, dict[str, str]]:
    """part -> {imported part: one file that imports it}"""
    graph: dict[str, dict[str, str]] = {}
    for f in sorted(SRC.rglob("*.py")):
        if f == SRC / "__init__.py":     # the package's lazy re-export of agentrt.api
            continue
        src = part_of(f)
        for dst in imported_parts(ast.parse(f.read_text(), str(f))):
            if dst != src:
                graph.setdefault(src, {}).setdefault(dst, str(f.relative_to(ROOT)))
    return graph


def test_every_part_is_on_the_map():
    layers = readme_layers()
    parts = {part_of(f) for f in SRC.rglob("*.py") if f != SRC / "__init__.py"}
    assert len(set(layers.values())) >= 8
    assert parts - set(layers) == set(), "place these in the README's layer map"
    assert set(layers) - parts == set(), "the README's map names parts that do not exist"


def test_no_part_imports_a_later_layer():
    layers = readme_layers()
    wrong = [f"{where}: {src} (layer {layers[src]}) imports {dst} (layer {layers[dst]})"
             for src, deps in import_graph().items() for dst, where in deps.items()
             if layers.get(dst, -1) > layers[src]]
    assert wrong == []


def test_no_cycle_between_parts():
    graph = import_graph()
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, {}):
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert cycles == []


def test_the_check_catches_an_upward_import(tmp_path):
    tree = ast.parse("def f():\n    from agentrt.bench.runner import run_bench\nfrom agentrt import defaults\n")
    assert imported_parts(tree) == {"bench", "defaults"}
