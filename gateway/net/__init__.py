"""Outbound networking: a lean keep-alive HTTP client (``http_client``) and the check that a
destination is a public address (``destinations``, no SSRF), outside every IANA special-purpose
range (``special_ranges``).

May import: ``gateway.base``.
"""
