"""Hook specifications of the ``cloudybot`` plugin project.

Every hook receives keyword arguments; an implementation takes only the ones it names. Hooks
that act on the gateway receive ``host``, a :class:`gateway.PluginHost` of the plugin's own:
the few things a plugin may do (receive and send messages of its channels, read settings,
pinned memory of its conversations, background work, logs, metrics). Any
implementation may be ``async def``: the gateway awaits every result it gets back, in one
place (:mod:`gateway.plugins.hooks`). No hook is ``firstresult``: a coroutine is never None,
so pluggy would stop at the first async implementation.

``register_*`` hooks return lists that the gateway concatenates; ``*_completed`` hooks observe,
and one failing observer never stops the others or the turn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from gateway.config.options import PluginSettings
    from gateway.host import ChatCommand, PluginHost
    from gateway.interfaces import Channel, PromptSection, Provider, TurnContext
    from gateway.memory.sessions import Rotation
    from gateway.store import Delivery
    from gateway.tools import Tool, ToolSet

PROJECT = "cloudybot"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- settings ----------------------------------------------------------------------------
@hookspec
def plugin_settings() -> PluginSettings:
    """Declare this plugin's settings (synchronous: they are read before the gateway starts).

    :return: a :class:`gateway.PluginSettings`: the plugin's name and a frozen dataclass whose
        fields are made with :func:`gateway.setting`. They are read from ``[plugins.NAME]`` in
        the TOML file and from ``CLOUDYBOT_{NAME}_{KEY}`` variables (environment first), with
        the core's strictness: an unknown key or a bad value stops start-up with one line
        naming it. The plugin reads them with ``host.settings.plugin(TheDataclass)``.
    """


# --- providers ---------------------------------------------------------------------------
@hookspec
def register_providers(host: PluginHost) -> list[Provider]:
    """Return the LLM providers this plugin offers.

    :param host: the plugin's host (read ``host.settings.plugin(YourSettings)`` for
        configuration).
    :return: provider instances; the gateway uses the one whose ``name`` equals
        ``CLOUDYBOT_LLM_PROVIDER``. Two providers with one name are a start-up error.
    """


# --- channels ----------------------------------------------------------------------------
@hookspec
def register_channels(host: PluginHost) -> list[Channel]:
    """Return the channel adapters this plugin provides.

    :param host: the plugin's host; a channel awaits ``host.receive(message)`` with each
        :class:`gateway.InboundMessage` of its conversations and acknowledges its platform
        only after it returned (the message is then durable); replies come back through the
        channel's ``send(address, text)``.
    :return: channel instances; their routes are served, and ``start``, ``stop`` (intake) and
        ``close`` (after queued replies went out) run with the gateway. A plugin that is not
        configured may return a :class:`gateway.ReservedChannel`, which keeps its
        name's thread ids reserved and runs nothing.
    """


# --- tools -------------------------------------------------------------------------------
@hookspec
def register_tools(host: PluginHost) -> list[Tool | ToolSet]:
    """Return the tools the agent may call.

    :param host: the plugin's host.
    :return: :class:`gateway.Tool` instances; their schemas go to the provider with every
        chat call, and ``run(arguments, context)`` is awaited when the model calls them. An
        exception or a timeout becomes an error result the model reads. Names must be unique.
        A :class:`gateway.ToolSet` among them gives tools that depend on who asks or change
        while the gateway runs (an MCP server's): each turn gets ``await
        tools_for(user_id, plan)`` beside the plain tools; it is started with the gateway and
        closed as it stops.
    """


# --- chat commands -----------------------------------------------------------------------
@hookspec
def register_commands(host: PluginHost) -> list[ChatCommand]:
    """Return the chat commands this plugin offers.

    :param host: the plugin's host.
    :return: :class:`gateway.ChatCommand` instances. Every channel routes ``/name args`` (in
        its own spelling) to the command registered under ``name``, and ``/chat`` does for a
        message that starts with one; the command's ``run`` gets a
        :class:`gateway.CommandContext` and returns the answer's text (no LLM call, no
        credits). Names are 1-32 of ``a-z 0-9 _``; two commands with one name are a
        start-up error.
    """


# --- prompt assembly ---------------------------------------------------------------------
@hookspec
def prompt_sections(host: PluginHost, turn: TurnContext) -> list[PromptSection]:
    """Return extra sections for this turn's system message.

    :param host: the plugin's host.
    :param turn: who is talking, in which thread, and what they said.
    :return: sections, each placed right after the built-in section its ``position`` names.
        Their tokens count against ``MAX_CONTEXT`` like the rest of the system message.
    """


# --- observers ---------------------------------------------------------------------------
@hookspec
def turn_completed(host: PluginHost, turn: TurnContext, reply: str) -> None:
    """Observe a turn that was answered and stored.

    :param host: the plugin's host.
    :param turn: the turn's context.
    :param reply: the reply as stored (credentials redacted).
    """


@hookspec
def session_rotated(host: PluginHost, rotation: Rotation) -> None:
    """Observe a session that ended in this process: archived (idle, too large, thread cleared
    or deleted) or, for ``reason == "purged"``, deleted by retention (``archive`` is None).
    A rotation by ``cloudybot sessions rotate`` happens in another process: the next turn
    there starts a new session (with the rotation hint) but no hook fires.

    :param host: the plugin's host.
    :param rotation: the session key, the reason and the archive file. Release any tool
        resources (browsers, sandboxes) kept for that session.
    """


@hookspec
def gateway_stopping(host: PluginHost) -> None:
    """Release what the plugin holds for the running gateway (a browser, connections,
    background tasks): called as the gateway stops, after its turns finished or the grace
    period ended, while the store is still open; every plugin's at once, each cancelled if it
    is still running when the grace period ends.

    :param host: the plugin's host.
    """


@hookspec
def reply_sent(host: PluginHost, message: Delivery, text: str) -> None:
    """Observe a reply delivered to a channel (after every chunk arrived), also one delivered
    after a restart.

    :param host: the plugin's host.
    :param message: the delivery: ``channel``, ``message_id`` and ``conversation`` of the
        channel message it answers, its ``address``, ``attempts`` and ``text``.
    :param text: the whole reply (a command's answer, the agent's reply or an apology).
    """
