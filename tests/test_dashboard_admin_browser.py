"""The dashboard's Admin view in headless Chromium (the fixtures and the ``Dashboard`` steps are
tests/test_dashboard_browser.py's and tests/test_dashboard_conversation.py's): only admins have
it (``#admin``, the Admin button); users searched, filtered, paged, blocked and unblocked,
granted credits with a reason, capped per day; the usage chart against ``/api/admin/usage``;
health; the audit log and its export; no Content Security Policy refusal on the way; 375 px.
Every check of an act goes through the HTTP API too. Screenshots go to
``test-artifacts/dashboard/``."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gateway.accounts.admin import Actor
from gateway.interfaces import DeliveryRetry
from gateway.store import Webhook, WebhookAttempt, WebhookDelivery
from gateway.store import events as webhook_events
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel
from tests.helpers import assert_json_error, until
from tests.test_admin_api import admin_of
from tests.test_dashboard_browser import Dashboard, browser, expect
from tests.test_dashboard_conversation import OpenBoard, open_board

__all__ = ["browser", "open_board"]  # the fixtures, shared
StartGateway = Callable[..., Awaitable[Harness]]
OpenAdmin = Callable[..., Awaitable[Dashboard]]
NOT_A_WHOLE_NUMBER = "credits must be a whole number from 1 to 1000000000"


@pytest.fixture
async def open_admin(open_board: OpenBoard) -> AsyncIterator[OpenAdmin]:
    """Open a dashboard signed in as an admin (``root`` unless ``auth`` says whom), its Admin
    view open; at the end, no page may have had a Content Security Policy refusal."""
    boards: list[Dashboard] = []

    async def open_it(harness: Harness, width: int = 1280,
                      auth: dict[str, str] | None = None) -> Dashboard:
        board = await open_board(harness, width=width, auth=auth or await admin_of(harness))
        boards.append(board)
        await board.testid("admin-button").click()
        await expect(board.testid("admin-view")).to_be_visible()
        await expect(rows(board)).not_to_have_count(0)
        return board

    yield open_it
    assert [violation for board in boards for violation in board.violations] == []


def rows(board: Dashboard) -> Any:
    return board.testid("user-row")


def user_row(board: Dashboard, user_id: str) -> Any:
    return board.page.locator(f'[data-testid="user-row"][data-user-id="{user_id}"]')


def user_detail(board: Dashboard, user_id: str) -> Any:
    return board.page.locator(f'[data-testid="user-detail"][data-user-id="{user_id}"]')


class OnBob(NamedTuple):
    """Root's Admin view open beside bob's account: bob's row and the row under it (its
    forms and messages)."""

    root: dict[str, str]
    bob: dict[str, str]
    board: Dashboard
    row: Any
    detail: Any


async def on_bob(harness: Harness, open_admin: OpenAdmin) -> OnBob:
    root = await admin_of(harness)
    bob = await harness.user("bob")
    board = await open_admin(harness, auth=root)
    return OnBob(root, bob, board, user_row(board, "bob"), user_detail(board, "bob"))


async def search_users(board: Dashboard, text: str) -> None:
    await board.testid("user-search").fill(text)
    await board.testid("user-search-submit").click()
    await expect(board.testid("users-status")).to_have_text(re.compile(r"shown|No account"))


async def section(board: Dashboard, name: str) -> None:
    await board.page.get_by_role("tab", name=name, exact=True).click()


async def account(harness: Harness, root: dict[str, str], user_id: str) -> dict[str, Any]:
    """The account as ``GET /api/admin/users`` answers it."""
    response = await harness.client.get("/api/admin/users", params={"q": user_id},
                                        headers=root)
    assert response.status == 200, await response.text()
    [user] = [u for u in (await response.json())["users"] if u["userId"] == user_id]
    return user  # type: ignore[no-any-return]


async def api_json(harness: Harness, path: str, headers: dict[str, str],
                   **params: str) -> Any:
    response = await harness.client.get(path, params=params, headers=headers)
    assert response.status == 200, await response.text()
    return await response.json()


# --- who has it ------------------------------------------------------------------------------
async def test_a_non_admin_has_no_admin_button_and_admin_shows_nothing(
        harness: Harness, open_board: OpenBoard) -> None:
    alice = await harness.user("alice")
    board = await open_board(harness, auth=alice)
    button, view = board.testid("admin-button"), board.testid("admin-view")
    await expect(button).to_be_hidden()
    assert await button.bounding_box() is None  # not in the page's flow
    await board.page.goto(board.url("/#admin"))  # the address, edited
    await expect(view).to_be_hidden()
    await board.page.reload()  # and opened afresh: the latest thread takes the address
    await board.testid("composer").wait_for()
    await expect(view).to_be_hidden()
    await expect(button).to_be_hidden()
    assert board.page.url.startswith(board.url("/#thread="))
    status = await board.page.evaluate(
        "() => fetch('/api/admin/users').then(async r => [r.status, (await r.json()).error.code])")
    assert status == [403, "admin_only"]
    await assert_json_error(await harness.client.get("/api/admin/users", headers=alice), 403,
                            "admin_only")
    assert board.violations == []


async def test_an_admin_demoted_meanwhile_reads_you_are_not_an_admin(
        harness: Harness, open_admin: OpenAdmin) -> None:
    board = await open_admin(harness)
    await harness.gateway.admin.set_admin("root", False, Actor("operator", "cli"))
    await section(board, "Health")
    await expect(board.page.locator("#health-error")).to_have_text("You are not an admin.")
    await board.testid("health-refresh").click()  # still, and said again
    await expect(board.page.locator("#health-error")).to_have_text("You are not an admin.")
    await section(board, "Users")
    await expect(board.testid("users-error")).to_have_text("You are not an admin.")


async def test_signing_out_of_an_admin_leaves_nothing_for_the_next_account(
        harness: Harness, open_admin: OpenAdmin) -> None:
    board = await open_admin(harness)
    alice = await harness.user("alice")
    await board.testid("sign-out").click()
    await board.testid("token-input").fill(alice["Authorization"].removeprefix("Bearer "))
    await board.testid("sign-in").click()
    await expect(board.testid("composer")).to_be_visible()
    await expect(board.testid("admin-button")).to_be_hidden()
    await expect(board.testid("admin-view")).to_be_hidden()
    assert await board.page.locator("#users-rows").inner_html() == ""  # dropped, not hidden
    await board.page.goto(board.url("/#admin"))
    await expect(board.testid("admin-view")).to_be_hidden()


async def test_the_admin_view_by_keyboard(harness: Harness, open_board: OpenBoard) -> None:
    board = await open_board(harness, auth=await admin_of(harness))
    await board.testid("admin-button").focus()
    await board.page.keyboard.press("Enter")
    await expect(board.page.locator("#admin-heading")).to_be_focused()
    users = board.page.get_by_role("tab", name="Users", exact=True)
    await users.focus()
    await board.page.keyboard.press("ArrowRight")
    usage = board.page.get_by_role("tab", name="Usage and cost", exact=True)
    await expect(usage).to_be_focused()
    await expect(usage).to_have_attribute("aria-selected", "true")
    await expect(board.testid("admin-usage-chart").locator("svg")).to_be_visible()
    await board.page.keyboard.press("ArrowLeft")
    await expect(users).to_have_attribute("aria-selected", "true")
    await board.testid("user-search").focus()
    await board.page.keyboard.type("ro")
    await board.page.keyboard.press("Enter")  # the search form
    await expect(board.testid("users-status")).to_have_text("1 account shown.")
    await board.testid("back-to-chat").focus()
    await board.page.keyboard.press("Enter")
    await expect(board.testid("composer")).to_be_focused()


async def test_admin_is_an_address_and_back_to_chat_is_one_click(
        harness: Harness, open_admin: OpenAdmin) -> None:
    board = await open_admin(harness)
    assert board.page.url == board.url("/#admin")
    await board.page.reload()
    await expect(board.testid("admin-view")).to_be_visible()
    await expect(rows(board)).to_have_count(1)  # root alone
    await board.testid("back-to-chat").click()
    await expect(board.testid("admin-view")).to_be_hidden()
    await expect(board.testid("composer")).to_be_visible()
    assert board.page.url.startswith(board.url("/#thread="))
    await board.page.go_back()
    await expect(board.testid("admin-view")).to_be_visible()
    await board.page.go_forward()
    await expect(board.testid("composer")).to_be_visible()


# --- users -----------------------------------------------------------------------------------
async def test_an_admin_searches_filters_and_pages_users(harness: Harness,
                                                        open_admin: OpenAdmin) -> None:
    root = await admin_of(harness)
    for number in range(55):
        await harness.user(f"user-{number:02d}")
    for blocked in ("user-07", "user-31"):
        await harness.gateway.admin.set_blocked(blocked, True, Actor("operator", "cli"))
    board = await open_admin(harness, auth=root)
    await expect(rows(board)).to_have_count(50)  # a page: 56 accounts
    more = board.testid("users-more")
    await more.click()
    await expect(rows(board)).to_have_count(56)
    await expect(more).to_be_hidden()
    ids = [await row.get_attribute("data-user-id") for row in await rows(board).all()]
    assert ids == sorted(ids) and len(set(ids)) == 56
    await board.shot("admin-users")

    await search_users(board, "USER-1")  # any case
    await expect(rows(board)).to_have_count(10)
    await board.page.get_by_label("Blocked", exact=True).select_option("true")
    await expect(rows(board)).to_have_count(0)
    await expect(board.testid("users-status")).to_have_text("No account matches.")
    await search_users(board, "")
    await expect(rows(board)).to_have_count(2)
    assert [await row.get_attribute("data-user-id") for row in await rows(board).all()] == [
        "user-07", "user-31"]
    await expect(user_row(board, "user-07").get_by_test_id("user-blocked")).to_have_text(
        "blocked")
    await board.page.get_by_label("Blocked", exact=True).select_option("")
    await board.page.get_by_label("Role").select_option("true")
    await expect(rows(board)).to_have_count(1)
    await expect(rows(board)).to_have_attribute("data-user-id", "root")


async def test_block_and_unblock_from_the_table_and_not_oneself(
        harness: Harness, open_admin: OpenAdmin) -> None:
    root, bob, board, row, detail = await on_bob(harness, open_admin)
    await row.get_by_test_id("block-toggle").click()
    await expect(detail).to_contain_text("Block bob?")
    await detail.get_by_role("button", name="Cancel").click()  # nothing happens without a yes
    await expect(detail).to_be_hidden()
    assert (await account(harness, root, "bob"))["blocked"] is False

    await row.get_by_test_id("block-toggle").click()
    await detail.get_by_test_id("block-confirm").click()
    await expect(row).to_have_attribute("data-blocked", "true")
    await expect(board.testid("users-status")).to_have_text("bob is blocked.")
    await assert_json_error(await harness.client.get("/api/threads", headers=bob), 403,
                            "account_blocked")
    await expect(row.get_by_test_id("block-toggle")).to_have_text("Unblock")
    await row.get_by_test_id("block-toggle").click()
    await expect(detail).to_contain_text("Let bob in again?")
    await detail.get_by_test_id("block-confirm").click()
    await expect(row).to_have_attribute("data-blocked", "false")
    assert (await harness.client.get("/api/threads", headers=bob)).status == 200

    own, own_detail = user_row(board, "root"), user_detail(board, "root")
    await own.get_by_test_id("block-toggle").click()
    await own_detail.get_by_test_id("block-confirm").click()
    await expect(own_detail.get_by_test_id("row-error")).to_have_text(
        "You cannot block your own account; another admin can.")
    await expect(own).to_have_attribute("data-blocked", "false")
    await board.shot("admin-block-self")
    assert (await account(harness, root, "root"))["blocked"] is False


async def test_grant_credits_with_a_reason_and_see_it_in_the_audit_log(
        harness: Harness, open_admin: OpenAdmin) -> None:
    root, bob, board, row, detail = await on_bob(harness, open_admin)
    await row.get_by_test_id("grant-open").click()
    amount, reason = detail.get_by_test_id("grant-amount"), detail.get_by_test_id("grant-reason")
    error = detail.get_by_test_id("row-error")
    await expect(amount).to_be_focused()
    await amount.fill("250")
    await detail.get_by_role("button", name="Grant").click()  # no reason: not sent
    assert await reason.evaluate("box => box.validity.valueMissing") is True
    await expect(error).to_have_text("")
    for bad in ("0", "lots"):  # the API's word on them, in the form
        await amount.fill(bad)
        await reason.fill("refund for the outage")
        await detail.get_by_role("button", name="Grant").click()
        await expect(error).to_have_text(NOT_A_WHOLE_NUMBER)
    await amount.fill("250")
    await reason.fill("   ")
    await detail.get_by_role("button", name="Grant").click()
    await expect(error).to_have_text("reason must not be empty")
    assert (await account(harness, root, "bob"))["credits"] == 1000  # nothing granted yet

    await reason.fill("refund for the outage")
    await detail.get_by_role("button", name="Grant").click()
    await expect(row.get_by_test_id("user-credits")).to_have_text("1,250")
    await expect(detail).to_be_hidden()
    await expect(board.testid("users-status")).to_have_text("Granted 250 credits to bob.")
    assert (await api_json(harness, "/api/user/credits", bob))["credits"] == 1250

    await section(board, "Audit log")
    grant = board.page.locator('[data-testid="audit-row"][data-action="credits.grant"]')
    await expect(grant).to_have_count(1)
    await expect(grant).to_contain_text("root")
    await expect(grant).to_contain_text("bob")
    await expect(grant).to_contain_text('reason: "refund for the outage"')
    await board.shot("admin-audit")


async def test_set_a_daily_cap_and_give_back_the_plans(harness: Harness,
                                                       open_admin: OpenAdmin) -> None:
    root, _, _, row, detail = await on_bob(harness, open_admin)
    cap = row.get_by_test_id("user-cap")
    await expect(cap).to_have_text("0 / no cap")  # the free plan has none
    await row.get_by_test_id("cap-open").click()
    await detail.get_by_test_id("cap-amount").fill("200")
    await detail.get_by_role("button", name="Set", exact=True).click()
    await expect(cap).to_have_text("0 / 200 (own)")
    user = await account(harness, root, "bob")
    assert (user["dailyCredits"], user["dailyCap"]) == (200, 200)

    await row.get_by_test_id("cap-open").click()
    await expect(detail.get_by_test_id("cap-amount")).to_have_value("200")
    await detail.get_by_test_id("cap-plan").click()
    await expect(cap).to_have_text("0 / no cap")
    user = await account(harness, root, "bob")
    assert (user["dailyCredits"], user["dailyCap"]) == (None, None)
    actions = [e["action"] for e in (await api_json(harness, "/api/admin/audit", root,
                                                    action="budget.set"))["entries"]]
    assert actions == ["budget.set", "budget.set"]


# --- usage, health, audit ------------------------------------------------------------------
async def chart_segments(board: Dashboard) -> set[tuple[str, str, int]]:
    """The chart's segments: (bucket, group, value) each."""
    found = await board.testid("admin-usage-chart").locator("rect").evaluate_all(
        "bars => bars.map(b => [b.dataset.bucket, b.dataset.group, Number(b.dataset.value)])")
    return {(bucket, group, value) for bucket, group, value in found}


