"""The package mapping, which pyproject.toml cannot say: the folder ``streaming/`` is the
``liveviews`` package and ``server/`` is its ``liveviews.gateway``. Nothing else is installed:
``demo/``, ``bench/``, ``deploy/`` and ``tests/`` run from the repository."""

from setuptools import find_packages, setup


def packages(folder: str, name: str) -> list[str]:
    return [name, *(f"{name}.{sub}" for sub in find_packages(folder))]


setup(
    packages=packages("streaming", "liveviews") + packages("server", "liveviews.gateway"),
    package_dir={"liveviews": "streaming", "liveviews.gateway": "server"},
)
