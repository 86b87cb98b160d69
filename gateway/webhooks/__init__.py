"""Outbound webhooks: their signatures (``signing``) and the dispatcher that sends the
webhook outbox (``dispatcher``). The events themselves and the body each delivery signs are
the store's (:mod:`gateway.store.events`): it writes them in the commit of what they report.

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.net``,
``gateway.accounts``, ``gateway.observe``.
"""
