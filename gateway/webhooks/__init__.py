"""Outbound webhooks: the events and the body each delivery signs (``events``, also
written by the store in a turn's commit), their signatures (``signing``), and the dispatcher that
sends the webhook outbox (``dispatcher``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.net``,
``gateway.accounts``.
"""
