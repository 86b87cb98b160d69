"""The channel kit: what every channel shares between "a message arrived" and "its reply
was delivered": the durable inbox (``inbound``), the durable outbox (``outbox``), per-conversation
queues (``queues``) and the growing preview of a reply (``streaming``).

May import: the parts below it and the plugin contract; never ``api`` or ``cli``.
"""
