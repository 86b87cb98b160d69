"""Serving the application on a socket: how long a connection may take to send its headers, how
many connections one client address may hold (``connections``), and running until SIGTERM with
a graceful stop (``run``).

May import: ``gateway.base``, ``gateway.config``.
"""
