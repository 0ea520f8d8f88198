"""Utilities every layer may use: pytrees, atomic file writing, output folders, GC pauses.

Layer rule: imports nothing of gradir (only the standard library and third-party packages)."""
