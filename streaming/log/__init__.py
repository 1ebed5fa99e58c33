"""The log: events and their format, appending them once, and the dead letters a pipeline set
aside. The log is the source of truth; every view is computed from it."""
