"""One chat turn: the agent loop with its provider and tool calls, billing and commit
(``agent``), and the prompt it sends, assembled in its fixed order under ``MAX_CONTEXT``
(``prompt``). A turn is one :class:`~gateway.turn.request.Turn`, built at its edge.

May import: ``gateway.base``, ``gateway.config``, ``gateway.store``, ``gateway.billing``,
``gateway.memory``, ``gateway.accounts``, ``gateway.plugins``, ``gateway.interfaces``,
``gateway.tools``, ``gateway.observe``; never ``kit``, ``api`` or ``cli``.
"""
