"""``POST /chat`` as Server-Sent Events: ``delta`` events while the model writes, one ``done``.

The turn runs as a task of its own (``gateway.spawn``): a client that goes away stops only the
writing, never the turn, which is stored, billed and shown in the transcript as without
streaming. Until the first event is written, a failure is an ordinary JSON error with its
status; after it, an ``error`` event.

The deltas concatenated are the reply. The provider's text grows as it is written (redacted
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
from collections.abc import Callable
from typing import Any

from aiohttp import web

from ..agent import TurnResult
from ..errors import GatewayError

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"


def wants_events(request: web.Request) -> bool:
    """Whether the client asked for an event stream (``Accept: text/event-stream``)."""
    return any(part.split(";", 1)[0].strip().lower() == EVENT_STREAM
               for part in request.headers.get("Accept", "").split(","))


class ReplyDeltas:
    """The growing reply as the turn writes it, and what of it the client has."""

    def __init__(self) -> None:
        self.sent = ""
        self.written: list[str] = []  # each text the turn handed over, not yet sent
        self.changed = asyncio.Event()

    async def on_text(self, text: str) -> None:
        """The turn's text sink: the reply written so far (it starts again after a tool
        round). Each becomes its own delta, also when several arrive at once."""
        self.written.append(text)
        self.changed.set()

    def take(self) -> list[str]:
        """The texts written since the last call."""
        self.changed.clear()
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

    @property
    def started(self) -> bool:
        """Whether the stream's headers went out (errors are events from then on)."""
        return self.response is not None

    async def send(self, event: str, data: Any) -> None:
        """One ``event:``/``data:`` pair (JSON on one line)."""
        await self.send_all([(event, data)])

    async def send_all(self, events: list[tuple[str, Any]]) -> None:
        """Several events in one write."""
        if self.gone or not events:
            return
        try:
            if self.response is None:
                self.response = web.StreamResponse(headers={
                    "Content-Type": EVENT_STREAM, "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no"})
                await self.response.prepare(self.request)
            await self.response.write(b"".join(
                f"event: {event}\ndata: {_json(data)}\n\n".encode() for event, data in events))
        except (ConnectionError, RuntimeError):  # the client went away mid-stream
            self.gone = True

    async def finish(self) -> web.StreamResponse:
        """End the stream and return the response."""
        assert self.response is not None
        if not self.gone:
            try:
                await self.response.write_eof()
            except (ConnectionError, RuntimeError):
                self.gone = True
        return self.response


async def stream_turn(request: web.Request, turn: asyncio.Task[TurnResult],
                      deltas: ReplyDeltas,
                      answer: Callable[[TurnResult], dict[str, Any]]) -> web.StreamResponse:
    """Follow ``turn`` (already running, feeding ``deltas``) as events; ``answer(result)``
    builds the ``done`` object (what a non-streaming ``/chat`` answers)."""
    writer = EventWriter(request)
    while not turn.done():
        changed = asyncio.ensure_future(deltas.changed.wait())
        await asyncio.wait({turn, changed}, return_when=asyncio.FIRST_COMPLETED)
        changed.cancel()
        if deltas.changed.is_set():
            await writer.send_all([event for text in deltas.take()
                                   for event in deltas.next(text)])
    try:
        result = turn.result()
    except GatewayError as exc:
        if not writer.started:
            raise
        await writer.send("error", {"error": {"code": exc.code, "message": exc.message}})
        return await writer.finish()
    except Exception:
        if not writer.started:
            raise
        log.exception("streamed turn failed")
        await writer.send("error", {"error": {"code": "internal_error",
                                              "message": "internal error"}})
        return await writer.finish()
    events = [event for text in [*deltas.take(), result.reply] for event in deltas.next(text)]
    await writer.send_all([*events, ("done", answer(result))])
    return await writer.finish()


async def stream_answer(request: web.Request, reply: str,
                        done: dict[str, Any]) -> web.StreamResponse:
    """An answer known at once (a chat command's) as a stream: one delta, then ``done``."""
    writer = EventWriter(request)
    if reply:
        await writer.send("delta", {"text": reply})
    await writer.send("done", done)
    return await writer.finish()


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
