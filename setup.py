"""The package mapping, which pyproject.toml cannot say: the folder ``streaming/`` is the
``liveviews`` package and ``server/`` is its ``liveviews.gateway``. Nothing else is installed:
``demo/``, ``bench/``, ``deploy/`` and ``tests/`` run from the repository.

A built package also carries the JavaScript client (``client-js/src``, the files the npm
package has), which an installed gateway serves at ``/client-js/``; a checkout serves it from
its own folder.
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

CLIENT_JS = Path("client-js") / "src"
CLIENT_JS_IN_PACKAGE = Path("liveviews") / "gateway" / "client_js"


def packages(folder: str, name: str) -> list[str]:
    return [name, *(f"{name}.{sub}" for sub in find_packages(folder))]


class BuildWithClient(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            target = Path(self.build_lib) / CLIENT_JS_IN_PACKAGE
            shutil.copytree(CLIENT_JS, target, dirs_exist_ok=True)


setup(
    packages=packages("streaming", "liveviews") + packages("server", "liveviews.gateway"),
    package_dir={"liveviews": "streaming", "liveviews.gateway": "server"},
    cmdclass={"build_py": BuildWithClient},
)
