"""The pipeline side's errors: one root, each with a machine-readable code; a failure in a line."""

from __future__ import annotations

FRAMES = ("at ", "... ", 'File "')
"""How the lines of a stack start, in the JVM's traces and in Python's."""


def failure_line(text: str, limit: int = 300) -> str:
    """A failure's text in one line: its last line that names an error, outside the stack
    frames. For a JVM error that is its innermost cause; for Python's traceback, its exception."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(FRAMES)]
    errors = [line for line in lines if "Error" in line or "Exception:" in line]
    line = errors[-1] if errors else lines[0] if lines else "unknown error"
    line = line.removeprefix("Caused by: ").removeprefix(": ")
    return line if len(line) <= limit else f"{line[: limit - 3]}..."


class LiveviewsError(Exception):
    """Root of every error Liveviews raises on purpose."""

    code = "liveviews_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigurationError(LiveviewsError):
    """A setting is missing or malformed; the message names it and what to set."""

    code = "configuration_error"


class InvalidEvent(LiveviewsError):
    """An event does not match its type's schema. Nothing of its batch was written."""

    code = "invalid_event"

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_event",
        index: int | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.index = index
        self.field = field

    def at(self, index: int) -> InvalidEvent:
        """The same error, saying which event of a batch it was."""
        return InvalidEvent(
            f"event {index}: {self.message}", code=self.code, index=index, field=self.field
        )

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"code": self.code, "message": self.message}
        if self.index is not None:
            out["index"] = self.index
        if self.field is not None:
            out["field"] = self.field
        return out


class StoreMismatch(LiveviewsError):
    """The store was created with other log settings than this process has."""

    code = "store_mismatch"
