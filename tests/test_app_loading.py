"""``load_app``: an application that cannot be loaded is one sentence, never a traceback."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from liveviews import ConfigurationError, load_app


@pytest.fixture()
def apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("lvtest_")]:
        del sys.modules[name]


def test_an_application_that_raises_as_it_is_declared_is_a_sentence(apps, caplog) -> None:
    (apps / "lvtest_broken.py").write_text(
        "from liveviews import App\napp = App('broken')\napp.view('v', description=1, nope=2)\n"
    )
    with caplog.at_level(logging.ERROR), pytest.raises(ConfigurationError) as refused:
        load_app("lvtest_broken:app")
    assert refused.value.message.startswith(
        "LV_APP='lvtest_broken:app': the application failed as it was declared, with TypeError:"
    )
    (record,) = [r for r in caplog.records if r.name == "liveviews.app"]
    assert record.exc_info is not None and getattr(record, "file_only", False)


def test_a_declaration_the_application_makes_keeps_its_own_sentence(apps) -> None:
    (apps / "lvtest_refused.py").write_text(
        "from liveviews import App\napp = App('refused')\napp.view('v', description='x')\n"
        "app.pipeline('p', views=['nope'])(lambda events: events)\n"
    )
    with pytest.raises(ConfigurationError, match="^pipeline 'p' names undeclared view 'nope'"):
        load_app("lvtest_refused:app")


def test_a_module_that_is_not_there_says_what_lv_app_must_name(apps) -> None:
    with pytest.raises(ConfigurationError, match="does not name an application"):
        load_app("lvtest_missing:app")
