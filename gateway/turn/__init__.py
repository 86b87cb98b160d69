"""One chat turn: the agent loop with its provider and tool calls, billing and commit
(``agent``), and the prompt it sends, assembled in its fixed order under ``MAX_CONTEXT``
(``prompt``).

May import: every part below it (``base``, ``config``, ``store``, ``billing``, ``memory``,
``accounts``, ``plugins``, ``webhooks.events``) and the plugin contract
(``gateway.interfaces``, ``gateway.tools``); never ``kit``, ``api`` or ``cli``.
"""
