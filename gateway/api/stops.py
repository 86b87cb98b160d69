"""Stop generating: ``POST /api/threads/{threadId}/stop`` reaches the streamed ``/chat`` turns
of that thread in flight in this process (:class:`RunningTurns`) and sets their stop.

A stopped turn keeps what the model had written as its reply (stored, in the transcript and in
memory like any reply) and is billed for the gateway's own count of what was sent and received;
see :meth:`gateway.turn.agent.Agent._run_agent`. A stream's client that simply goes away stops
nothing: the turn runs on (``gateway.spawn``), so only this explicit request stops it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from gateway.api.context import caller, thread_from_path


class RunningTurns:
    """The stop events of the streamed turns in flight, by session key."""

    def __init__(self) -> None:
        self._stops: dict[str, set[asyncio.Event]] = {}

    def watch(self, session_key: str, turn: asyncio.Task[Any], stop: asyncio.Event) -> None:
        """Make ``turn``'s ``stop`` (it runs on ``session_key``) reachable by :meth:`stop`
        until the turn ends, whether or not its client is still there."""
        stops = self._stops.setdefault(session_key, set())
        stops.add(stop)

        def ended(_: object) -> None:
            stops.discard(stop)
            if not stops and self._stops.get(session_key) is stops:
                del self._stops[session_key]
        turn.add_done_callback(ended)

    def stop(self, session_key: str) -> bool:
        """Stop every turn in flight on ``session_key``; whether there was one."""
        stops = self._stops.get(session_key, set())
        for stop in stops:
            stop.set()
        return bool(stops)


running_turns_key = web.AppKey("running_turns", RunningTurns)


async def stop_turn(request: web.Request) -> web.Response:
    """Stop the caller's streamed turns in flight on the thread: ``stopped`` says whether one
    was running (a stop that arrives after the turn ended changes nothing)."""
    caller(request)
    ref = await thread_from_path(request)
    stopped = request.app[running_turns_key].stop(ref.session_key)
    return web.json_response({"threadId": ref.thread_id, "stopped": stopped})
