"""What a group's client does with a ``group`` frame (docs/PROTOCOL.md, section 5.3), for the
gateway's tests of groups: every member frame applied, in order, to that member's rows."""

from __future__ import annotations

from typing import Any


def apply_group_frame(
    data: dict[str, Any], rows: dict[str, dict[str, Any]], ids: dict[str, str]
) -> None:
    """Apply a group frame's ``data`` to ``rows`` (member sub -> row id -> value), noting each
    member's last event id in ``ids``."""
    for frame in data["frames"]:
        held = rows[frame["sub"]]
        if frame["type"] == "snapshot":
            held.clear()
            held.update(frame["data"]["rows"])
        elif frame["type"] == "delta":
            for op in frame["data"]["ops"]:
                if op["op"] == "upsert":
                    held[op["row"]] = op["value"]
                else:
                    held.pop(op["row"], None)
        if "id" in frame:
            ids[frame["sub"]] = frame["id"]
