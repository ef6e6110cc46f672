"""engine_under_test's import graph: no cycles, and no import of specconform.

Every import statement counts, at module level or inside a function (an import moved into
a function to dodge a cycle is still the cycle). Read from the source with ast, so the
check needs neither import-linter nor an import of the engine.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "engine_under_test"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` (and any specconform one) that ``path`` imports."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: drop level - 1 trailing parts of the package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # "from pkg import mod" imports the module pkg.mod (pkg is loaded already,
            # as for any submodule); "from pkg import name" imports pkg.
            subs = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else base for t in subs]
        else:
            continue
        for target in targets:
            if target in modules or target.split(".")[0] == "specconform":
                found.add(target)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_engine_modules_import_no_cycle():
    graph = _graph()
    assert len(graph) > 40
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_check_finds_a_planted_cycle():
    graph = _graph()
    graph["engine_under_test.sampling.philox"].add("engine_under_test.sampling.rng")
    assert _cycle(graph) is not None


def test_engine_never_imports_specconform():
    offenders = {m: sorted(i) for m, i in _graph().items() if any("specconform" in x for x in i)}
    assert not offenders
