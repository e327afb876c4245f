"""No import cycles among chit's modules.

Every import counts: at module level, under `if TYPE_CHECKING:` and inside
functions. A cycle hidden in a function or behind TYPE_CHECKING still ties the
modules together (one cannot be read, tested or moved without the other); it
only fails later, at a call or under mypy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chit

SRC = Path(chit.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The chit modules `name` imports. `from chit.x import y` counts as an import
    of chit.x.y when that is a module, else of chit.x; a parent package run
    implicitly on the way (chit for chit.x) does not count."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def owner(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            module = owner(target)
            if module is not None and module != name:
                found.add(module)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_module_of_chit_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "chit.api.app" in graph["chit.api"]  # the walk sees imports in functions
    assert import_cycles(graph) == []


def test_chit_worker_starts_without_the_http_apis_modules() -> None:
    """The other commands' modules import the HTTP API's schemas, some 0.1 s of
    a worker's start: `chit worker` builds its own parser alone."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from chit.cli.main import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('chit.api', 'fastapi'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "usage: chit worker" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"
