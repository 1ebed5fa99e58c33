"""The layout's rules, checked on the source: layers import downwards only.

- No import circles between modules of ``server``, ``streaming`` and ``demo`` (imports inside
  functions count too: a circle there is only hidden, not gone; imports for the type checker
  alone do not run, and do not count).
- Nothing in ``server`` or ``streaming`` imports the demo: an application is a parameter.
- The Spark-free core and the gateway never import Spark, the job or its tuning.
- The fan-out makes no bytes: it imports neither the live senders nor the HTTP API.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "streaming", "demo")


def runtime_nodes(path: Path) -> Iterator[ast.AST]:
    """The nodes of ``path`` that run: what ``if TYPE_CHECKING:`` holds is for the type checker
    alone, and may point back up a layer."""
    skipped: set[int] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return (node for node in ast.walk(tree) if id(node) not in skipped)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Each module of ``known`` that ``path`` imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in runtime_nodes(path):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            # The deepest known module the name is, or is in.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(path, known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def is_package_init(edges: dict[str, set[str]], a: str, b: str) -> bool:
    return a == b.rpartition(".")[0] or b == a.rpartition(".")[0]


def test_no_module_imports_itself_back() -> None:
    edges = graph()
    # A package's __init__ re-exporting its own modules is the package's public surface, not
    # a circle between layers.
    pruned = {a: {b for b in bs if not is_package_init(edges, a, b)} for a, bs in edges.items()}
    assert cycles(pruned) == []


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("server", ("demo",)),
        ("streaming", ("demo",)),
        ("streaming.core", ("streaming.job", "streaming.tuning", "server", "pyspark")),
        ("server", ("streaming.job", "streaming.tuning", "pyspark")),
        ("server.fanout", ("server.live", "server.api", "server._uvicorn", "starlette")),
        ("server.wire", ("server.live", "server.api", "server.fanout", "server._uvicorn")),
    ],
)
def test_a_layer_does_not_import(layer: str, forbidden: tuple[str, ...]) -> None:
    offenders = []
    for path in (ROOT / layer.replace(".", "/")).rglob("*.py"):
        for node in runtime_nodes(path):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for n in names:
                if any(n == f or n.startswith(f + ".") for f in forbidden):
                    offenders.append(f"{path.relative_to(ROOT)} imports {n}")
    assert offenders == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
