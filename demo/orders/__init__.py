"""Shop: live views of a PostgreSQL table of orders, written with plain SQL."""

from demo.orders.app import app

__all__ = ["app"]
