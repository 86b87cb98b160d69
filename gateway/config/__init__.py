"""Settings: how the core and every plugin declare options (``options``) and how one
configuration is read from defaults, a TOML file and the environment (``settings``).

May import: ``gateway.base``.
"""