async def drawn_report(board: Dashboard, harness: Harness, root: dict[str, str],
                       group_by: str) -> dict[str, Any]:
    """Until the chart shows ``group_by``; the API's report for the chart's range."""
    chart = board.testid("admin-usage-chart")
    await expect(chart).to_have_attribute("data-group-by", group_by)
    await expect(chart.locator("rect").first).to_be_visible()
    drawn = await chart.evaluate("box => ({...box.dataset})")
    report: dict[str, Any] = await api_json(
        harness, "/api/admin/usage", root, groupBy=group_by, bucket=drawn["bucket"],
        **{"from": drawn["from"], "to": drawn["to"]})
    return report


async def test_the_usage_chart_draws_the_usage_report(harness: Harness,
                                                      open_admin: OpenAdmin) -> None:
    root = await admin_of(harness)
    alice, bob = await harness.user("alice"), await harness.user("bob", plan="pro")
    for number in range(3):
        assert (await harness.chat(alice, f"alice {number}", thread=f"a{number}")).status == 200
    assert (await harness.chat(bob, "bob")).status == 200
    board = await open_admin(harness, auth=root)
    await section(board, "Usage and cost")
    chart = board.testid("admin-usage-chart")

    report = await drawn_report(board, harness, root, "model")
    assert report["series"] and await chart_segments(board) == {
        (r["bucket"], r["group"], r["credits"]) for r in report["series"] if r["credits"]}
    days = await chart.locator("svg").get_attribute("aria-label")
    assert days == "AI credits per UTC day, by model"
    calls = board.testid("usage-totals").locator("dd").nth(1)
    await expect(calls).to_have_text(str(report["totals"]["calls"]))
    assert report["totals"]["calls"] == 4
    spenders = board.testid("spenders-table").locator("tbody tr")
    await expect(spenders).to_have_count(2)  # root spent nothing
    await expect(spenders.first).to_contain_text(report["topSpenders"]["users"][0]["userId"])
    await board.shot("admin-usage")

    await board.testid("usage-group").select_option("plan")  # drawn again
    report = await drawn_report(board, harness, root, "plan")
    assert await chart_segments(board) == {
        (r["bucket"], r["group"], r["credits"]) for r in report["series"] if r["credits"]}
    assert {r["group"] for r in report["series"]} == {"free", "pro"}
    legend = await chart.locator(".legend li").all_inner_texts()
    assert sorted(legend) == ["free", "pro"]

    await board.testid("usage-range").select_option("48h")
    await expect(chart).to_have_attribute("data-bucket", "hour")
    report = await drawn_report(board, harness, root, "plan")
    assert all(len(r["bucket"]) == 13 for r in report["series"])
    assert await chart_segments(board) == {
        (r["bucket"], r["group"], r["credits"]) for r in report["series"] if r["credits"]}
    assert await board.testid("usage-group").locator('[value="user"]').is_disabled()
    await board.testid("usage-range").select_option("7")
    await board.testid("usage-group").select_option("user")
    report = await drawn_report(board, harness, root, "user")
    assert {group for _, group, _ in await chart_segments(board)} == {"alice", "bob"}
    assert await board.testid("usage-range").locator('[value="48h"]').is_disabled()
    await board.testid("usage-measure").select_option("calls")
    await expect(chart.locator('rect[data-group="alice"]')).to_have_attribute("data-value", "3")


