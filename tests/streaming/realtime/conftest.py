"""Every test here runs its pipelines in Real-Time Mode, whatever the run's ``LV_REALTIME``."""

from __future__ import annotations

import dataclasses

import pytest

from liveviews.pipeline.settings import Settings


@pytest.fixture()
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, realtime=True)
