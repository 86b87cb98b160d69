"""The ``cloudybot`` command (``main``), its shell completion, the plugin scaffold, the
config-file edit of ``plugins enable|disable`` (``switch``), the SQLite to PostgreSQL
migration and progress bars.

May import: every part of ``gateway``; nothing imports it.
"""
