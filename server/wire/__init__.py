"""The wire formats, one module each: frames (where a delta becomes bytes for SSE and for
WebSocket messages), event ids, and RFC 6455 framing. docs/PROTOCOL.md is their normative
description; protocol/golden/ holds the examples the Python and JavaScript tests share.
"""
