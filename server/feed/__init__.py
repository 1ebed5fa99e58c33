"""The change-feed readers: what one gateway process reads from the store.

``changes`` reads the change topic once per process and hands every delta and frontier to the
hub; ``log`` follows the event log for the dev feed; ``store`` is the store access they and the
endpoints share (snapshots, history pages), in the layout the pipeline writes.
"""
