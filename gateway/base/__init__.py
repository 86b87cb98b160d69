"""Foundations every other part uses: errors, identifier checks, text splitting, times,
JSON, private files, logs, token counting, turn locks, circuit breakers, metrics and pictures.

Owns nothing of turns, channels, billing or storage.

May import: nothing else of the package (the standard library and third-party packages
only).
"""