async def test_health_shows_channels_webhooks_and_jobs(
        loop: LoopChannel, start_gateway: StartGateway, open_admin: OpenAdmin) -> None:
    harness = await start_gateway()
    root = await admin_of(harness)
    alice = await harness.user("alice")
    loop.failures["m1"] = [DeliveryRetry(3600)]  # the platform says: in an hour
    await harness.gateway.receive(loop.message("m1", "hello"))
    await until(lambda: loop.attempts.get("m1") == 1)
    store = harness.gateway.store
    hook = "wh_" + "a" * 24
    await store.create_webhook(Webhook(hook, "alice", "https://user:pw@hooks.example.com/in",
                                       ("thread.cleared",), b"sealed", "2026-01-01T00:00:00Z"))
    told: list[WebhookDelivery] = []
    store.webhooks_queued = told.extend
    await store.emit("alice", [webhook_events.webhook_test(hook)], only=hook)
    await store.webhook_attempts([WebhookAttempt(told[0].id, "failed", 8, 503,
                                                 harness.gateway.clock(), "HTTP 503")])
    assert (await harness.client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "every", "when": "2h", "text": "stretch"})).status == 201

    board = await open_admin(harness, auth=root)
    await section(board, "Health")
    channel = board.testid("health-channel")
    await expect(channel).to_have_count(1)
    assert [text.strip() for text in await channel.locator("td").all_inner_texts()][:3] == [
        "loop", "0", "1"]
    webhook = board.testid("health-webhook")
    await expect(webhook).to_contain_text("https://hooks.example.com")
    await expect(webhook).to_contain_text("HTTP 503")
    assert "pw@" not in await board.page.content()
    active = board.testid("health-jobs").locator("dd").first
    await expect(active).to_have_text("1")
    await board.shot("admin-health")

    assert (await harness.client.post("/api/jobs", headers=alice, json={
        "threadId": "t1", "kind": "every", "when": "3h", "text": "drink"})).status == 201
    await board.testid("health-refresh").click()
    await expect(active).to_have_text("2")


