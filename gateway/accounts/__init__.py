"""People and what is held about them: API tokens, dashboard sessions and login links
(``access``), secrets at rest and redaction (``secrets``), the export and deletion of a user's
data (``user_data``), and retention's purge (``retention``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.billing``,
``gateway.memory``, ``gateway.tools``.
"""
