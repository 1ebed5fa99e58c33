"""One Spark standalone cluster for the tests of this package: one takes ~15 s to start on two cores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.spark import StandaloneCluster
from tests.support.sparkcluster import executor_python, running_cluster


@pytest.fixture(scope="package")
def executors_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return executor_python(tmp_path_factory.mktemp("executor-python"))


@pytest.fixture(scope="package")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, executors_python: Path
) -> Iterator[StandaloneCluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-cluster"), executors_python) as started:
        yield started
