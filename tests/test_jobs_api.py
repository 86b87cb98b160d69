"""``/api/jobs``: make, list, pause, resume and delete the caller's jobs, errors as the
description says; a run's ``job.completed`` webhook event is queued in its commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.jobs import timing
from gateway.store import events as webhook_events
from tests.conftest import Harness
from tests.helpers import Clock, assert_json_error
from tests.test_store_contract import webhook

StartClocked = Callable[..., Awaitable[Harness]]


async def test_jobs_are_made_listed_paused_resumed_and_deleted(start_clocked: StartClocked,
                                                               clock: Clock) -> None:
    clock.now = 1_767_225_600.0  # 2026-01-01T00:00Z
    harness = await start_clocked(jobs_run=False)
    alice, bob = await harness.user("alice"), await harness.user("bob")
    client = harness.client
    made = await client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "cron", "when": "0 9 * * 1-5", "timeZone": "Europe/Paris",
        "text": "Standup"})
    assert made.status == 201, await made.text()
    job = await made.json()
    assert (job["state"], job["schedule"], job["nextRunLocal"]) == (
        "active", "cron 0 9 * * 1-5 (Europe/Paris)", "2026-01-01 08:00 UTC")  # in alice's zone
    assert job["nextRun"] == "2026-01-01T08:00:00.000000Z"
    await assert_json_error(await client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "cron", "when": "0 9 * *", "text": "x"}), 400,
        "invalid_schedule")
    await assert_json_error(await client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "every", "when": "10m", "text": "x"}), 400,
        "interval_too_short")
    await assert_json_error(await client.post(f"/api/jobs/{job['id']}/pause", headers=bob),
                            404, "job_not_found")
    paused = await (await client.post(f"/api/jobs/{job['id']}/pause", headers=alice)).json()
    assert (paused["state"], paused["nextRun"]) == ("paused", None)
    resumed = await (await client.post(f"/api/jobs/{job['id']}/resume", headers=alice)).json()
    assert resumed["nextRun"] == job["nextRun"]
    clock.now = 1_767_254_400.0  # 08:00Z, due
    assert await harness.gateway.scheduler.run_due() == 1
    listed = await (await client.get("/api/jobs", headers=alice)).json()
    assert listed["timeZone"] == "UTC" and [j["id"] for j in listed["jobs"]] == [job["id"]]
    assert listed["jobs"][0]["recentRuns"] == [
        {"due": "2026-01-01T08:00:00.000000Z", "status": "sent", "detail": ""}]
    assert (await (await client.get("/api/jobs", headers=bob)).json())["jobs"] == []
    await assert_json_error(await client.delete(f"/api/jobs/{job['id']}", headers=bob), 404,
                            "job_not_found")
    assert (await client.delete(f"/api/jobs/{job['id']}", headers=alice)).status == 204
    assert (await (await client.get("/api/jobs", headers=alice)).json())["jobs"] == []


async def test_job_ids_and_text_are_checked_before_the_store(harness: Harness) -> None:
    """The event stream's path is no job id (405, only GET), text holding NUL is refused, and
    an id that is not one this API gives is the generic 404."""
    auth = await harness.user()
    response = await harness.client.delete("/api/jobs/events", headers=auth)
    await assert_json_error(response, 405, "method_not_allowed")
    assert set(response.headers["Allow"].split(",")) == {"GET", "HEAD"}
    await assert_json_error(await harness.client.post("/api/jobs", headers=auth, json={
        "threadId": "t1", "kind": "every", "when": "1d", "text": " \x00 "}), 400, "invalid_job")
    await assert_json_error(await harness.client.post("/api/jobs/job_x/pause", headers=auth),
                            404, "not_found")


async def test_a_run_queues_its_job_completed_event_with_its_reply(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked(jobs_run=False)
    await harness.user("alice")
    await harness.gateway.store.create_webhook(webhook(
        "alice", (webhook_events.JOB_COMPLETED,), "wh_jobs"))
    ref = await harness.gateway.resolve_thread("alice", "t1")
    job = await harness.gateway.jobs.create("free", ref, timing.every("1d", "UTC").to(
        "message", "Digest"))
    assert job.next_run is not None
    clock.now = job.next_run
    assert await harness.gateway.scheduler.run_due() == 1
    (delivery,) = await harness.gateway.store.webhook_deliveries("alice", "wh_jobs", 10)
    assert delivery.event == "job.completed"
    assert '"jobId":"' + job.id + '"' in delivery.body and '"status":"sent"' in delivery.body
    assert '"reply":"Digest"' in delivery.body


async def test_the_time_zone_is_set_over_http_and_new_jobs_and_times_are_in_it(
        start_clocked: StartClocked, clock: Clock) -> None:
    clock.now = 1_767_225_600.0  # 2026-01-01T00:00Z
    harness = await start_clocked(jobs_run=False)
    alice, bob = await harness.user("alice"), await harness.user("bob")
    client = harness.client
    assert (await (await client.get("/api/jobs", headers=alice)).json())["timeZone"] == "UTC"

    changed = await client.put("/api/jobs/time-zone", headers=alice,
                               json={"timeZone": "Asia/Tokyo"})
    assert changed.status == 200 and await changed.json() == {"timeZone": "Asia/Tokyo"}
    made = await client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "cron", "when": "0 9 * * *", "text": "Morning"})
    assert made.status == 201, await made.text()
    job = await made.json()
    assert job["timeZone"] == "Asia/Tokyo"
    # 09:00 in Tokyo is midnight UTC: today's has just begun, so tomorrow's
    assert job["nextRun"] == "2026-01-02T00:00:00.000000Z"
    assert (await (await client.get("/api/jobs", headers=alice)).json())["timeZone"] == \
        "Asia/Tokyo"
    # another user's zone is theirs alone
    assert (await (await client.get("/api/jobs", headers=bob)).json())["timeZone"] == "UTC"

    await assert_json_error(await client.put("/api/jobs/time-zone", headers=alice, json={
        "timeZone": "Mars/Olympus"}), 400, "unknown_time_zone")
    await assert_json_error(await client.put("/api/jobs/time-zone", headers=alice, json={
        "timeZone": 9}), 400, "invalid_job")
    await assert_json_error(await client.put("/api/jobs/time-zone", json={
        "timeZone": "Europe/Paris"}), 401)
    assert (await (await client.get("/api/jobs", headers=alice)).json())["timeZone"] == \
        "Asia/Tokyo"  # nothing changed by the refused ones
