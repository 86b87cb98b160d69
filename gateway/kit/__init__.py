"""The channel kit: what every channel shares between "a message arrived" and "its reply
was delivered": the durable inbox (``inbound``), the durable outbox (``outbox``), per-conversation
queues (``queues``) and the growing preview of a reply (``streaming``).

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.billing``,
``gateway.accounts``, ``gateway.plugins``, ``gateway.turn``, ``gateway.host``,
``gateway.interfaces``, ``gateway.observe``; never ``api`` or ``cli``.
"""
