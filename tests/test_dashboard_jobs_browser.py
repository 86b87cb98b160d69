"""The dashboard's Jobs panel in Chromium: the user's jobs with their next run, paused,
resumed and deleted through the API; a run posted in the open thread shows up in it."""

from __future__ import annotations

from typing import Any

from gateway.jobs import timing
from tests.test_dashboard_browser import Dashboard, browser, dashboard, expect

__all__ = ["browser", "dashboard"]  # the fixtures this module uses


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
