"""The ``cloudybot`` command (``main``), its shell completion, the plugin scaffold, the
SQLite to PostgreSQL migration and progress bars.

May import: every part of ``gateway``; nothing imports it.
"""
