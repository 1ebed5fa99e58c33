"""A pipeline version's stored code, run again beside the application's current code.

``liveviews.pipeline.code.pack`` stores the source of the application's modules with each
version; here they are loaded under names of their own, which Spark's cloudpickle then ships to
the Python workers by value, so the serving version keeps computing as it did after its code
changed on disk.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson

from liveviews.app import App
from liveviews.errors import ConfigurationError


def unpack(raw: bytes, label: str) -> App:
    """The application of a packed version, its modules loaded from their stored source under
    names of their own (``_lv_<label>.<module>``), which Spark ships to its Python workers by
    value: the version runs as it was, beside the current code. Its build function sees its
    own modules, under their usual names, while it runs."""
    from pyspark import cloudpickle

    packed = orjson.loads(raw)
    stored = _Stored(f"_lv_{label}", packed["modules"])
    module_name, _, attribute = packed["spec"].partition(":")
    saved = {n: sys.modules.pop(n) for n in list(sys.modules) if n in stored.sources}
    sys.meta_path.insert(0, stored)
    try:
        for name in [module_name, *sorted(stored.sources)]:
            importlib.import_module(name)
    finally:
        sys.meta_path.remove(stored)
        for n in stored.sources:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
    loaded = stored.loaded
    for m in loaded.values():
        cloudpickle.register_pickle_by_value(m)
    module_name, _, attribute = packed["spec"].partition(":")
    app = getattr(loaded[module_name], attribute or "app")
    if not isinstance(app, App):
        raise ConfigurationError(f"{packed['spec']} of a stored version is not an application.")
    p = app.pipelines[packed["pipeline"]]
    build = p.build

    def versioned(events: Any) -> Any:
        with _aliased(loaded):
            return build(events)

    return App(
        app.name,
        event_types=app.event_types,
        views={v: app.views[v] for v in p.views},
        pipelines={p.name: replace(p, build=versioned)},
    )


class _Stored(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the modules of a stored version from their source, each named
    ``<prefix>.<name>`` so that its functions and classes are its own."""

    def __init__(self, prefix: str, sources: dict[str, str]) -> None:
        self.prefix = prefix
        self.sources = sources
        self.loaded: dict[str, types.ModuleType] = {}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.sources:
            return None
        package = any(n.startswith(name + ".") for n in self.sources)
        return importlib.util.spec_from_loader(name, self, is_package=package)

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__spec__.name if module.__spec__ else module.__name__
        module.__name__ = f"{self.prefix}.{name}"
        sys.modules[module.__name__] = module
        self.loaded[name] = module
        exec(compile(self.sources[name], f"<{module.__name__}>", "exec"), vars(module))


@contextlib.contextmanager
def _aliased(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """While it lasts, ``import <name>`` gives the stored version's module."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, before in saved.items():
            if before is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = before
