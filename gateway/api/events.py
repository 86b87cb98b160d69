"""``POST /chat`` as Server-Sent Events: ``delta`` events while the model writes, one ``done``.

The turn runs as a task of its own (``gateway.spawn``): a client that goes away stops only the
writing, never the turn, which is stored, billed and shown in the transcript as without
streaming. Until the first event is written, a failure is an ordinary JSON error with its
status; after it, an ``error`` event.

The first piece goes out at once; later ones are gathered for ``FLUSH_SECONDS`` between
writes. The deltas concatenated are the reply. The provider's text grows as it is written (redacted
as it goes); trailing white space is held back and leading white space left out, as the
stored reply is stripped, and whatever the stored reply adds comes as a last delta before
``done``. If text was shown that is not part of the reply (the words a model wrote before it
called a tool), a ``reset`` event tells the client to discard what it has; the deltas after it
are the reply.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from aiohttp import web

from gateway.api.keys import gateway_key
from gateway.base.errors import GatewayError
from gateway.turn.agent import TurnResult

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"
# After a write, pieces are gathered this long: ~30 updates a second read as smooth, and a
# model streaming a token at a time does not cost a write (and a wake-up) per token.
FLUSH_SECONDS = 0.03


def wants_events(request: web.Request) -> bool:
    """Whether the client asked for an event stream (``Accept: text/event-stream``)."""
    return any(part.split(";", 1)[0].strip().lower() == EVENT_STREAM
               for part in request.headers.get("Accept", "").split(","))


class ReplyDeltas:
    """The growing reply as the turn writes it, and what of it the client has.

    The writer sleeps on one plain future that new text or the turn's end resolves (no task
    per piece); after each write it gathers pieces for ``FLUSH_SECONDS``, so a model that
    streams a token at a time costs a write per interval, not per token.
    """

    def __init__(self) -> None:
        self.sent = ""
        self.written: list[str] = []  # each text the turn handed over, not yet sent
        self.finished = False
        self._holding = False
        self._waiter: asyncio.Future[None] | None = None

    async def on_text(self, text: str) -> None:
        """The turn's text sink: the reply written so far (it starts again after a tool
        round)."""
        self.written.append(text)
        if not self._holding:
            self._wake()

    def finish(self, *_: object) -> None:
        """The turn ended: the writer sends what is left at once."""
        self.finished = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _sleep(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def wait(self) -> None:
        """Until there is text to send or the turn ended."""
        if not (self.written or self.finished):
            await self._sleep()

    async def hold(self, seconds: float) -> None:
        """Gather pieces for ``seconds``, or less if the turn ends."""
        if self.finished:
            return
        self._holding = True
        handle = asyncio.get_running_loop().call_later(seconds, self._wake)
        try:
            await self._sleep()
        finally:
            handle.cancel()
            self._holding = False

    def take(self) -> list[str]:
        """The texts written since the last call."""
        written, self.written = self.written, []
        return written

    def next(self, text: str) -> list[tuple[str, Any]]:
        """The events that bring the client from what it has to ``text``: a delta, or a
        reset and a delta when ``text`` does not continue what it has."""
        shown = text.strip()
        if shown.startswith(self.sent):
            delta, self.sent = shown[len(self.sent):], shown
            return [("delta", {"text": delta})] if delta else []
        self.sent = shown
        return [("reset", {}), *([("delta", {"text": shown})] if shown else [])]


class EventWriter:
    """Writes events to a lazily prepared response; a client gone is noted, not raised."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self.gone = False
        self._streams = request.app[gateway_key].metrics.event_streams
        self._open = False

    @property
    def started(self) -> bool:
        """Whether the stream's headers went out (errors are events from then on)."""
        return self.response is not None

    async def send_all(self, events: list[tuple[str, Any]]) -> None:
        """Several events in one write."""
        if events:
            await self.write(_encode(events))

    async def finish(self, events: Sequence[tuple[str, Any]] = ()) -> web.StreamResponse:
        """Send the last ``events`` and end the stream, in one write; return the response."""
        await self.write(_encode(events), last=True)
        assert self.response is not None
        return self.response

    async def write(self, data: bytes, last: bool = False) -> None:
        """Write ``data`` (already encoded events), ending the stream if ``last``."""
        if self.gone:
            return
        try:
            if self.response is None:
                self.response = web.StreamResponse(headers={
                    "Content-Type": EVENT_STREAM, "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no"})
                self._streams.inc()  # open streams, for /metrics
                self._open = True
                await self.response.prepare(self.request)
            if last:
                self._closed()
                await self.response.write_eof(data)
            else:
                await self.response.write(data)
        except (ConnectionError, RuntimeError):  # the client went away mid-stream
            self.gone = True
            self._closed()

    def _closed(self) -> None:
        if self._open:
            self._open = False
            self._streams.dec()


def _encode(events: Sequence[tuple[str, Any]]) -> bytes:
    return b"".join(f"event: {event}\ndata: {_json(data)}\n\n".encode()
                    for event, data in events)


async def wait_for_turn(turn: asyncio.Task[TurnResult],
                        deltas: ReplyDeltas) -> AsyncIterator[list[str]]:
    """The texts ``turn`` (running, feeding ``deltas``) writes, a batch every
    ``FLUSH_SECONDS`` at most, until it ends; then read ``turn.result()``."""
    turn.add_done_callback(deltas.finish)
    while not turn.done():
        await deltas.wait()
        yield deltas.take()
        await deltas.hold(FLUSH_SECONDS)
    yield deltas.take()


async def stream_turn(request: web.Request, turn: asyncio.Task[TurnResult],
                      deltas: ReplyDeltas,
                      answer: Callable[[TurnResult], dict[str, Any]]) -> web.StreamResponse:
    """Follow ``turn`` (already running, feeding ``deltas``) as events; ``answer(result)``
    builds the ``done`` object (what a non-streaming ``/chat`` answers)."""
    writer = EventWriter(request)
    async for texts in wait_for_turn(turn, deltas):
        await writer.send_all([event for text in texts for event in deltas.next(text)])
    try:
        result = turn.result()
    except GatewayError as exc:
        if not writer.started:
            raise
        return await writer.finish([("error", {"error": {"code": exc.code,
                                                         "message": exc.message}})])
    except Exception:
        if not writer.started:
            raise
        log.exception("streamed turn failed")
        return await writer.finish([("error", {"error": {"code": "internal_error",
                                                         "message": "internal error"}})])
    events = [event for text in [*deltas.take(), result.reply] for event in deltas.next(text)]
    return await writer.finish([*events, ("done", answer(result))])


async def stream_answer(request: web.Request, reply: str,
                        done: dict[str, Any]) -> web.StreamResponse:
    """An answer known at once (a chat command's) as a stream: one delta, then ``done``."""
    writer = EventWriter(request)
    return await writer.finish([*([("delta", {"text": reply})] if reply else []),
                                ("done", done)])


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
