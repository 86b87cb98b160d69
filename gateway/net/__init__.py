"""Outbound networking: a lean keep-alive HTTP client (``http_client``) and the check that a
destination is a public address (``destinations``, no SSRF).

May import: ``gateway.base``.
"""
