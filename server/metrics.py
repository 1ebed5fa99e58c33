"""The process's counters and gauges, rendered in the Prometheus text format at /metrics.

Plain attributes rather than a client library: they are bumped on the delivery path of every
frame, where an attribute add is the cheapest thing there is.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Metrics:
    sse_connections: int = 0
    ws_connections: int = 0
    ws_unauthenticated: int = 0
    connections_refused: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("process", "subject", "address", "unauthenticated"), 0
        )
    )
    subscriptions: int = 0
    deltas_in: int = 0
    deltas_out: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    slow_consumers: int = 0
    resets: int = 0
    events_published: int = 0
    publishes_rate_limited: int = 0
    publishes_refused_store_full: int = 0
    feed_reads: int = 0
    feed_errors: int = 0
    feed_lag_seconds: float = 0.0
    store_epoch_changes: int = 0

    @property
    def connections(self) -> int:
        return self.sse_connections + self.ws_connections

    def render(self) -> str:
        rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            ("lv_connections", "gauge", "Open client connections.",
             [('{transport="sse"}', self.sse_connections),
              ('{transport="ws"}', self.ws_connections)]),
            ("lv_unauthenticated_sockets", "gauge",
             "WebSockets open but not signed in yet (not counted in lv_connections).",
             [("", self.ws_unauthenticated)]),
            ("lv_connections_refused_total", "counter",
             "Connections refused for a spent budget (the process's, a subject's, an "
             "address's, or that of sockets not signed in).",
             [(f'{{budget="{k}"}}', v) for k, v in self.connections_refused.items()]),
            ("lv_subscriptions", "gauge", "Subscriptions attached to the hub.",
             [("", self.subscriptions)]),
            ("lv_deltas_in_total", "counter", "Deltas read from the change topic.",
             [("", self.deltas_in)]),
            ("lv_deltas_out_total", "counter", "Delta frames delivered to subscribers.",
             [("", self.deltas_out)]),
            ("lv_frames_out_total", "counter", "Frames of every kind delivered.",
             [("", self.frames_out)]),
            ("lv_bytes_out_total", "counter", "Bytes of frames handed to client connections.",
             [("", self.bytes_out)]),
            ("lv_slow_consumer_total", "counter",
             "Subscriptions ended because their buffer overflowed.", [("", self.slow_consumers)]),
            ("lv_resets_total", "counter", "Reset frames sent (resume impossible).",
             [("", self.resets)]),
            ("lv_events_published_total", "counter", "Events appended to the log.",
             [("", self.events_published)]),
            ("lv_publishes_refused_total", "counter", "Publishes refused by a limit.",
             [('{reason="rate_limited"}', self.publishes_rate_limited),
              ('{reason="store_full"}', self.publishes_refused_store_full)]),
            ("lv_change_feed_reads_total", "counter", "Reads of the change topic.",
             [("", self.feed_reads)]),
            ("lv_change_feed_errors_total", "counter", "Failed reads of the change topic.",
             [("", self.feed_errors)]),
            ("lv_change_feed_lag_seconds", "gauge",
             "Age of the newest delta when this process read it.", [("", self.feed_lag_seconds)]),
            ("lv_store_epoch_changes_total", "counter",
             "Times the store was found wiped or replaced.", [("", self.store_epoch_changes)]),
        ]  # fmt: skip
        out = []
        for name, kind, help_text, samples in rows:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(f"{name}{labels} {value}" for labels, value in samples)
        return "\n".join(out) + "\n"
