"""Chirp: a small Twitter whose every screen is a live view."""

from demo.chirp.app import app

__all__ = ["app"]
