"""``/api/jobs``: the caller's scheduled jobs: list, make, pause, resume, delete; and
``/api/jobs/events``, an event stream of their runs for the dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web

from gateway.api.context import caller
from gateway.api.events import EVENT_STREAM
from gateway.api.middleware import read_json_object
from gateway.base.errors import BadRequest
from gateway.base.times import iso_utc
from gateway.jobs import timing
from gateway.store import Job, JobRequest

RUNS_SHOWN = 5  # the latest runs and misses of each job in the list
KEEPALIVE_SECONDS = 25.0  # a comment line, so that proxies keep the stream open


def job_json(job: Job, zone: str) -> dict[str, object]:
    """A job as the API shows it: its next run in UTC and in the owner's zone."""
    when = timing.When(job.kind, job.spec, job.time_zone)
    return {"id": job.id, "threadId": job.ref.thread_id, "channel": job.ref.channel,
            "kind": job.kind, "spec": job.spec, "timeZone": job.time_zone,
            "schedule": when.describe(), "action": job.action, "text": job.text,
            "misfire": job.misfire, "state": job.state,
            "nextRun": iso_utc(job.next_run) if job.next_run is not None else None,
            "nextRunLocal": timing.local(job.next_run, zone)
            if job.next_run is not None else None,
            "runs": job.runs, "misses": job.misses, "lastStatus": job.last_status,
            "createdAt": job.created_at}


def _text(body: dict[str, object], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string", code="invalid_job")
    return value


async def list_jobs(request: web.Request) -> web.Response:
    """The caller's jobs (oldest first) with their last runs and misses, and their zone."""
    gateway, user = caller(request)
    zone = await gateway.jobs.time_zone(user.user_id)
    shown = []
    for job in await gateway.jobs.list(user.user_id):
        runs = await gateway.store.job_runs(job.id, RUNS_SHOWN)
        shown.append({**job_json(job, zone), "recentRuns": [
            {"due": iso_utc(r.due), "status": r.status, "detail": r.detail} for r in runs]})
    return web.json_response({"timeZone": zone, "jobs": shown})


async def post_job(request: web.Request) -> web.Response:
    """Make a job in one of the caller's threads (``threadId``): 201 with the job; 400 for a
    time that cannot be read or is past, an interval under the plan's; 403 past
    ``max_jobs``."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    ref = await gateway.resolve_thread(user.user_id, body.get("threadId"))
    zone = await gateway.jobs.time_zone(user.user_id)
    job = await gateway.jobs.create(user.plan, ref, JobRequest(
        _text(body, "kind"), _text(body, "when"), _text(body, "timeZone", zone),
        _text(body, "action", "message"), _text(body, "text"),
        _text(body, "misfire", "run_once")))
    return web.json_response(job_json(job, zone), status=201)


async def put_time_zone(request: web.Request) -> web.Response:
    """Set the caller's time zone (``timeZone``, an IANA name): the zone new jobs and the
    times shown are in; 400 ``unknown_time_zone`` for a name that is none."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    zone = await gateway.jobs.set_time_zone(user.user_id, _text(body, "timeZone"))
    return web.json_response({"timeZone": zone})


async def delete_job(request: web.Request) -> web.Response:
    """Delete one of the caller's jobs and its record."""
    gateway, user = caller(request)
    await gateway.jobs.delete(user.user_id, request.match_info["job_id"])
    return web.Response(status=204)


async def pause_job(request: web.Request) -> web.Response:
    """Stop the job's runs until it is resumed."""
    gateway, user = caller(request)
    job = await gateway.jobs.pause(user.user_id, request.match_info["job_id"])
    return web.json_response(job_json(job, await gateway.jobs.time_zone(user.user_id)))


async def resume_job(request: web.Request) -> web.Response:
    """Run the job again from its next time after now."""
    gateway, user = caller(request)
    job = await gateway.jobs.resume(user.user_id, request.match_info["job_id"])
    return web.json_response(job_json(job, await gateway.jobs.time_zone(user.user_id)))


async def job_events(request: web.Request) -> web.StreamResponse:
    """``job.completed`` events of the caller's jobs run by this process, as Server-Sent
    Events (``data``: the job, thread, status and due time), until the client goes."""
    gateway, user = caller(request)
    queue: asyncio.Queue[dict[str, object]] = asyncio.Queue(maxsize=100)

    def listener(user_id: str, event: dict[str, object]) -> None:
        if user_id == user.user_id and not queue.full():
            queue.put_nowait(event)
    response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM,
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    gateway.scheduler.listeners.add(listener)
    try:
        with contextlib.suppress(ConnectionResetError):  # the client went: the stream ends
            await _stream(response, queue, gateway.stopping)
    finally:
        gateway.scheduler.listeners.discard(listener)
    return response


async def _stream(response: web.StreamResponse, queue: asyncio.Queue[dict[str, object]],
                  stopping: asyncio.Event) -> None:
    """Write each event as it comes, and a comment line when none came for a while."""
    await response.write(b": open\n\n")
    while not stopping.is_set():
        try:
            event = await asyncio.wait_for(queue.get(), KEEPALIVE_SECONDS)
        except TimeoutError:
            await response.write(b": keep-alive\n\n")
            continue
        await response.write(f"event: job.completed\ndata: {json.dumps(event)}\n\n".encode())
