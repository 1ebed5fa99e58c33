"""Liveviews' parts as processes of their own on one machine, as a deployment starts them."""