async def test_the_audit_export_downloads_the_audit_rows(
        harness: Harness, open_admin: OpenAdmin, tmp_path: Path) -> None:
    root = await admin_of(harness)
    for name in ("a1", "a2", "a3"):
        await harness.user(name)
        assert (await harness.client.post(f"/api/admin/users/{name}/block",
                                          headers=root)).status == 200
    board = await open_admin(harness, auth=root)
    await section(board, "Audit log")
    await expect(board.testid("audit-row")).to_have_count(4)  # and the promotion
    async with board.page.expect_download() as started:
        await board.testid("audit-export").click()
    download = await started.value
    assert re.fullmatch(r"cloudybot-audit-\d{4}-\d\d-\d\d\.jsonl", download.suggested_filename)
    await download.save_as(tmp_path / "audit.jsonl")
    lines = (tmp_path / "audit.jsonl").read_text().splitlines()
    entries = (await api_json(harness, "/api/admin/audit", root))["entries"]
    assert [json.loads(line) for line in lines] == entries[::-1]  # oldest first
    await expect(board.testid("audit-status")).to_have_text("Exported 4 entries, oldest first.")

    await board.page.get_by_label("Action", exact=True).fill("user.block")
    await board.page.get_by_role("button", name="Filter").click()
    await expect(board.testid("audit-row")).to_have_count(3)
    async with board.page.expect_download() as started:
        await board.testid("audit-export").click()
    await (await started.value).save_as(tmp_path / "blocks.jsonl")
    blocks = [json.loads(line) for line in (tmp_path / "blocks.jsonl").read_text().splitlines()]
    assert [entry["target"] for entry in blocks] == ["a1", "a2", "a3"]


