"""The settings of every process: declared once (``catalog``), read from the environment over
an optional TOML settings file (``layers``), shown by ``liveviews config`` and written out as
docs/CONFIGURATION.md (``page``)."""
