"""``LV_APP=demo.board:app make run``, as the README and docs/TUTORIAL.md start it: the board's
writer seeds the ``launch`` board once, the pipeline computes its views, the gateway serves its
page and takes the tutorial's publish, and the views follow it."""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
from pathlib import Path

import pytest

from liveviews.client.offsets import covers, parse_offset
from liveviews.log.events import Offset
from tests.test_make_run import System


def covered(system: System, view: str, offsets: list[Offset]) -> bool:
    """Whether the view's frontier for the board covers ``offsets``."""
    status, body = system.request(f"/v1/views/{view}/launch")
    return status == 200 and covers(body["frontier"], offsets)


@pytest.mark.timeout(600)
def test_make_run_runs_the_board_from_its_seed_to_its_views() -> None:
    data = Path(tempfile.mkdtemp(prefix="lv-make-run-board-"))
    system = System(data, LV_APP="demo.board:app")
    try:
        system.wait("the gateway", lambda: system.request("/readyz")[0] == 200)
        _, token = system.request("/v1/dev/token", {"user": "ada"})
        system.token = token["token"]
        system.wait("the seeded board", lambda: system.rows("boards", "launch"))
        # The board's views run in Real-Time Mode, which applies the seed's events one by one:
        # a read can show part of the seed. The seed is appended at once to the board's one log
        # partition, and the move after it, so a frontier that covers the move covers the seed.
        move = {"type": "task_moved", "payload": {"board": "launch", "task": "notes",
                                                  "person": "ada", "status": "doing"}}  # fmt: skip
        status, answer = system.request("/v1/events", move)
        assert status == 202, answer
        offsets = [parse_offset(o) for o in answer["offsets"]]
        for view in ("boards", "leaderboard"):
            system.wait(f"{view} past the move", lambda v=view: covered(system, v, offsets))
        board = system.rows("boards", "launch")["boards"]
        assert (board["tasks"], board["last_by"]) == (5, "ada")
        assert system.rows("leaderboard", "launch")["grace"]["kudos"] == 3
        with urllib.request.urlopen(system.url + "/board.html", timeout=10) as page:
            assert page.status == 200 and b'src="/js/board.js"' in page.read()
    finally:
        out = system.stop()
        print(out[-6000:])
        shutil.rmtree(data, ignore_errors=True)
    assert f"The board's page: http://127.0.0.1:{system.port}/board.html" in out
    assert "seeded the 'launch' board" in out
    assert "postgres.1 started" not in out
