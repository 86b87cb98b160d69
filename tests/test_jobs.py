"""Scheduled jobs run by a real gateway on an injected clock: on time in their zone across a
DST change, late runs by their misfire rule (never a burst), delivery through the channel's
outbox, agent turns billed like any turn, and a run taken over after its lease is posted once."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gateway.accounts.admin import Actor
from gateway.base.errors import BadRequest, Forbidden
from gateway.interfaces import Command
from gateway.jobs import timing
from gateway.store import Job, JobRequest, ThreadRef
from gateway.testing.fake_llm import FakeLLM, Scripted, completion, tool_call_completion
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import Clock

StartClocked = Callable[..., Awaitable[Harness]]


@pytest.fixture
def start_clocked(start_clocked: StartClocked) -> StartClocked:
    """A gateway on the test's clock whose jobs run only when the test calls ``run_due()``
    (no loop sleeping on the wall clock beside it)."""
    async def start(**overrides: object) -> Harness:
        return await start_clocked(**{"jobs_run": False, **overrides})
    return start
PARIS = "Europe/Paris"
REF = ThreadRef("alice", "t1", "alice--t1", "dashboard")


def paris(*fields: int) -> float:
    return datetime(*fields, tzinfo=ZoneInfo(PARIS)).timestamp()


async def transcript(harness: Harness, key: str = "alice--t1") -> list[str]:
    page = await harness.gateway.store.display_page(key, 100, None)
    return [m.content for m in page.messages]


def req(when: timing.When, action: str, text: str, misfire: str = "run_once") -> JobRequest:
    return when.to(action, text, misfire)


async def make(harness: Harness, request: JobRequest, ref: ThreadRef = REF,
               plan: str = "free") -> Job:
    return await harness.gateway.jobs.create(plan, ref, request)


async def test_a_daily_cron_runs_at_nine_local_on_both_sides_of_dst(
        start_clocked: StartClocked, clock: Clock) -> None:
    clock.to(datetime(2025, 3, 28, 12, 0, tzinfo=UTC))
    harness = await start_clocked()
    await harness.user("alice")
    job = await make(harness, req(timing.cron("0 9 * * *", PARIS), "message", "Standup"))
    runs = []
    for day in (29, 30, 31):  # the clocks go forward on the night of 29 to 30 March
        nine = paris(2025, 3, day, 9, 0)
        stored = await harness.gateway.store.get_job(job.id)
        assert stored is not None and stored.next_run == nine
        clock.to(datetime.fromtimestamp(nine - 1, UTC))
        assert await harness.gateway.scheduler.run_due() == 0  # not a second early
        clock.to(datetime.fromtimestamp(nine, UTC))
        assert await harness.gateway.scheduler.run_due() == 1
        runs.append(datetime.fromtimestamp(clock.now, ZoneInfo(PARIS)).strftime("%H:%M %Z"))
    assert runs == ["09:00 CET", "09:00 CEST", "09:00 CEST"]
    assert await transcript(harness) == ["Standup"] * 3
    # and back in autumn: 09:00 local is 07:00 UTC, then 08:00 UTC
    when = timing.cron("0 9 * * *", PARIS)
    saturday = when.after(paris(2025, 10, 25, 8, 0))
    assert saturday is not None and when.following(saturday, saturday) == saturday + 25 * 3600


async def test_a_late_run_runs_once_marked_late_and_records_every_miss(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    await harness.user("alice", plan="pro")
    job = await make(harness, req(timing.every("1h", "UTC"), "message", "Drink water"),
                     plan="pro")
    assert job.next_run is not None
    clock.now = job.next_run + 5 * 3600 + 60  # the gateway was down five hours
    assert await harness.gateway.scheduler.run_due() == 1  # one run, not six
    assert await harness.gateway.scheduler.run_due() == 0
    (posted,) = await transcript(harness)
    assert posted.startswith("(late: due ") and posted.endswith(") Drink water")
    runs = await harness.gateway.store.job_runs(job.id, 10)
    assert [r.status for r in runs] == ["missed"] * 5 + ["late"]
    after = await harness.gateway.store.get_job(job.id)
    assert after is not None and (after.runs, after.misses) == (1, 5)
    assert after.next_run == job.next_run + 6 * 3600 > clock.now  # the rhythm is kept


async def test_a_late_run_of_a_skip_job_is_recorded_not_posted(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked()
    await harness.user("alice")
    job = await make(harness, req(timing.every("1d", "UTC"), "message", "Digest",
                                         misfire="skip"))
    assert job.next_run is not None
    clock.now = job.next_run + 2 * 86400 + 3600
    assert await harness.gateway.scheduler.run_due() == 1
    assert await harness.gateway.store.get_thread("alice--t1") is None  # nothing posted
    runs = await harness.gateway.store.job_runs(job.id, 10)
    assert [r.status for r in runs] == ["missed", "missed", "skipped"]


async def test_a_channel_job_is_delivered_through_its_conversations_outbox(
        start_clocked: StartClocked, clock: Clock, loop: LoopChannel) -> None:
    harness = await start_clocked()
    await harness.gateway.receive(loop.message("m1", "hello"))
    await loop.wait_for(1)
    thread = await harness.gateway.store.get_thread("loop:c1")
    assert thread is not None
    job = await make(harness, req(timing.after_words("in 10m", clock.now, "UTC")[0], "message",
                                  "Call mum"), ref=thread.ref)
    clock.advance(600)
    assert await harness.gateway.scheduler.run_due() == 1
    await loop.wait_for(2)
    assert loop.texts("loop:c1")[-1] == "Call mum"
    assert loop.addresses[-1] == {"conversation": "loop:c1", "id": "m1"}
    assert (await transcript(harness, "loop:c1"))[-1] == "Call mum"
    done = await harness.gateway.store.get_job(job.id)
    assert done is not None and (done.state, done.last_status) == ("done", "sent")
    await harness.gateway.drain()  # the send arrived; its record may still be on its way
    assert await harness.gateway.store.deliveries("loop:c1") == []  # delivered, forgotten


async def test_a_prompt_job_runs_a_billed_turn_and_a_spent_one_leaves_a_note(
        start_clocked: StartClocked, clock: Clock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    await harness.user("alice")
    job = await make(harness, req(timing.every("1d", "UTC"), "prompt",
                                         "Summarise the news"))
    assert job.next_run is not None
    clock.now = job.next_run
    assert await harness.gateway.scheduler.run_due() == 1
    asked = fake_llm.chat_requests[-1].messages[-1]["content"]
    assert "Scheduled job" in asked and asked.endswith("Summarise the news")
    shown = await transcript(harness)
    assert len(shown) == 2 and shown[0] == asked  # the prompt, then the reply
    assert [c.kind for c in await harness.gateway.store.ledger("alice")][-1] == "chat"
    await harness.gateway.store.grant_credits("alice", -10_000)
    clock.now += 86400
    assert await harness.gateway.scheduler.run_due() == 1
    assert (await transcript(harness))[-1].startswith(f"Scheduled job {job.id} did not run: "
                                                      "no AI credits")
    assert [r.status for r in await harness.gateway.store.job_runs(job.id, 5)] == [
        "refused", "sent"]
    assert len(fake_llm.chat_requests) == 1  # refused before any call


async def test_a_run_whose_process_died_is_run_once_after_its_lease(
        start_clocked: StartClocked, clock: Clock) -> None:
    harness = await start_clocked(jobs_lease_seconds=30.0)
    await harness.user("alice")
    job = await make(harness, req(timing.every("1d", "UTC"), "message", "Ping"))
    assert job.next_run is not None
    clock.now = job.next_run
    store = harness.gateway.store
    (dead,) = await store.claim_jobs(clock.now, 30.0, 10)  # claimed by a process that died
    assert await harness.gateway.scheduler.run_due() == 0  # its lease holds the run
    clock.advance(31)
    assert await harness.gateway.scheduler.run_due() == 1
    # the dead claim's result, had it got that far, is refused: posted once
    late = harness.gateway.scheduler.outcome(dead)
    await harness.gateway.scheduler.post(job, "Ping", late)
    assert await transcript(harness) == ["Ping"]
    assert [r.status for r in await store.job_runs(job.id, 5)] == ["sent"]


async def test_plan_limits_and_bad_timings_are_refused(start_clocked: StartClocked,
                                                       clock: Clock) -> None:
    harness = await start_clocked()
    await harness.user("alice")
    with pytest.raises(BadRequest, match="at most every 1h"):
        await make(harness, req(timing.every("5m", "UTC"), "message", "x"))
    with pytest.raises(BadRequest, match="at most every 1h"):
        await make(harness, req(timing.cron("*/5 * * * *", "UTC"), "message", "x"))
    with pytest.raises(BadRequest, match="past"):
        await make(harness, req(timing.at("2001-01-01T09:00", "UTC"), "message", "x"))
    with pytest.raises(BadRequest, match="unknown time zone"):
        timing.cron("0 9 * * *", "Mars/Olympus")
    with pytest.raises(BadRequest, match="five fields"):
        timing.cron("0 9 * *", "UTC")
    for _ in range(10):
        await make(harness, req(timing.every("1d", "UTC"), "message", "x"))
    with pytest.raises(Forbidden, match="at most 10 jobs"):
        await make(harness, req(timing.every("1d", "UTC"), "message", "x"))


async def test_the_model_schedules_with_the_tool_and_reads_the_next_run_in_the_users_zone(
        start_clocked: StartClocked, clock: Clock, fake_llm: FakeLLM) -> None:
    clock.to(datetime(2025, 3, 28, 12, 0, tzinfo=UTC))
    harness = await start_clocked()
    headers = await harness.user("alice")
    await harness.gateway.jobs.set_time_zone("alice", PARIS)
    call = json.dumps({"kind": "cron", "when": "0 9 * * *", "text": "Good morning!"})
    fake_llm.script = [Scripted(body=tool_call_completion([("c1", "schedule", call)])),
                       Scripted(body=completion("Done: every day at 9."))]
    response = await harness.chat(headers, "Say good morning every day at 9")
    assert response.status == 200, await response.text()
    result = fake_llm.chat_requests[-1].messages[-1]["content"]
    assert result.startswith("Scheduled job_") and "Next run: 2025-03-29 09:00 CET" in result
    (job,) = await harness.gateway.jobs.list("alice")
    assert (job.kind, job.spec, job.time_zone, job.ref.session_key) == (
        "cron", "0 9 * * *", PARIS, "alice--t1")
    # the model's bad time is the gateway's to refuse, in words it can read
    fake_llm.script = [Scripted(body=tool_call_completion([("c2", "schedule", json.dumps(
        {"kind": "cron", "when": "every morning", "text": "x"}))])),
        Scripted(body=completion("Sorry."))]
    await harness.chat(headers, "and again")
    assert fake_llm.chat_requests[-1].messages[-1]["content"].startswith(
        "error: a cron expression has five fields")


async def test_remind_and_jobs_commands_on_a_channel(start_clocked: StartClocked, clock: Clock,
                                                     loop: LoopChannel) -> None:
    harness = await start_clocked()
    await harness.gateway.receive(loop.message("m1", "", command=Command(
        "remind", "in 10m Call mum")))
    (answer,) = [text for _, text in await loop.wait_for(1)]
    assert answer.startswith("OK: job_") and "next " in answer
    await harness.gateway.receive(loop.message("m2", "", command=Command("jobs", "tz Asia/Tokyo")))
    await harness.gateway.receive(loop.message("m3", "", command=Command("jobs")))
    listed = [text for _, text in await loop.wait_for(3)][-1]
    assert "time zone Asia/Tokyo" in listed and "Call mum" in listed and "JST" in listed
    clock.advance(600)
    assert await harness.gateway.scheduler.run_due() == 1
    assert [text for _, text in await loop.wait_for(4)][-1] == "Call mum"
    (job,) = await harness.gateway.jobs.list("loop:ada")
    await harness.gateway.receive(loop.message("m4", "", command=Command("jobs",
                                                                         f"delete {job.id}")))
    assert [text for _, text in await loop.wait_for(5)][-1] == f"Deleted {job.id}."


async def test_a_blocked_account_s_jobs_are_recorded_refused_and_post_nothing(
        start_clocked: StartClocked, clock: Clock, fake_llm: FakeLLM) -> None:
    harness = await start_clocked()
    await harness.user("alice")
    reminder = await make(harness, req(timing.every("1d", "UTC"), "message", "Stretch"))
    prompt = await make(harness, req(timing.every("1d", "UTC"), "prompt", "The news"))
    assert reminder.next_run is not None and prompt.next_run is not None
    await harness.gateway.admin.set_blocked("alice", True, Actor("operator", "cli"))
    clock.now = max(reminder.next_run, prompt.next_run)
    assert await harness.gateway.scheduler.run_due() == 2
    assert await harness.gateway.store.get_thread("alice--t1") is None  # nothing posted
    for job in (reminder, prompt):
        [run] = await harness.gateway.store.job_runs(job.id, 5)
        assert (run.status, run.detail) == ("refused", "account blocked")
    assert fake_llm.chat_requests == []
    await harness.gateway.admin.set_blocked("alice", False, Actor("operator", "cli"))
    clock.now += 86400
    assert await harness.gateway.scheduler.run_due() == 2
    assert "Stretch" in await transcript(harness)  # unblocked: its jobs run again
