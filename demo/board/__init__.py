"""A team task board: tasks moved between columns, and kudos with a live leaderboard."""

from demo.board.app import app

__all__ = ["app"]