# --- the page's rules ------------------------------------------------------------------------
async def test_no_content_security_policy_refusal_in_the_whole_admin_walk(
        harness: Harness, open_admin: OpenAdmin) -> None:
    root = await admin_of(harness)
    bob = await harness.user("bob")
    assert (await harness.chat(bob, "hello")).status == 200
    board = await open_admin(harness, auth=root)
    row = user_row(board, "bob")
    await row.get_by_test_id("grant-open").click()
    await user_detail(board, "bob").get_by_test_id("grant-amount").fill("5")
    await user_detail(board, "bob").get_by_test_id("grant-reason").fill("thanks")
    await user_detail(board, "bob").get_by_role("button", name="Grant").click()
    await expect(row.get_by_test_id("user-credits")).not_to_have_text("1,000")
    for name, ready in (("Usage and cost", "admin-usage-chart"),
                        ("Health", "health-jobs"), ("Audit log", "audit-row")):
        await section(board, name)
        await expect(board.testid(ready).first).not_to_be_empty()
    await board.testid("back-to-chat").click()
    await expect(board.testid("composer")).to_be_visible()
    assert board.violations == [] and board.errors == []
    # a refusal is heard when there is one
    async with board.page.expect_console_message(
            lambda message: "Content Security Policy" in message.text):
        await board.page.evaluate("() => document.body.setAttribute('style', 'color: red')")
    assert len(board.violations) == 1
    board.violations.clear()


