"""The code of a pipeline version: the rule that derives a version from it, and its source,
packed to run again after the application changed (``liveviews.pipeline.stored``).

Spark-free: the command line and the gateway may import it; only ``pack`` imports the
application's modules that a build function imports lazily.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from liveviews.app import App

# -- the rule that derives a version from code ---------------------------------------------


def derive(app: App, pipeline: str) -> str:
    """The pipeline's declared version, or the first 12 hex digits of a SHA-256 over what
    decides its results (docs/VERSIONS.md):

    - its declaration: name, views with their limits (and whether listable), state partitions,
      output mode, Real-Time Mode;
    - the application's event types: names and schemas;
    - the source text of its build function and of every function and class of the
      application's package that the build function reaches by name, through globals,
      closures, class methods and modules of that package, transitively.

    Settings are not part of it: the only ones that change results (``LV_LOG_PARTITIONS``,
    ``LV_CHANGE_SHARDS``) are pinned by the store, which refuses another value.
    """
    p = app.pipelines[pipeline]
    if p.version is not None:
        return p.version
    h = hashlib.sha256()
    declaration = {
        "pipeline": p.name,
        # ``listable`` only when set, so that the versions of views without it stay as they were.
        "views": [
            [v, app.views[v].limit, *([True] if app.views[v].listable else [])] for v in p.views
        ],
        "partitions": p.partitions,
        # Only when not the default, so that the versions of update-mode pipelines stay.
        **({"output_mode": p.output_mode} if p.output_mode != "update" else {}),
        # A query in Real-Time Mode keeps another checkpoint (another source, epochs): a
        # pipeline moved in or out of it is built again beside the serving version.
        **({"realtime": True} if p.realtime else {}),
        "events": {n: _schema(e.schema) for n, e in sorted(app.event_types.items())},
    }
    h.update(orjson.dumps(declaration))
    for source in _sources(p.build):
        h.update(source.encode())
    return h.hexdigest()[:12]


def _schema(schema: Any) -> list[str]:
    """A schema as text that is the same in every process: its fields, and the source of its
    check across fields (whose repr would hold an address)."""
    check = getattr(schema, "check", None)
    return [repr(schema.fields), _source(check) if check is not None else ""]


def _package(obj: Any) -> str:
    module = getattr(obj, "__module__", "") or ""
    return module.rpartition(".")[0] or module


def _sources(build: Any) -> list[str]:
    """The source texts the build function reaches, in a stable order."""
    package = _package(build)
    seen: dict[str, str] = {}
    todo: list[Any] = [build]
    while todo:
        obj = todo.pop()
        name = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"
        if name in seen:
            continue
        seen[name] = _source(obj)
        todo.extend(_reached(obj, package))
    return [seen[n] for n in sorted(seen)]


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):  # declared in a shell or a notebook: its compiled code
        code = getattr(obj, "__code__", None)
        return repr((code.co_code, code.co_consts, code.co_names)) if code else repr(obj)


def _ours(obj: Any, package: str) -> bool:
    if isinstance(obj, types.ModuleType):
        return False
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and (module == package or module.startswith(package + "."))


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _module(name: str, package: str) -> types.ModuleType | None:
    if name != package and not name.startswith(package + "."):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _reached(obj: Any, package: str) -> list[Any]:
    functions: list[types.FunctionType] = []
    out: list[Any] = []
    if isinstance(obj, types.FunctionType):
        functions.append(obj)
    elif isinstance(obj, type):
        for value in vars(obj).values():
            inner = getattr(value, "__func__", value)
            if isinstance(inner, types.FunctionType):
                functions.append(inner)
        out.extend(b for b in obj.__bases__ if _ours(b, package))
    for fn in functions:
        names = {n for code in _codes(fn.__code__) for n in code.co_names}
        scopes: list[dict[str, Any]] = [fn.__globals__]
        for n in names:
            # ``import m`` binds a module global; ``from m import x`` in a function names ``m``
            value = fn.__globals__.get(n) or _module(n, package)
            if isinstance(value, types.ModuleType) and value.__name__.startswith(package):
                scopes.append(vars(value))
        for scope in scopes:
            out.extend(scope[n] for n in names if n in scope and _ours(scope[n], package))
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if _ours(value, package) and (inspect.isfunction(value) or inspect.isclass(value)):
                out.append(value)
    return [o for o in out if inspect.isfunction(o) or inspect.isclass(o)]


# -- a version's code, kept so that it keeps running after the application changed ------------


def pack(app: App, pipeline: str, spec: str) -> bytes:
    """What running this version again needs: the application's spec (``module:attribute``)
    and the source text of every module of the application's package as it is now."""
    package = _package(app.pipelines[pipeline].build)
    for name in _module_names(app.pipelines[pipeline].build, package):
        _module(name, package)  # imported lazily by the build function: take it now
    modules = {
        name: Path(str(m.__file__)).read_text(encoding="utf-8")
        for name, m in sorted(sys.modules.items())
        if _in(name, package) and str(getattr(m, "__file__", None) or "").endswith(".py")
    }
    return orjson.dumps({"spec": spec, "pipeline": pipeline, "modules": modules})


def _in(name: str, package: str) -> bool:
    return bool(package) and (name == package or name.startswith(package + "."))


def _module_names(build: Any, package: str) -> set[str]:
    return {n for code in _codes(build.__code__) for n in code.co_names if _in(n, package)} | {
        m for m in (getattr(o, "__module__", "") for o in _reached(build, package)) if m
    }
