"""The Discord channel, on discord.py (its REST client and its Gateway websocket).

Keys: ``discord:{guild}:{channel}`` in a server channel, ``discord:{guild}:{channel}:{thread}``
in a thread (``channel`` its parent), ``discord:dm:{user}`` in a DM; senders are accounts
``discord:{user_id}``.

- In a DM every message is a turn. In a server, only a message that mentions the bot or
  replies to one of its messages (``CLOUDYBOT_DISCORD_RESPOND_MODE=all``: every message),
  and only in the allowed servers and channels (``CLOUDYBOT_DISCORD_GUILDS``, ``..._CHANNELS``;
  a thread counts as its channel). In a thread where the bot already talks, later messages
  continue the conversation without a mention. Bots' messages (ours included), webhooks and
  system messages (joins, pins) are ignored. The bot's mention is removed; other mentions
  reach the model as ``@name``; pictures go to a vision model (``CLOUDYBOT_LLM_VISION``).
- The chat commands are application (slash) commands, registered globally at start-up only
  when they differ from what Discord has (no request on an unchanged restart). A command is
  committed to the durable inbox, then acknowledged ("thinking…", seen only by its user)
  well within Discord's 3 seconds; its answer is the follow-up, sent through the outbox.
- Replies: the model's Markdown as it is (Discord renders it), at most 2,000 characters a
  message (split at paragraphs, lines or words, code blocks closed and reopened), replying to
  the message they answer, with ``allowed_mentions`` empty: no reply can ping @everyone,
  @here, a role or a user, whatever the model wrote. "typing…" while the agent works; with
  streaming, one message edited as the model writes (the gateway paces it, ~1/s).
- Rate limits: discord.py's buckets pace the requests and wait out a 429 (up to 30 s); a
  longer wait, or a 429 it gave up on, goes back to the outbox (DeliveryRetry), which sends
  again later: a 429 never loses a reply.

Only one process holds the Gateway connection when several share a PostgreSQL database
(``host.lead``); every process sends replies over REST. Discord does not deliver an event
again, so a message is "acknowledged" once it is committed to the inbox: from then on it is
answered, across a kill -9.

discord.py keeps the API's address in a class attribute (``discord.http.Route.BASE``) and the
websocket's in another (``DiscordWebSocket.DEFAULT_GATEWAY``): with ``CLOUDYBOT_DISCORD_API_BASE``
set to another server (a test's fake), both are pointed there, for the whole process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from gateway import (
    PICTURE_TYPES,
    Attachment,
    Channel,
    ChatCommand,
    Command,
    ConfigError,
    DeliveryFailed,
    DeliveryRetry,
    Image,
    InboundMessage,
    Leadership,
    PluginHost,
    Unavailable,
    redact_in_logs,
    split_text,
)

from . import API_BASE, NAME, DiscordSettings

log = logging.getLogger(__name__)

MAX_CHARS = 2000  # Discord refuses longer content (400)
GATEWAY_ROLE = "discord-gateway"  # one process at a time holds the websocket
LEADER_CHECK_SECONDS = 5.0  # how often the holder checks it still holds the role
CONNECT_RETRY_SECONDS = (1, 2, 5, 10, 30, 60)
RATE_LIMIT_WAIT_SECONDS = 30.0  # discord.py waits out shorter 429s; longer: the outbox
ACK_SECONDS = 2.0  # an interaction is deferred by then, stored or not (Discord's limit: 3 s)
TOKEN_FORMAT = re.compile(r"[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}")
MAX_PICTURES = 4  # per message
FILE_HOSTS = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
TEXT_ONLY = ("I can only read text for now — send me your question as a message "
             "(pictures too, when I can see them).")
ANSWERED_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
NO_MENTIONS = discord.AllowedMentions.none()
STOPPING = "I'm restarting — please run the command again in a minute."
OPTION_NAME = re.compile(r"[^a-z0-9]+")
COMMAND_CONTEXTS = [0, 1]  # in servers and in the bot's DMs
INSTALL_TYPES = [0]  # installed to a server


def intents() -> discord.Intents:
    """What the channel asks the Gateway for: servers and their channels (guilds), messages
    in servers and in DMs, and their content (message_content: privileged, switched on in
    the Developer Portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = wanted.guild_messages = wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def command_payloads(commands: Mapping[str, ChatCommand]) -> list[dict[str, Any]]:
    """The application commands for the gateway's chat commands (each once, by its name; an
    argument is one string option named after its usage)."""
    payloads = []
    for command in {found.name: found for found in commands.values()}.values():
        payload: dict[str, Any] = {
            "name": command.name, "type": 1, "description": command.help[:100] or command.name,
            "contexts": COMMAND_CONTEXTS, "integration_types": INSTALL_TYPES,
        }
        if command.usage:
            optional = command.usage.startswith("[")
            name = OPTION_NAME.sub("_", command.usage.lower()).strip("_")[:32] or "argument"
            payload["options"] = [{"type": 3, "name": name, "required": not optional,
                                   "description": command.usage[:100]}]
        payloads.append(payload)
    return payloads


def _comparable(command: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a command is compared to decide whether to sync (Discord adds ids, versions
    and defaults to what it was given)."""
    options = tuple((o.get("type"), o.get("name"), o.get("description"),
                     bool(o.get("required", False))) for o in command.get("options") or ())
    return (command.get("name"), command.get("type", 1), command.get("description"), options,
            tuple(command.get("contexts") or ()),
            tuple(command.get("integration_types") or INSTALL_TYPES))


def commands_differ(wanted: list[dict[str, Any]], registered: list[dict[str, Any]]) -> bool:
    """Whether Discord's global commands differ from the wanted ones."""
    return sorted(map(_comparable, wanted)) != sorted(map(_comparable, registered))


def retry_after(exc: discord.HTTPException) -> float:
    """A 429's wait in seconds (its body's ``retry_after``, else the header)."""
    response = getattr(exc, "response", None)
    header = response.headers.get("Retry-After") if response is not None else None
    try:
        return max(float(header or 1.0), 0.1)
    except ValueError:
        return 1.0


def delivery_error(exc: discord.HTTPException) -> Exception:
    """What the outbox should do with a refused request: wait (429), give up (another 4xx:
    missing access, unknown channel, a message Discord refuses) or retry (5xx)."""
    if exc.status == 429:
        return DeliveryRetry(retry_after(exc))
    if 400 <= exc.status < 500:
        return DeliveryFailed(f"{exc.status} {exc.code}: {exc.text}"[:300])
    return exc


class DiscordClient(discord.Client):
    """discord.py's client, handing its events to the channel."""

    def __init__(self, channel: DiscordChannel) -> None:
        # no voice here: discord.py's warnings that its voice libraries are missing are noise
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        super().__init__(intents=intents(), allowed_mentions=NO_MENTIONS,
                         max_ratelimit_timeout=RATE_LIMIT_WAIT_SECONDS,
                         chunk_guilds_at_startup=False, member_cache_flags=
                         discord.MemberCacheFlags.none())
        self.channel = channel

    async def on_message(self, message: discord.Message) -> None:
        """In the order Discord sent them: nothing awaited before the queue."""
        self.channel.incoming.put_nowait(message)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Application commands: stored, then deferred within Discord's 3 seconds."""
        if interaction.type == discord.InteractionType.application_command:
            await self.channel.take_command(interaction)

    async def on_ready(self) -> None:
        """Logged once per (re)connection."""
        log.info("discord: connected as %s (%s servers)", self.user, len(self.guilds))


class DiscordChannel(Channel):
    """Discord through discord.py: the Gateway websocket in one process, REST in each."""

    name = NAME

    def __init__(self, host: PluginHost) -> None:
        settings = host.settings.plugin(DiscordSettings)
        self.host = host
        self.settings = settings
        self.token = settings.bot_token
        self.token_ok = TOKEN_FORMAT.fullmatch(self.token) is not None
        if self.token_ok:  # only a real token: masking "x" would rewrite every log line
            redact_in_logs(self.token)
        self.client: DiscordClient | None = None
        self.incoming: asyncio.Queue[discord.Message] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._connecting: asyncio.Task[None] | None = None
        self._deferred: dict[str, asyncio.Event] = {}  # interaction id -> acknowledged
        self._parents: dict[int, int] = {}  # thread id -> its channel's
        self._downloads: aiohttp.ClientSession | None = None
        self._file_hosts = FILE_HOSTS | {urlparse(settings.api_base).hostname or ""}
        self.ack_seconds = ACK_SECONDS

    def check_token(self) -> None:
        """Raise ConfigError unless the token looks like a bot token (no request is made)."""
        if not self.token_ok:
            raise ConfigError("CLOUDYBOT_DISCORD_BOT_TOKEN is not a Discord bot token: expected "
                              "three dot-separated parts (Developer Portal, Bot, Reset Token)")

    def routes(self) -> list[Any]:
        """None: Discord is reached over its websocket. The token is checked here, before
        the server starts, so ``cloudybot serve`` stops with the config error alone."""
        self.check_token()
        return []

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Log in over REST (a refused token stops start-up with a ConfigError; Discord out of
        reach does not: the channel keeps trying in the background), then hold the Gateway
        connection in the one process that plays its role. Idempotent."""
        self.check_token()
        if self._connecting is not None:
            return  # logging in, in the background
        if self.client is None:
            try:
                await self._login()
            except (aiohttp.ClientError, OSError, discord.DiscordServerError) as exc:
                log.warning("discord: cannot reach Discord (%s); retrying", exc)
                self._connecting = asyncio.get_running_loop().create_task(self._login_later())
                return
        if self._downloads is None:
            self._downloads = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._listen()

    async def _login(self) -> None:
        base = self.settings.api_base.rstrip("/")
        if base != API_BASE:
            Route.BASE = base
        client = DiscordClient(self)
        try:
            await client.login(self.token)
            if base != API_BASE:  # the websocket of that server, as GET /gateway/bot names it
                _, url, _ = await client.http.get_bot_gateway()
                DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        except BaseException as exc:
            await client.close()
            if isinstance(exc, discord.LoginFailure):
                raise ConfigError("CLOUDYBOT_DISCORD_BOT_TOKEN was refused by Discord "
                                  "(401)") from None
            raise
        self.client = client
        log.info("discord: logged in as %s", client.user)

    async def _login_later(self) -> None:
        for attempt in range(10**9):
            await asyncio.sleep(CONNECT_RETRY_SECONDS[min(attempt,
                                                          len(CONNECT_RETRY_SECONDS) - 1)])
            try:
                await self._login()
            except (aiohttp.ClientError, OSError, discord.DiscordServerError) as exc:
                log.warning("discord: still cannot reach Discord (%s)", exc)
                continue
            except Exception:
                log.exception("discord: cannot start")
                return
            self._connecting = None
            await self.start()
            return

    def _listen(self) -> None:
        if self._tasks:
            return  # listening already
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._take_messages()),
                       loop.create_task(self._hold_gateway())]

    async def _hold_gateway(self) -> None:
        """Sync the commands and hold the websocket, as the one process that does; another
        takes over when this one dies."""
        async def connect(leadership: Leadership) -> bool:
            log.info("discord: this process holds the Gateway connection")
            await self._sync_commands()
            return await self._connect_while(leadership)
        await self.host.play(GATEWAY_ROLE, connect)

    async def _connect_while(self, leadership: Leadership) -> bool:
        """Stay connected while this process holds the role; False when the connection ended
        for good (a refused token or intents: logged)."""
        client = self.client
        assert client is not None
        connection = asyncio.get_running_loop().create_task(client.connect(reconnect=True))
        try:
            while True:
                done, _ = await asyncio.wait({connection}, timeout=LEADER_CHECK_SECONDS)
                if done:
                    break
                if not await leadership.alive():
                    return True
        finally:
            if not connection.done():
                connection.cancel()
                await asyncio.gather(connection, return_exceptions=True)
                if client.ws is not None:
                    with contextlib.suppress(Exception):
                        await client.ws.close(code=1000)
        error = connection.exception()
        if isinstance(error, discord.PrivilegedIntentsRequired):
            log.error("discord: the Gateway refused the Message Content intent: switch on "
                      "'Message Content Intent' (Developer Portal, Bot, Privileged Gateway "
                      "Intents) and restart")
        elif error is not None:
            log.error("discord: the Gateway connection ended: %s", error)
        return False

    async def _sync_commands(self) -> None:
        """Register the chat commands as global application commands, only when they differ
        from Discord's (a restart with the same commands sends no write)."""
        client = self.client
        assert client is not None and client.application_id is not None
        wanted = command_payloads(self.host.commands)
        try:
            registered: list[Any] = list(
                await client.http.get_global_commands(client.application_id))
            if not commands_differ(wanted, registered):
                return
            await client.http.bulk_upsert_global_commands(client.application_id, wanted)
            log.info("discord: registered %d application commands", len(wanted))
        except discord.HTTPException as exc:
            log.error("discord: cannot register the application commands: %s", exc)

    async def stop(self) -> None:
        """Stop taking messages (the websocket closes); replies still go out over REST."""
        for task in (self._connecting, *self._tasks):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._connecting, self._tasks = None, []

    async def close(self) -> None:
        """Close discord.py's client and the download session."""
        await self.stop()
        client, self.client = self.client, None
        if client is not None:
            await client.close()
        downloads, self._downloads = self._downloads, None
        if downloads is not None:
            await downloads.close()

    # --- inbound ------------------------------------------------------------------------------
    async def _take_messages(self) -> None:
        """Commit the messages to the inbox one at a time, in the order they came."""
        while True:
            message = await self.incoming.get()
            try:
                inbound = await self.to_inbound(message)
                if inbound is not None:
                    await self.host.receive(inbound)
            except Unavailable:
                log.warning("discord: message %s could not be stored (stopping, or the store "
                            "refused it)", message.id)
            except Exception:
                log.exception("discord: message %s cannot be read; skipped", message.id)

    def _allowed(self, guild_id: int, channel_id: int) -> bool:
        guilds, channels = self.settings.guilds, self.settings.channels
        return (not guilds or guild_id in guilds) and (not channels or channel_id in channels)

    async def _parent_of(self, channel: Any) -> int | None:
        """The channel a thread belongs to; None when ``channel`` is not a thread."""
        if isinstance(channel, discord.Thread):
            return channel.parent_id
        if isinstance(channel, discord.abc.GuildChannel):
            return None
        channel_id = int(channel.id)
        if channel_id not in self._parents:  # not cached: ask Discord once
            assert self.client is not None
            fetched = await self.client.fetch_channel(channel_id)
            self._parents[channel_id] = fetched.parent_id if isinstance(
                fetched, discord.Thread) else 0
        return self._parents[channel_id] or None

    def _addressed(self, message: discord.Message) -> bool:
        """Mentioned, or a reply to one of the bot's messages."""
        me = self.client.user if self.client is not None else None
        if me is None:
            return False
        if me.id in message.raw_mentions:
            return True
        reference = message.reference
        resolved = reference.resolved if reference is not None else None
        return isinstance(resolved, discord.Message) and resolved.author.id == me.id

    async def to_inbound(self, message: discord.Message) -> InboundMessage | None:
        """Map a Discord message to an inbound message, or None if it is not for us."""
        me = self.client.user if self.client is not None else None
        if me is None or message.author.bot or message.author.id == me.id \
                or message.webhook_id is not None or message.type not in ANSWERED_TYPES:
            return None
        only_known = False
        reply_to: int | None = message.id
        if message.guild is None:
            conversation = f"{NAME}:dm:{message.author.id}"
            reply_to = None
        else:
            parent = await self._parent_of(message.channel)
            if not self._allowed(message.guild.id, parent or message.channel.id):
                return None
            conversation = f"{NAME}:{message.guild.id}:{parent}:{message.channel.id}" \
                if parent else f"{NAME}:{message.guild.id}:{message.channel.id}"
            if self.settings.respond_mode == "mention" and not self._addressed(message):
                if not parent:
                    return None
                only_known = True  # a thread the bot talks in goes on without a mention
        text = readable(message, me.id)
        pictures = self._pictures(message)
        if pictures:  # the transcript names them; the model sees them
            text = " ".join([*(f"[image: {p.name}]" for p in pictures), text]).strip()
        notice = None
        if not text:
            if not message.attachments:
                return None  # a mention alone
            notice = TEXT_ONLY
        return InboundMessage(
            channel=NAME, conversation=conversation, sender=f"{NAME}:{message.author.id}",
            message_id=str(message.id), text=text,
            address={"channel": str(message.channel.id),
                     "reply_to": str(reply_to) if reply_to else None},
            notice=notice, only_known=only_known, max_chars=MAX_CHARS, attachments=pictures)

    def _pictures(self, message: discord.Message) -> tuple[Attachment, ...]:
        if not self.host.settings.llm_vision:
            return ()
        pictures = [Attachment("image", item.filename[:100],
                               {"url": item.url, "mime": item.content_type.split(";")[0]})
                    for item in message.attachments
                    if item.content_type and item.content_type.split(";")[0] in PICTURE_TYPES]
        return tuple(pictures[:MAX_PICTURES])

    async def take_command(self, interaction: discord.Interaction) -> None:
        """Commit a slash command to the inbox, then defer it ("thinking…", only its user
        sees it); the answer follows through the outbox. Should storing take longer than
        ``ack_seconds``, the command is deferred first and stored right after."""
        data: Mapping[str, Any] = dict(interaction.data or {})
        name = str(data.get("name") or "help")
        options = data.get("options")
        argument = " ".join(str(option.get("value", "")) for option in
                            (options if isinstance(options, list) else [])
                            if isinstance(option, dict))
        channel = interaction.channel
        conversation = await self._command_conversation(interaction)
        if conversation is None or channel is None:
            await interaction.response.send_message(
                "I don't answer in this channel.", ephemeral=True)
            return
        key = str(interaction.id)
        acknowledged = self._deferred[key] = asyncio.Event()
        inbound = InboundMessage(
            channel=NAME, conversation=conversation, sender=f"{NAME}:{interaction.user.id}",
            message_id=f"interaction:{interaction.id}", text="",
            address={"channel": str(channel.id), "interaction": key,
                     "application": str(interaction.application_id),
                     "token": interaction.token},
            command=Command(name, argument.strip()), max_chars=MAX_CHARS)
        storing = asyncio.ensure_future(self.host.receive(inbound))
        try:
            try:
                if not await asyncio.wait_for(asyncio.shield(storing), self.ack_seconds):
                    return  # the same interaction again: it was acknowledged already
            except TimeoutError:
                pass
            except Unavailable:
                await interaction.response.send_message(STOPPING, ephemeral=True)
                return
            try:
                await interaction.response.defer(ephemeral=True, thinking=True)
            except discord.HTTPException as exc:  # 10062: later than Discord's 3 seconds
                log.warning("discord: could not acknowledge /%s in time (%s); its answer "
                            "will not reach Discord", name, exc)
            acknowledged.set()
            await storing
        except Unavailable:
            await interaction.followup.send(STOPPING, ephemeral=True)
        finally:
            acknowledged.set()
            asyncio.get_running_loop().call_later(60.0, self._deferred.pop, key, None)

    async def _command_conversation(self, interaction: discord.Interaction) -> str | None:
        """The conversation a command acts on: the DM's, the channel's or the thread's;
        None outside the allowed servers and channels."""
        channel = interaction.channel
        if interaction.guild_id is None or channel is None:
            return f"{NAME}:dm:{interaction.user.id}"
        parent = await self._parent_of(channel)
        if not self._allowed(interaction.guild_id, parent or channel.id):
            return None
        return f"{NAME}:{interaction.guild_id}:{parent}:{channel.id}" if parent \
            else f"{NAME}:{interaction.guild_id}:{channel.id}"

    # --- outbound -----------------------------------------------------------------------------
    def _running_client(self) -> DiscordClient:
        if self.client is None:
            raise ConnectionError("the Discord channel is not connected yet")
        return self.client

    async def send(self, address: Mapping[str, Any], text: str) -> None:
        """Post one chunk (at most 2,000 characters) of the model's Markdown, replying to the
        message it answers, pinging nobody; or a command's follow-up; or turn the preview
        shown while the model wrote into it."""
        client = self._running_client()
        if not text.strip():
            return  # Discord refuses an empty message
        try:
            if address.get("interaction"):
                await self._follow_up(client, address, text)
                return
            channel = client.get_partial_messageable(int(address["channel"]))
            preview = address.get("preview")
            if isinstance(preview, dict) and preview.get("message"):
                try:
                    await channel.get_partial_message(int(preview["message"])).edit(
                        content=text, allowed_mentions=NO_MENTIONS)
                    return
                except discord.NotFound:
                    log.info("discord: the preview %s is gone; sending", preview["message"])
            reference = None
            if address.get("reply_to"):
                reference = discord.MessageReference(
                    message_id=int(address["reply_to"]), channel_id=channel.id,
                    fail_if_not_exists=False)
            await channel.send(text, reference=reference,  # type: ignore[arg-type]
                               allowed_mentions=NO_MENTIONS)
        except discord.RateLimited as exc:
            raise DeliveryRetry(exc.retry_after) from exc
        except discord.HTTPException as exc:
            raise delivery_error(exc) from exc

    async def _follow_up(self, client: DiscordClient, address: Mapping[str, Any],
                         text: str) -> None:
        acknowledged = self._deferred.get(str(address["interaction"]))
        if acknowledged is not None:  # the command was stored before it was deferred
            await asyncio.wait_for(acknowledged.wait(), 10.0)
        webhook = discord.Webhook.partial(int(address["application"]), str(address["token"]),
                                          client=client)
        webhook.type = discord.WebhookType.application  # an interaction's: ephemeral works
        await webhook.send(text, ephemeral=True, allowed_mentions=NO_MENTIONS, wait=True)

    async def stream(self, address: Mapping[str, Any], text: str, handle: Any) -> Any:
        """The reply growing as the model writes: one message posted (replying to the
        question), then edited; it shows what the reply's first message will hold."""
        if address.get("interaction"):
            return handle
        client = self._running_client()
        shown = split_text(text, MAX_CHARS)[0]
        if not shown.strip():
            return handle
        channel = client.get_partial_messageable(int(address["channel"]))
        if isinstance(handle, dict) and handle.get("message"):
            await channel.get_partial_message(int(handle["message"])).edit(
                content=shown, allowed_mentions=NO_MENTIONS)
            return handle
        reference = None
        if address.get("reply_to"):
            reference = discord.MessageReference(message_id=int(address["reply_to"]),
                                                 channel_id=channel.id,
                                                 fail_if_not_exists=False)
        sent = await channel.send(shown, reference=reference,  # type: ignore[arg-type]
                                  allowed_mentions=NO_MENTIONS)
        return {"message": str(sent.id)}

    async def typing(self, address: Mapping[str, Any]) -> None:
        """"typing…" in the channel (not for a command: Discord shows "thinking…")."""
        if address.get("interaction"):
            return
        await self._running_client().get_partial_messageable(int(address["channel"])).typing()

    async def fetch(self, attachment: Attachment, max_bytes: int) -> Image | None:
        """Download a picture from Discord's CDN; None when larger than ``max_bytes``, not a
        picture, or not on Discord's hosts."""
        url, mime = attachment.ref.get("url"), attachment.ref.get("mime")
        if self._downloads is None or not isinstance(url, str) or mime not in PICTURE_TYPES \
                or urlparse(url).hostname not in self._file_hosts:
            return None
        async with self._downloads.get(url, allow_redirects=False) as response:
            if response.status != 200 or (response.content_length or 0) > max_bytes:
                return None
            data = await response.content.read(max_bytes + 1)
        return Image(str(mime), data, attachment.name) if len(data) <= max_bytes else None


MENTION = re.compile(r"<@!?(\d+)>")
ROLE_MENTION = re.compile(r"<@&(\d+)>")
CHANNEL_MENTION = re.compile(r"<#(\d+)>")


def readable(message: discord.Message, bot_id: int) -> str:
    """The message's text for the model: the bot's mention removed, other mentions as
    ``@name`` / ``#channel``, everything else (line breaks, code) as written."""
    names = {member.id: member.display_name for member in message.mentions}
    roles = {role.id: role.name for role in message.role_mentions}
    guild = message.guild

    def person(match: re.Match[str]) -> str:
        return f"@{names.get(int(match.group(1)), 'someone')}"

    def role(match: re.Match[str]) -> str:
        return f"@{roles.get(int(match.group(1)), 'role')}"

    def place(match: re.Match[str]) -> str:
        found = guild.get_channel_or_thread(int(match.group(1))) if guild else None
        return f"#{found.name}" if found is not None else "#channel"

    text = re.sub(rf"[ \t]*<@!?{bot_id}>[ \t]*", " ", message.content)
    text = MENTION.sub(person, text)
    text = ROLE_MENTION.sub(role, text)
    return CHANNEL_MENTION.sub(place, text).strip()
