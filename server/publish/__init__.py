"""The gateway's publish path: appending to the log, the room left in the store, and each
subject's publish rate."""
