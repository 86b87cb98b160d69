"""A chat turn as its edge took it: :class:`Turn`, built once and read by everything after.

The HTTP API builds one per ``POST /chat`` (and ``/v1/chat/completions``), the channel kit one
per channel message; the turn lock, the agent, billing, the commit and the observers all read
this one object instead of passing its parts along.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gateway.base.pictures import Image
from gateway.interfaces import TextSink
from gateway.observe import TraceContext
from gateway.store import ChannelMessage, JobOutcome, ThreadRef


@dataclass(frozen=True)
class Turn:
    """One chat turn.

    :param user_id: who is billed: the sender (in a group chat, not the thread's owner).
    :param ref: the thread. From a channel, its ``user_id`` is the sender, who becomes the
        owner only if the conversation is new (a group's thread stays whoever started it's).
    :param message: what the user wrote.
    :param specialist: the specialist whose instructions join the prompt, if any.
    :param images: pictures the user sent, for a vision model (never stored).
    :param answers: the channel message this turn answers: marked answered in the turn's
        commit, and set only for channel turns.
    :param on_text: awaited with the reply written so far while the provider streams it
        (redacted, growing; it starts again after a round of tool calls).
    :param trace: the W3C Trace Context the turn continues, if any: a request's
        ``traceparent`` (its span becomes the parent of the turn's), or the context of the
        channel message it answers (linked, when the message was taken up after a restart).
    :param stop: once set, the streamed call is cut and what it wrote is the reply (the
        dashboard's Stop: ``POST /api/threads/{id}/stop``); only with ``on_text``.
    :param replace_last: the turn replaces the thread's last exchange (regenerate, edit):
        that exchange leaves memory and the transcript in the turn's commit.
    :param job: the scheduled run this turn is (its job's owner is billed): the run's claim
        ends in the turn's commit, which writes nothing if the claim was lost; a late run's
        reply starts with its note.
    """

    user_id: str
    ref: ThreadRef
    message: str
    specialist: str | None = None
    images: tuple[Image, ...] = ()
    answers: ChannelMessage | None = None
    on_text: TextSink | None = field(default=None, compare=False, repr=False)
    trace: TraceContext | None = None
    stop: asyncio.Event | None = field(default=None, compare=False, repr=False)
    replace_last: bool = False
    job: JobOutcome | None = None

    @property
    def session_key(self) -> str:
        """The thread's session key."""
        return self.ref.session_key

    @property
    def channel(self) -> str:
        """The channel the turn came from."""
        return self.ref.channel

    @property
    def from_channel(self) -> bool:
        """Whether a channel message (not an API call) started it."""
        return self.answers is not None
