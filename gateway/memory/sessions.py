"""Agent sessions: one JSONL file per conversation key, rotated when idle or too large.

``{data_dir}/sessions/{enc(key)}.jsonl``; the first line is a header, every later line one event
with ``type`` and ``ts``. Appends are one ``write`` of whole lines to an ``O_APPEND`` descriptor.
The rotation check is one ``stat`` (size and modification time), so neither it nor the append
ever reads the file, and a file archived by another process (``cloudybot sessions rotate``) is
noticed at once.

A turn replays the tool exchanges of the replies still in rolling memory. They are kept in
memory for the most recently used ``MAX_INDEXED_SESSIONS`` sessions; for any other session they
are read from the end of its file backwards, only as far as the oldest of those replies (the
recent window, never the whole file), with their token counts as written. So what a turn does
with its session never grows with the file's size or with the number of active sessions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.base import jsonio
from gateway.base.files import FILE_MODE, private_dir
from gateway.base.times import iso_utc

if TYPE_CHECKING:
    from gateway.store import SessionWrite, TurnState

log = logging.getLogger(__name__)

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
SUFFIX = ".jsonl"
MAX_INDEXED_SESSIONS = 1024
# Session keys whose file path is kept (encoding a key and joining a path cost ~6 µs a turn).
MAX_CACHED_PATHS = 8192
CountMessage = Callable[[Mapping[str, Any]], int]
MAX_ENCODED_CHARS = 200


def encode_key(key: str) -> str:
    """The file-name form of a session key: ``[A-Za-z0-9._-]`` kept, every other byte ``%XX``.

    A name longer than ``MAX_ENCODED_CHARS`` (file systems stop at 255 bytes, and archive names
    add a timestamp) keeps its first part and ends in ``~`` and a SHA-256 of the key: ``~``
    never occurs in an encoded key, so such a name cannot equal another key's. The key itself
    is in the file's header line.
    """
    # "." and ".." keep their dots: with the suffix they are plain names ("..jsonl").
    encoded = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in key.encode("utf-8"))
    if len(encoded) <= MAX_ENCODED_CHARS:
        return encoded
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    head = encoded[:MAX_ENCODED_CHARS - len(digest) - 1]
    head = head[:head.rfind("%")] if "%" in head[-2:] else head  # never cut a %XX in two
    return f"{head}~{digest}"


def decode_key(name: str) -> str:
    """Invert :func:`encode_key` (for a shortened name, read the header's key instead)."""
    raw = bytearray()
    i = 0
    while i < len(name):
        if name[i] == "%":
            raw.append(int(name[i + 1:i + 3], 16))
            i += 3
        else:
            raw.append(ord(name[i]))
            i += 1
    return raw.decode("utf-8")


@dataclass(frozen=True)
class ToolExchange:
    """The tool calls and results that came before one assistant reply, ready to replay."""

    messages: tuple[dict[str, Any], ...]
    tokens: int


@dataclass
class _Session:
    path: Path
    # assistant message id -> the tool exchange that preceded that reply
    exchanges: dict[int, ToolExchange] = field(default_factory=dict)
    # ``exchanges`` holds every exchange of the replies from this id on (None: none read yet)
    complete_from: int | None = None


@dataclass(frozen=True)
class Rotation:
    """A session that ended: why, where the old file went (None: deleted, or archived in
    PostgreSQL) and the archive's name (None: deleted)."""

    key: str
    reason: str
    archive: Path | None
    name: str | None = None


@dataclass(frozen=True)
class ArchivedSession:
    """An archived session file: its name, size and when it was archived (ISO-8601 UTC)."""

    name: str
    size: int
    archived_at: str


@dataclass(frozen=True)
class SessionStatus:
    """A session on disk: the active file's (size, modification time), if any, and its
    archives, oldest first."""

    key: str
    active: tuple[int, float] | None
    archives: list[ArchivedSession]


@dataclass(frozen=True)
class ActiveSession:
    """An active session: its key, size in bytes, last write (epoch s) and archive count."""

    key: str
    size: int
    last_write: float
    archives: int


RotationObserver = Callable[[Rotation], Awaitable[None]]


async def unobserved(rotation: Rotation) -> None:
    """The observer of a store nobody watches (the CLI's)."""


class Sessions(Protocol):
    """Agent sessions, as JSONL: a header line, then one event per line, rotated when idle or
    too large, archives kept. :class:`SessionStore` keeps them in files (one process);
    :class:`gateway.store.postgres_sessions.PostgresSessions` in PostgreSQL (any number).

    ``state`` is what the turn read (``Store.load_turn``): a store that keeps sessions in the
    database read the session's size, last write and replay window with it. Methods that
    change a session are called under the thread's turn lock, except by the CLI.
    """

    observer: RotationObserver

    def peek(self, key: str, state: TurnState | None = None) -> tuple[str | None, bool]:
        """(why the session would rotate now, or None; whether it exists), changing nothing."""

    async def begin_turn(self, key: str,
                         state: TurnState | None = None) -> tuple[Rotation | None, bool]:
        """Before an agent call: rotate if due (the observer told); return the rotation and
        whether an active session remains."""

    def exchanges(self, key: str, since_id: int,
                  state: TurnState | None = None) -> dict[int, ToolExchange]:
        """Tool exchanges of this session by the id of the reply they preceded, for every
        reply from ``since_id`` on (the oldest message in rolling memory)."""

    def with_commit(self, user_id: str, thread_id: str, key: str,
                    events: Callable[[], Sequence[dict[str, Any]]]) -> SessionWrite | None:
        """A turn's ``events()`` (with the slot ids of ``gateway.store.records``) as lines the
        turn's commit appends, where the store keeps sessions; None (``events`` not called):
        :meth:`write_turn` them after the commit instead."""

    async def write_turn(self, key: str, user_id: str, thread_id: str,
                         events: Sequence[dict[str, Any]],
                         exchange: tuple[int, ToolExchange] | None = None) -> None:
        """Append a turn's events (each gets ``ts``), the header first if the session is new;
        ``exchange`` is its tool exchange by reply id, for replay."""

    def forget_exchanges_before(self, key: str, first_kept_id: int) -> None:
        """Drop what is kept of exchanges whose replies left rolling memory."""

    async def end(self, key: str, reason: str) -> Rotation | None:
        """End the session now (its thread cleared or deleted): archive it, tell the
        observer."""

    async def archive_now(self, key: str, reason: str = "manual") -> Rotation | None:
        """Archive the session (the observer is not told); None if there is none."""

    async def remove(self, key: str) -> int:
        """Delete the session and its archives (its thread purged), tell the observer; return
        how many sessions (active and archived) went."""

    async def session_status(self, key: str) -> SessionStatus:
        """The active session's (size, last write), if any, and its archives, oldest first."""

    async def export(self, key: str, archive: str | None = None) -> bytes | None:
        """The active session (or its archive named ``archive``) as its JSONL bytes, header
        first; None if there is none."""

    async def active_sessions(self) -> list[ActiveSession]:
        """Every active session, by key."""

    async def drop_orphan_archives(self, before: float, dry_run: bool,
                                   has_thread: Callable[[str], Awaitable[bool]]) -> int:
        """Delete archives made before ``before`` (epoch s) whose key has no thread any more
        (with ``dry_run``: only count them); return how many."""


@dataclass(frozen=True)
class RotationRule:
    """When a session ends and the next turn starts a new one: it was idle longer than
    ``idle_minutes``, or it grew larger than ``max_bytes`` (both backends apply this rule)."""

    idle_minutes: float
    max_bytes: int

    def due(self, size: int, last_write: float, now: float) -> str | None:
        """Why a session of ``size`` bytes last written at ``last_write`` (epoch seconds)
        rotates at ``now`` (``size`` or ``idle``), or None."""
        if size > self.max_bytes:
            return "size"
        if size and now - last_write > self.idle_minutes * 60:
            return "idle"
        return None


class SessionStore:
    """Session files under ``root`` with O(1) appends and rotation checks.

    The ``async`` methods are what turns and thread operations use: they change the files,
    then tell ``observer`` (the ``session_rotated`` hook) about the session that ended.
    """

    def __init__(self, root: Path, *, rule: RotationRule, count_message: CountMessage,
                 clock: Callable[[], float] = time.time,
                 observer: RotationObserver = unobserved) -> None:
        self.root = root
        self.observer = observer
        self.count_message = count_message
        self.archive_dir = root / "archive"
        self.rule = rule
        self.clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._paths: dict[str, Path] = {}
        private_dir(self.root)
        private_dir(self.archive_dir)

    def path_for(self, key: str) -> Path:
        """Where the session file of ``key`` lives (it cannot escape ``root``)."""
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= MAX_CACHED_PATHS:
                self._paths.clear()
            path = self._paths[key] = self.root / (encode_key(key) + SUFFIX)
        return path

    # --- state --------------------------------------------------------------------------
    def _session(self, key: str) -> _Session:
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            return session
        session = _Session(self.path_for(key))
        _terminate_torn_line(session.path)
        self._sessions[key] = session
        if len(self._sessions) > MAX_INDEXED_SESSIONS:
            self._sessions.popitem(last=False)
        return session

    def _read_exchanges(self, path: Path, since_id: int) -> dict[int, ToolExchange]:
        """The complete tool exchanges of replies from ``since_id`` on, from the file's tail.

        Events are written in message order, so reading backwards can stop at the first
        message event older than ``since_id``: the work is that of the recent window.
        """
        tail: list[dict[str, Any]] = []
        for line in _reverse_lines(path):
            if b'"messageId"' not in line and b'"replyId"' not in line \
                    and b'"session"' not in line:
                continue  # usage, rotation and notes need no parsing
            try:
                event = jsonio.loads(line)
            except (ValueError, RecursionError):
                continue  # a torn line; read_events reports those
            if not isinstance(event, dict) or event.get("type") == "session":
                break
            message_id = event.get("messageId")
            if isinstance(message_id, int) and message_id < since_id:
                break
            tail.append(event)
        tail.reverse()
        return exchanges_of(tail, self.count_message)

    # --- rotation -----------------------------------------------------------------------------
    def rotation_due(self, key: str) -> str | None:
        """Why the session must rotate now (``idle`` or ``size``), or None. One ``stat``."""
        return self.peek(key)[0]

    def rotate_if_needed(self, key: str) -> Rotation | None:
        """Archive the session if it is idle or too large; return what happened."""
        return self.check(key)[0]

    def peek(self, key: str, state: TurnState | None = None) -> tuple[str | None, bool]:
        """(why the session would rotate now, or None; whether its file exists), changing
        nothing. One ``stat``."""
        try:
            stat = self.path_for(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None, False
        return self.rule.due(stat.st_size, stat.st_mtime, self.clock()), True

    def check(self, key: str) -> tuple[Rotation | None, bool]:
        """Rotate if due; return the rotation (or None) and whether an active file remains."""
        reason, exists = self.peek(key)
        if reason is None:
            return None, exists
        return self.archive(key, reason), False

    def archive(self, key: str, reason: str = "manual") -> Rotation | None:
        """Move the session file to ``archive/`` and forget its state; None if there is none."""
        path = self.path_for(key)
        self._sessions.pop(key, None)
        if not path.exists():
            return None
        stamp = datetime.fromtimestamp(self.clock(), UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        target = self.archive_dir / f"{encode_key(key)}.{stamp}{SUFFIX}"
        suffix = 1
        while target.exists():
            target = self.archive_dir / f"{encode_key(key)}.{stamp}-{suffix}{SUFFIX}"
            suffix += 1
        os.replace(path, target)
        return Rotation(key, reason, target, target.name)

    async def archive_now(self, key: str, reason: str = "manual") -> Rotation | None:
        """:meth:`archive`, as :class:`Sessions` offers it."""
        return self.archive(key, reason)

    async def begin_turn(self, key: str,
                         state: TurnState | None = None) -> tuple[Rotation | None, bool]:
        """Before an agent call: rotate if due (the observer told); return the rotation and
        whether an active session file remains. The caller holds the thread's turn lock."""
        rotation, active = self.check(key)
        if rotation is not None:
            await self.observer(rotation)
        return rotation, active

    async def end(self, key: str, reason: str) -> Rotation | None:
        """End the session now (its thread cleared or deleted): archive it, tell the
        observer. The caller holds the thread's turn lock."""
        rotation = self.archive(key, reason)
        if rotation is not None:
            await self.observer(rotation)
        return rotation

    async def remove(self, key: str) -> int:
        """Delete the session and its archives (its thread purged), tell the observer; return
        how many files went."""
        removed = self.delete_all(key)
        await self.observer(Rotation(key, "purged", None))
        return removed

    def delete_all(self, key: str) -> int:
        """Delete the session file and every archive of ``key``; return how many files went."""
        self._sessions.pop(key, None)
        removed = 0
        prefix = encode_key(key) + "."
        candidates = [self.path_for(key)] + [
            p for p in self.archive_dir.iterdir() if p.name.startswith(prefix)
            and _archived_key(p.name) == encode_key(key)]
        for path in candidates:
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    # --- appends --------------------------------------------------------------------------------
    def append(self, key: str, user_id: str, thread_id: str,
               events: Sequence[dict[str, Any]],
               exchange: tuple[int, ToolExchange] | None = None) -> None:
        """Append events (each gets ``ts``) as whole lines in one write; header first if new.

        ``exchange`` is the turn's tool exchange, keyed by its reply's message id, for replay.
        """
        session = self._session(key)
        now = self.clock()
        ts = iso_utc(now)
        fd = os.open(session.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            # fstat, not a cached size, says whether the file is new: another process
            # (``cloudybot sessions rotate``) may have archived it since we last wrote.
            size = os.fstat(fd).st_size
            lines = []
            if size == 0:
                session.exchanges.clear()
                session.complete_from = 0  # a new file: nothing older to read
                lines.append({"type": "session", "key": key, "userId": user_id,
                              "threadId": thread_id, "createdAt": ts})
            lines.extend({**event, "ts": ts} for event in events)
            data = b"".join(jsonio.dumps(line) + b"\n" for line in lines)
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # end a torn line (a crash, a full disk) before ours
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if exchange is not None:
            session.exchanges[exchange[0]] = exchange[1]

    def with_commit(self, user_id: str, thread_id: str, key: str,
                    events: Callable[[], Sequence[dict[str, Any]]]) -> None:
        """Files are appended after the commit (:meth:`write_turn`)."""
        return None

    async def write_turn(self, key: str, user_id: str, thread_id: str,
                         events: Sequence[dict[str, Any]],
                         exchange: tuple[int, ToolExchange] | None = None) -> None:
        """:meth:`append`, as :class:`Sessions` offers it."""
        self.append(key, user_id, thread_id, events, exchange)

    def exchanges(self, key: str, since_id: int,
                  state: TurnState | None = None) -> dict[int, ToolExchange]:
        """Tool exchanges of this session by the id of the reply they preceded, for every
        reply from ``since_id`` on (the oldest message in rolling memory)."""
        session = self._session(key)
        if session.complete_from is None or since_id < session.complete_from:
            try:
                session.exchanges.update(self._read_exchanges(session.path, since_id))
                session.complete_from = since_id
            except FileNotFoundError:
                session.exchanges.clear()
                session.complete_from = None
        elif session.exchanges and not session.path.exists():
            session.exchanges.clear()  # archived by another process
            session.complete_from = None
        return session.exchanges

    def forget_exchanges_before(self, key: str, first_kept_id: int) -> None:
        """Drop indexed exchanges whose replies left rolling memory (bounded memory)."""
        session = self._sessions.get(key)
        if session is not None:
            for reply_id in [i for i in session.exchanges if i < first_kept_id]:
                del session.exchanges[reply_id]
            if session.complete_from is not None:
                session.complete_from = max(session.complete_from, first_kept_id)

    # --- listing ------------------------------------------------------------------------------
    def list_sessions(self) -> Iterator[tuple[str, int, float]]:
        """``(key, size, mtime)`` of every active session file."""
        for path in sorted(self.root.glob(f"*{SUFFIX}")):
            stat = path.stat()
            name = path.name[: -len(SUFFIX)]
            yield (_header_key(path) if "~" in name else decode_key(name)), stat.st_size, \
                stat.st_mtime

    def archived(self) -> Iterator[tuple[Path, str]]:
        """Every archived file with the key it belongs to."""
        for path in sorted(self.archive_dir.glob(f"*{SUFFIX}")):
            encoded = _archived_key(path.name)
            yield path, (_header_key(path) if "~" in encoded else decode_key(encoded))

    def status(self, key: str) -> SessionStatus:
        """What the session of ``key`` holds on disk now: the active file (if any) and the
        archives, oldest first."""
        try:
            stat = self.path_for(key).stat()
            active: tuple[int, float] | None = (stat.st_size, stat.st_mtime)
        except (FileNotFoundError, NotADirectoryError):
            active = None
        archives = []
        for path in self.archives_of(key):
            try:
                archives.append(ArchivedSession(path.name, path.stat().st_size,
                                                _archived_at(path.name)))
            except FileNotFoundError:
                continue  # purged meanwhile
        return SessionStatus(key, active, archives)

    def archives_of(self, key: str) -> list[Path]:
        """The archived files of ``key``, oldest first."""
        return sorted(p for p in self.archive_dir.iterdir()
                      if _archived_key(p.name) == encode_key(key))

    async def session_status(self, key: str) -> SessionStatus:
        """:meth:`status`, as :class:`Sessions` offers it."""
        return self.status(key)

    async def export(self, key: str, archive: str | None = None) -> bytes | None:
        """The active session file's bytes (or those of its archive named ``archive``), or
        None if there is none."""
        if archive is None:
            path = self.path_for(key)
        else:
            path = self.archive_dir / archive
            if archive != path.name or _archived_key(archive) != encode_key(key):
                return None  # not one of this key's archives
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def active_sessions(self) -> list[ActiveSession]:
        """Every active session file, by key."""
        return [ActiveSession(key, size, mtime, len(self.archives_of(key)))
                for key, size, mtime in self.list_sessions()]

    async def drop_orphan_archives(self, before: float, dry_run: bool,
                                   has_thread: Callable[[str], Awaitable[bool]]) -> int:
        """Delete archive files last changed before ``before`` whose key has no thread."""
        dropped = 0
        for path, key in list(self.archived()):
            try:
                if path.stat().st_mtime >= before or await has_thread(key):
                    continue
                if not dry_run:
                    path.unlink()
            except FileNotFoundError:
                continue
            dropped += 1
        return dropped


def exchanges_of(events: Sequence[dict[str, Any]],
                  count_message: CountMessage) -> dict[int, ToolExchange]:
    """Group ``tool_calls`` / ``tool_result`` events into the complete exchanges they hold.

    A reply's ``toolTokens`` (written with it) is its exchange's token count; without it the
    messages are counted.
    """
    grouped: dict[int, list[dict[str, Any]]] = {}
    written_tokens: dict[int, int] = {}
    for event in events:
        kind = event.get("type")
        if kind == "assistant":
            tokens, message_id = event.get("toolTokens"), event.get("messageId")
            if type(tokens) is int and tokens >= 0 and isinstance(message_id, int):
                written_tokens[message_id] = tokens
            continue
        reply_id = event.get("replyId")
        if not isinstance(reply_id, int):
            continue
        if kind == "tool_calls" and isinstance(event.get("calls"), list):
            grouped.setdefault(reply_id, []).append({
                "role": "assistant", "content": event.get("content"),
                "tool_calls": [{"id": c.get("id"), "type": "function",
                                "function": {"name": c.get("name"),
                                             "arguments": c.get("arguments")}}
                               for c in event["calls"] if isinstance(c, dict)]})
        elif kind == "tool_result":
            grouped.setdefault(reply_id, []).append({
                "role": "tool", "tool_call_id": event.get("toolCallId"),
                "content": event.get("content")})
    exchanges = {}
    for reply_id, messages in grouped.items():
        if complete_exchange(messages):
            tokens = written_tokens.get(reply_id)
            if tokens is None:
                tokens = sum(count_message(m) for m in messages)
            exchanges[reply_id] = ToolExchange(tuple(messages), tokens)
    return exchanges


def _reverse_lines(path: Path, first_block: int = 8192,
                   max_block: int = 1 << 20) -> Iterator[bytes]:
    """The file's non-empty lines, last first; blocks read from the end grow as needed, so a
    reader that stops early reads only the tail. Raises FileNotFoundError."""
    with path.open("rb") as handle:
        position = handle.seek(0, os.SEEK_END)
        block = first_block
        partial = b""
        while position > 0:
            step = min(block, position)
            position -= step
            handle.seek(position)
            lines = (handle.read(step) + partial).split(b"\n")
            partial = lines[0]  # may begin before this block
            for line in reversed(lines[1:]):
                if line.strip():
                    yield line
            block = min(block * 2, max_block)
        if partial.strip():
            yield partial


def complete_exchange(messages: Sequence[dict[str, Any]]) -> bool:
    """True if every tool call has its result and no result lacks its call."""
    calls = {c.get("id") for m in messages for c in m.get("tool_calls") or ()}
    results = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    return bool(calls) and calls == results


def _terminate_torn_line(path: Path) -> bool:
    """After a crash mid-write, end the torn line so the next append starts clean.

    Returns whether the file exists. Reads one byte, never the file.
    """
    try:
        with path.open("rb+") as handle:
            if handle.seek(0, os.SEEK_END) == 0:
                return True
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.write(b"\n")
    except FileNotFoundError:
        return False
    return True


def _archived_at(name: str) -> str:
    """When an archive was made, from its name (``{key}.20261202T101500.123456Z.jsonl``)."""
    stamp = name[:-len(SUFFIX)].rsplit(".", 2)
    try:
        moment = datetime.strptime(f"{stamp[-2]}.{stamp[-1].split('-')[0]}",
                                   "%Y%m%dT%H%M%S.%fZ")
    except (ValueError, IndexError):
        return ""
    return moment.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _archived_key(name: str) -> str:
    """The encoded key of an archive file name ``{enc}.{stamp}.jsonl``."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
    return stem.rsplit(".", 2)[0] if stem.count(".") >= 2 else stem


def _header_key(path: Path) -> str:
    """The key recorded in a session file's header line."""
    try:
        with path.open("rb") as handle:
            header = json.loads(handle.readline() or b"{}")
        return str(header["key"])
    except (ValueError, KeyError, TypeError):
        return path.name


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every well-formed event of a session file; a torn or corrupt line is skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_events(raw, str(path))


def parse_events(raw: bytes, where: str) -> list[dict[str, Any]]:
    """Every well-formed event of a session's JSONL (``where`` names it in warnings); a torn
    or corrupt line is skipped."""
    events = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            log.warning("%s:%d is not a whole JSON line (torn write?); skipped", where, number)
            continue
        if isinstance(event, dict):
            events.append(event)
    return events
