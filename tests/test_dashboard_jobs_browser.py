"""The dashboard's Jobs panel in Chromium: the user's jobs with their next run, paused,
resumed and deleted through the API; a run posted in the open thread shows up in it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.jobs import timing
from tests.conftest import Harness
from tests.test_dashboard_browser import Dashboard, browser, dashboard, expect

__all__ = ["browser", "dashboard"]  # the fixtures this module uses


@pytest.fixture
async def harness(start_gateway: Callable[..., Awaitable[Harness]]) -> Harness:
    """A gateway whose jobs run only when the test calls ``run_due()``: with the scheduler's
    loop running beside it, the loop could claim a run first, and ``run_due()`` would return
    before that run was written."""
    return await start_gateway(jobs_run=False)


async def test_the_jobs_panel_lists_pauses_deletes_and_a_run_shows_in_its_thread(
        dashboard: Dashboard) -> None:
    gateway = dashboard.harness.gateway
    auth = await dashboard.harness.user()
    await gateway.jobs.set_time_zone("alice", "Europe/Paris")
    assert (await dashboard.harness.chat(auth, "hello")).status == 200
    ref = await gateway.resolve_thread("alice", "t1")
    daily = await gateway.jobs.create("free", ref, timing.cron("0 9 * * *", "Europe/Paris").to(
        "message", "Standup <b>now</b>"))
    soon = await gateway.jobs.create("free", ref, timing.every("1d", "UTC").to(
        "message", "Daily digest"))
    await dashboard.sign_in(auth)
    await dashboard.page.get_by_test_id("thread").first.click()
    await dashboard.tab("Jobs")
    jobs = dashboard.testid("job")
    await expect(jobs).to_have_count(2)
    first: Any = jobs.filter(has_text="Standup")
    await expect(first).to_contain_text("Standup <b>now</b>")  # text, never markup
    await expect(first.get_by_test_id("job-next")).to_contain_text("09:00 C")
    await dashboard.page.get_by_text("Times in Europe/Paris.").wait_for()
    await first.get_by_role("button", name="Pause").click()
    await expect(first).to_have_attribute("data-state", "paused")
    assert (await gateway.store.get_job(daily.id)).state == "paused"  # type: ignore[union-attr]
    await first.get_by_role("button", name="Resume").click()
    await expect(first).to_have_attribute("data-state", "active")
    await first.get_by_role("button", name="Delete").click()
    await expect(jobs).to_have_count(1)
    assert await gateway.store.get_job(daily.id) is None
    # the run is told to the page, which reloads the open thread
    await gateway.store.set_job_state("alice", soon.id, "active", gateway.clock() - 1)
    assert await gateway.scheduler.run_due() == 1
    await expect(dashboard.messages("assistant").last).to_contain_text("Daily digest")
    await dashboard.shot("jobs")


async def test_the_time_zone_is_set_in_the_panel_and_misses_are_shown(
        dashboard: Dashboard) -> None:
    gateway = dashboard.harness.gateway
    auth = await dashboard.harness.user()
    assert (await dashboard.harness.chat(auth, "hello")).status == 200
    ref = await gateway.resolve_thread("alice", "t1")
    job = await gateway.jobs.create("free", ref, timing.cron("0 9 * * *", "UTC").to(
        "message", "Standup"))
    await gateway.store.set_job_state("alice", job.id, "active", gateway.clock() - 3 * 86400)
    await dashboard.sign_in(auth)
    await dashboard.tab("Jobs")
    await dashboard.page.get_by_text("Times in UTC.").wait_for()

    zone = dashboard.page.get_by_label("Your time zone")
    await zone.fill("Mars/Olympus")
    await dashboard.page.get_by_role("button", name="Set time zone").click()
    await expect(dashboard.page.locator("#job-error")).to_contain_text("Mars/Olympus")
    assert await gateway.jobs.time_zone("alice") == "UTC"
    await zone.fill("Asia/Tokyo")
    await dashboard.page.get_by_role("button", name="Set time zone").click()
    await dashboard.page.get_by_text("Times in Asia/Tokyo.").wait_for()
    assert await gateway.jobs.time_zone("alice") == "Asia/Tokyo"

    # a job whose runs were missed says how many (misfire=skip records each one it skips)
    missed = await gateway.jobs.create("free", ref, timing.every("1d", "UTC").to(
        "message", "Digest", misfire="skip"))
    await gateway.store.set_job_state("alice", missed.id, "active",
                                      gateway.clock() - 3 * 86400)
    await gateway.scheduler.run_due()
    await dashboard.tab("Jobs")
    row = dashboard.testid("job").filter(has_text="Digest")
    await expect(row.get_by_test_id("job-misses")).to_contain_text("missed")
