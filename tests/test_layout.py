"""The layout's rules, checked on the source: layers import downwards only.

- No import circles between modules of ``liveviews`` and ``demo``: imports inside functions
  count too (a circle there is only hidden, not gone), and so do imports for the type checker
  alone (a type that both sides need belongs to the lower one).
- Nothing in ``liveviews`` imports the demo: an application is a parameter.
- What a gateway, the command line, CDC or an application's process runs never imports Spark
  or the pipeline's Spark modules: only the pipeline's process starts Spark.
- The fan-out makes no bytes: it imports neither the live senders nor the HTTP API.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sources import parse

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"streaming": "liveviews", "server": "liveviews.gateway", "demo": "demo"}
"""Each folder and the package it is (setup.py's mapping)."""

SPARK_FREE = (
    "liveviews.app", "liveviews.schema", "liveviews.tables", "liveviews.errors",
    "liveviews.console", "liveviews.supervise", "liveviews.log", "liveviews.changes",
    "liveviews.store", "liveviews.cdc", "liveviews.cli", "liveviews.gateway",
    "liveviews.pipeline.versions", "liveviews.pipeline.code", "liveviews.pipeline.settings",
    "liveviews.client",
)  # fmt: skip
"""What processes other than the pipeline's import: the package's top level is checked apart,
since it names the Spark-side API lazily (``liveviews.__getattr__``)."""

STARTS = {"liveviews.cli": {"liveviews.pipeline.__main__"}}
"""The one import of the pipeline's process from a Spark-free layer: ``liveviews pipeline``
runs it, importing it only when that command runs (``liveviews.cli.processes``)."""


def runtime_nodes(path: Path) -> Iterator[ast.AST]:
    """The nodes of ``path`` that run: what ``if TYPE_CHECKING:`` holds is for the type checker
    alone, and may point back up a layer."""
    skipped: set[int] = set()
    tree = parse(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return (node for node in ast.walk(tree) if id(node) not in skipped)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS[parts[0]], *parts[1:]])


def source_of(name: str) -> list[Path]:
    """The files of the module or package ``name``."""
    folder, package = max(
        ((f, p) for f, p in FOLDERS.items() if name == p or name.startswith(p + ".")),
        key=lambda fp: len(fp[1]),
    )
    base = ROOT / folder / name[len(package) :].lstrip(".").replace(".", "/")
    if base.with_suffix(".py").is_file():
        return [base.with_suffix(".py")]
    return sorted(p for p in base.rglob("*.py") if module_name(p).startswith(name))


def modules() -> dict[str, Path]:
    return {module_name(p): p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")}


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Each module of ``known`` that ``path`` imports, anywhere in it, for the type checker too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(parse(path)):
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


SPARK_SIDE = (
    "pyspark",
    *sorted(
        m for m in modules()
        if m.startswith("liveviews.pipeline.") and not m.startswith(SPARK_FREE)
    ),
)  # fmt: skip
"""Spark, and the pipeline's modules that are not Spark-free (those that start it or use it)."""


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
        ("liveviews", ("demo",)),
        *((layer, SPARK_SIDE) for layer in SPARK_FREE),
        (
            "liveviews.gateway.fanout",
            (
                "liveviews.gateway.live",
                "liveviews.gateway.api",
                "liveviews.gateway._uvicorn",
                "starlette",
            ),
        ),
        (
            "liveviews.gateway.wire",
            (
                "liveviews.gateway.live",
                "liveviews.gateway.api",
                "liveviews.gateway.fanout",
                "liveviews.gateway._uvicorn",
            ),
        ),
    ],
)
def test_a_layer_does_not_import(layer: str, forbidden: tuple[str, ...]) -> None:
    allowed = STARTS.get(layer, set())
    offenders = []
    paths = source_of(layer)
    assert paths, f"{layer} has no source"
    for path in paths:
        for node in runtime_nodes(path):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                module = node.module or ""
                names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for n in names:
                if any(n == a or n.startswith(a + ".") for a in allowed):
                    continue
                if any(n == f or n.startswith(f + ".") for f in forbidden):
                    offenders.append(f"{path.relative_to(ROOT)} imports {n}")
    assert offenders == []


def test_the_top_level_names_spark_only_lazily() -> None:
    """``import liveviews`` must not start importing Spark: only attribute access does."""
    path = ROOT / "streaming" / "__init__.py"
    top = parse(path).body
    imports = [n for n in top if isinstance(n, ast.Import | ast.ImportFrom)]
    named = [getattr(n, "module", None) or "" for n in imports]
    assert not [n for n in named if n.startswith(SPARK_SIDE)]


def test_the_folders_map_to_the_package() -> None:
    assert module_name(ROOT / "server" / "fanout" / "hub.py") == "liveviews.gateway.fanout.hub"
    assert source_of("liveviews.gateway.fanout") == sorted(
        (ROOT / "server" / "fanout").rglob("*.py")
    )
    assert source_of("liveviews.log.events") == [ROOT / "streaming" / "log" / "events.py"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