async def test_the_admin_view_fits_a_375_pixel_screen(harness: Harness,
                                                      open_admin: OpenAdmin) -> None:
    root = await admin_of(harness)
    await harness.user("a-rather-long-user-name-for-a-phone")
    board = await open_admin(harness, width=375, auth=root)
    page = board.page
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 375
    scroller = page.locator("#admin-users .table-scroll")
    assert await scroller.evaluate("box => box.scrollWidth > box.clientWidth")  # it scrolls
    row = user_row(board, "a-rather-long-user-name-for-a-phone")
    must_click = [board.testid("back-to-chat"), board.testid("user-search-submit"),
                  *[page.get_by_role("tab", name=name, exact=True)
                    for name in ("Users", "Usage and cost", "Health", "Audit log")],
                  row.get_by_test_id("block-toggle"), row.get_by_test_id("grant-open")]
    for control in must_click:
        box = await control.bounding_box()
        assert box is not None and 0 <= box["x"] <= 375 - box["width"], control
    await row.get_by_test_id("grant-open").click()
    detail = user_detail(board, "a-rather-long-user-name-for-a-phone")
    await detail.get_by_test_id("grant-amount").fill("7")
    await detail.get_by_test_id("grant-reason").fill("welcome")
    await detail.get_by_role("button", name="Grant").click()
    await expect(row.get_by_test_id("user-credits")).to_have_text("1,007")
    await board.shot("admin-phone")
    await section(board, "Usage and cost")
    await expect(board.testid("admin-usage-chart").locator("svg")).to_be_visible()
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 375
    await board.shot("admin-phone-usage")
