"""The store the log and the change topic live in: its clients (one server or a cluster), the
embedded server started when none is configured, and the upgrade of an older store's keys."""
