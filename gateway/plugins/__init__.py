"""Loading plugins: the plugin manager and entry points (``manager``), and the one
place that calls hooks and awaits what they return (``hooks``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.memory``,
``gateway.hookspecs``, ``gateway.host``, ``gateway.interfaces``.
"""
