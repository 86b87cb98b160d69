"""Loading plugins: the plugin manager and entry points (``manager``), and the one
place that calls hooks and awaits what they return (``hooks``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.hookspecs`` and the plugin
contract.
"""
