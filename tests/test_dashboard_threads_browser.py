"""The dashboard's thread titles, renaming, search and a URL per thread, in headless Chromium
(the fixtures and the ``Dashboard`` steps are tests/test_dashboard_browser.py's and
tests/test_dashboard_conversation.py's): the list and the header show titles, Rename edits one in
place (Enter saves, Escape cancels, the server's word on a bad one, back to the first message's),
the search box finds by title and by message with the words marked, pages and says when nothing
matches, ``#thread=ID`` names the open thread (reload, Back, Forward), hostile titles and
snippets stay text, and all of it at 390 px. Screenshots go to ``test-artifacts/dashboard/``."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import Harness
from tests.test_dashboard_browser import Dashboard, browser, expect
from tests.test_dashboard_conversation import OpenBoard, open_board

__all__ = ["browser", "open_board"]  # the fixtures, shared
AuthHeaders = dict[str, str]
HOSTILE = "<img src=x onerror=alert(1)>"
XSS_TITLE = '<img src=x onerror="window.__xss = 1">'


async def chat_ok(harness: Harness, auth: AuthHeaders, message: str, thread: str) -> None:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()


async def rename(harness: Harness, auth: AuthHeaders, thread: str, title: str | None) -> None:
    response = await harness.client.patch(f"/api/threads/{thread}", json={"title": title},
                                          headers=auth)
    assert response.status == 200, await response.text()


async def summary(harness: Harness, auth: AuthHeaders, thread: str) -> dict[str, Any]:
    response = await harness.client.get(f"/api/threads/{thread}", headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


def listed(board: Dashboard, thread: str) -> Any:
    return board.page.locator(f'[data-testid="thread"][data-thread-id="{thread}"]')


def found(board: Dashboard) -> Any:
    return board.testid("search-result")


async def named_in_address(board: Dashboard, thread: str) -> None:
    """Until the address is ``#thread=`` and the thread's id, as encodeURIComponent spells it."""
    await board.page.wait_for_function(
        "id => location.hash === '#thread=' + encodeURIComponent(id)", arg=thread)


async def open_listed(board: Dashboard, thread: str) -> None:
    await listed(board, thread).get_by_role("button").click()
    await named_in_address(board, thread)


async def search_for(board: Dashboard, text: str) -> None:
    """Type ``text`` into the search box, key by key, and wait for its answer."""
    box = board.testid("search-input")
    await box.fill("")
    await expect(board.testid("search-status")).to_have_text("")
    await box.press_sequentially(text)
    await expect(board.testid("search-status")).to_have_text(re.compile(r"^(?!Searching…$).+"))


# --- titles -------------------------------------------------------------------------------
async def test_the_list_and_the_header_show_titles_not_ids(harness: Harness,
                                                           open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Plan my trip\nto Lisbon, please", "trip-1")
    await chat_ok(harness, auth, "Pasta for four", "dinner-2")
    await rename(harness, auth, "dinner-2", "Friday dinner")
    board = await open_board(harness, auth=auth)
    names = board.page.locator('[data-testid="thread"] .thread-name')
    await expect(names).to_have_text(["Friday dinner", "Plan my trip to Lisbon, please"])
    await expect(board.testid("thread-title")).to_have_text("Friday dinner")
    assert await board.page.title() == "Friday dinner · CloudyBot"
    await open_listed(board, "trip-1")
    await expect(board.testid("thread-title")).to_have_text("Plan my trip to Lisbon, please")

    await board.testid("new-thread").click()  # a new thread: titled by its first message
    await expect(board.testid("thread-title")).to_have_text("New thread")
    await expect(board.testid("rename")).to_be_hidden()  # nothing to rename yet
    await board.send("Books to read this summer")
    await board.wait_reply(1)
    await expect(board.testid("thread-title")).to_have_text("Books to read this summer")
    await expect(names.first).to_have_text("Books to read this summer")
    await expect(board.testid("rename")).to_be_visible()


# --- renaming -----------------------------------------------------------------------------
async def test_rename_saves_in_place_and_survives_a_reload(harness: Harness,
                                                           open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Plan my trip", "t1")
    board = await open_board(harness, auth=auth)
    await board.testid("rename").click()
    box = board.testid("rename-input")
    await expect(box).to_be_focused()
    await expect(box).to_have_value("Plan my trip")
    await box.fill("Lisbon in May")
    await board.shot("rename-editing")
    await box.press("Enter")
    await expect(board.testid("thread-title")).to_have_text("Lisbon in May")
    await expect(box).to_be_hidden()
    await expect(board.testid("rename")).to_be_focused()
    await expect(listed(board, "t1").locator(".thread-name")).to_have_text("Lisbon in May")
    thread = await summary(harness, auth, "t1")
    assert (thread["title"], thread["titleSet"]) == ("Lisbon in May", True)

    await board.testid("rename").click()  # Escape leaves it as it was
    await box.fill("Not this one")
    await box.press("Escape")
    await expect(box).to_be_hidden()
    await expect(board.testid("thread-title")).to_have_text("Lisbon in May")
    assert (await summary(harness, auth, "t1"))["title"] == "Lisbon in May"

    await board.page.reload()
    await expect(board.testid("thread-title")).to_have_text("Lisbon in May")
    await expect(listed(board, "t1").locator(".thread-name")).to_have_text("Lisbon in May")


async def test_a_bad_title_shows_the_servers_message_and_reset_gives_the_first_messages(
        harness: Harness, open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Plan my trip", "t1")
    board = await open_board(harness, auth=auth)
    await board.testid("rename").click()
    box = board.testid("rename-input")
    await box.fill("   ")
    await box.press("Enter")
    await expect(board.testid("rename-error")).to_have_text("title must not be empty")
    await box.fill("x" * 121)
    await board.testid("rename-save").click()
    await expect(board.testid("rename-error")).to_have_text(
        "title must be at most 120 characters")
    await board.shot("rename-refused")
    await expect(box).to_be_visible()  # still editing, the text kept to correct
    await expect(board.testid("thread-title")).to_have_text("Plan my trip")
    assert (await summary(harness, auth, "t1"))["titleSet"] is False
    await expect(board.testid("rename-reset")).to_be_hidden()  # the first message's already

    await box.fill("My own name")
    await box.press("Enter")
    await expect(board.testid("thread-title")).to_have_text("My own name")
    await board.testid("rename").click()
    await expect(board.testid("rename-error")).to_have_text("")
    await board.testid("rename-reset").click()
    await expect(board.testid("thread-title")).to_have_text("Plan my trip")
    await expect(listed(board, "t1").locator(".thread-name")).to_have_text("Plan my trip")
    thread = await summary(harness, auth, "t1")
    assert (thread["title"], thread["titleSet"]) == ("Plan my trip", False)


async def test_rename_and_search_work_from_the_keyboard(harness: Harness,
                                                        open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Plan my trip", "t1")
    await chat_ok(harness, auth, "Pasta tonight", "t2")
    board = await open_board(harness, auth=auth)
    page = board.page
    await page.keyboard.press("Control+k")
    await expect(board.testid("search-input")).to_be_focused()
    await page.keyboard.type("trip")
    await expect(found(board)).to_have_count(1)
    await page.keyboard.press("Tab")  # to the thread found
    await expect(found(board).get_by_role("button")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(board.testid("thread-title")).to_have_text("Plan my trip")
    await board.testid("rename").focus()
    await page.keyboard.press("Enter")
    await expect(board.testid("rename-input")).to_be_focused()
    await page.keyboard.type("Road trip")
    await page.keyboard.press("Enter")
    await expect(board.testid("thread-title")).to_have_text("Road trip")
    assert (await summary(harness, auth, "t1"))["title"] == "Road trip"


# --- search -------------------------------------------------------------------------------
async def test_search_finds_by_title_and_by_message_with_the_words_marked(
        harness: Harness, open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Earlier we spoke of many things. " * 8
                  + "Then the Lisbon trams, yellow and old. " + "More. " * 30, "old")
    await chat_ok(harness, auth, "Pasta tonight", "food")
    await chat_ok(harness, auth, "nothing to see", "named")
    await rename(harness, auth, "named", "Lisbon ideas")
    board = await open_board(harness, auth=auth)
    asked: list[str] = []
    board.page.on("request", lambda request: asked.append(request.url)
                  if "/api/threads?" in request.url and "q=" in request.url else None)

    await search_for(board, "lisb")
    assert len(asked) < len("lisb")  # typing waits for a pause before it asks
    await expect(found(board)).to_have_count(2)
    await expect(board.page.locator("#thread-list")).to_be_hidden()
    by_title, by_message = found(board).nth(0), found(board).nth(1)
    await expect(by_title.locator(".thread-name")).to_have_text("Lisbon ideas")
    await expect(by_title.locator(".thread-name mark")).to_have_text(["Lisb"])
    await expect(by_message).to_have_attribute("data-thread-id", "old")
    snippet = by_message.get_by_test_id("snippet")
    await expect(snippet).to_contain_text("Then the Lisbon trams")
    await expect(snippet.locator("mark")).to_have_text(["Lisb"])  # the reply (an echo)
    await expect(board.testid("search-status")).to_have_text("2 threads found")
    await board.shot("search-results")

    await search_for(board, "yellow TRAMS")  # words of a message, any case, any order
    await expect(found(board)).to_have_count(1)
    await expect(found(board).get_by_test_id("snippet").locator("mark")).to_have_text(
        ["trams", "yellow"])
    await found(board).get_by_role("button").click()  # opens the thread found
    await expect(board.page).to_have_url(board.url("/#thread=old"))
    await expect(board.messages("user")).to_contain_text("Lisbon trams")
    await expect(found(board).get_by_role("button")).to_have_attribute("aria-current", "page")

    await board.testid("search-input").fill("")  # cleared: the list again
    await expect(board.page.locator('[data-testid="thread"]')).to_have_count(3)
    await expect(board.page.locator("#thread-list")).to_be_visible()
    await expect(board.page.locator("#search-view")).to_be_hidden()


async def test_search_pages_with_load_more_and_says_when_nothing_matches(
        harness: Harness, open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    for number in range(23):
        await chat_ok(harness, auth, f"zebra number {number}", f"z{number:02d}")
    await chat_ok(harness, auth, "something else", "other")
    board = await open_board(harness, auth=auth)
    await search_for(board, "zebra")
    await expect(found(board)).to_have_count(20)
    await expect(board.testid("search-status")).to_have_text("20+ threads found")
    await board.testid("more-results").click()
    await expect(found(board)).to_have_count(23)
    await expect(board.testid("more-results")).to_be_hidden()
    await expect(board.testid("search-status")).to_have_text("23 threads found")
    ids = [await item.get_attribute("data-thread-id") for item in await found(board).all()]
    assert ids == [f"z{n:02d}" for n in reversed(range(23))]  # newest first, none twice

    await search_for(board, "quixotic")
    await expect(board.testid("search-status")).to_have_text("No threads match “quixotic”.")
    await expect(found(board)).to_have_count(0)
    await expect(board.testid("more-results")).to_be_hidden()
    await board.shot("search-nothing")
    await search_for(board, "?!")  # no word in it: not sent, and said why
    await expect(board.testid("search-status")).to_have_text("Type a letter or a digit to search.")
    await search_for(board, "a b c d e f g h i")  # only the first eight words count
    await expect(board.testid("search-status")).to_have_text(
        "No threads match “a b c d e f g h i”.")
    # refused by the gateway (the box's maxlength taken off): its reason is shown
    await board.testid("search-input").evaluate("box => box.removeAttribute('maxlength')")
    await search_for(board, "x" * 201)
    await expect(board.testid("search-status")).to_have_text(
        "q must be at most 200 characters")
    await expect(found(board)).to_have_count(0)
    await board.testid("search-input").press("Escape")  # Escape empties the box too
    await expect(board.testid("search-input")).to_have_value("")
    await expect(board.page.locator('[data-testid="thread"]')).to_have_count(24)
    await expect(board.page.locator("#search-view")).to_be_hidden()


# --- a URL per thread ---------------------------------------------------------------------
async def test_the_address_names_the_thread_reload_reopens_it_and_back_goes_back(
        harness: Harness, open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "first thread", "trip.2026:may")
    await chat_ok(harness, auth, "second thread", "t2")
    board = await open_board(harness, auth=auth)
    page = board.page
    await expect(page).to_have_url(board.url("/#thread=t2"))  # the latest, named at once
    await open_listed(board, "trip.2026:may")
    assert page.url.endswith("#thread=trip.2026%3Amay")  # encodeURIComponent's spelling
    await expect(board.messages("user").locator(".message-body")).to_have_text(["first thread"])

    await page.reload()
    await expect(board.testid("thread-title")).to_have_text("first thread")
    await expect(board.messages("user").locator(".message-body")).to_have_text(["first thread"])
    await expect(listed(board, "trip.2026:may").get_by_role("button")).to_have_attribute(
        "aria-current", "page")

    await page.go_back()
    await expect(page).to_have_url(board.url("/#thread=t2"))
    await expect(board.testid("thread-title")).to_have_text("second thread")
    await expect(board.messages("user").locator(".message-body")).to_have_text(["second thread"])
    await page.go_forward()
    await expect(board.testid("thread-title")).to_have_text("first thread")
    await expect(board.messages("user").locator(".message-body")).to_have_text(["first thread"])


async def test_an_address_naming_an_unused_thread_opens_it_new(harness: Harness,
                                                               open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "an old one", "t1")
    board = await open_board(harness, auth=auth)
    await board.page.goto(board.url("/#thread=from-a-link"))
    await expect(board.page.locator("#transcript-top")).to_have_text("No messages yet.")
    await expect(board.testid("thread-title")).to_have_text("New thread")
    await board.send("hello there")
    await board.wait_reply(1)
    assert (await summary(harness, auth, "from-a-link"))["title"] == "hello there"
    await expect(board.page).to_have_url(board.url("/#thread=from-a-link"))

    await board.page.goto(board.url("/#thread=%3Cnot%20an%20id%3E"))  # names no thread
    await board.page.reload()
    await expect(board.testid("thread-title")).to_have_text("hello there")  # the latest
    await expect(board.page).to_have_url(board.url("/#thread=from-a-link"))


async def test_after_a_sign_in_link_the_address_names_the_thread(harness: Harness,
                                                                 browser: Any) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hello", "t1")
    code = await harness.gateway.accounts.login_link_code("alice")
    page = await browser.new_page()
    board = Dashboard(harness, page)
    await page.goto(board.url(f"/auth/login?code={code}"))
    entries = await page.evaluate("() => history.length")
    await board.testid("sign-in-with-link").click()
    await expect(board.testid("thread-title")).to_have_text("hello")
    await expect(page).to_have_url(board.url("/#thread=t1"))  # in place of #login=CODE
    assert await page.evaluate("() => history.length") == entries  # replaced, not pushed
    await page.close()
    assert board.errors == []


# --- hostile text -------------------------------------------------------------------------
async def test_a_hostile_title_and_snippet_show_as_text(harness: Harness,
                                                        open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, f"what does {XSS_TITLE} do?", "t1")
    await chat_ok(harness, auth, "plain", "t2")
    await rename(harness, auth, "t2", f"{HOSTILE} {XSS_TITLE}")
    board = await open_board(harness, auth=auth)
    page = board.page
    await expect(board.testid("thread-title")).to_have_text(f"{HOSTILE} {XSS_TITLE}")
    await expect(listed(board, "t1").locator(".thread-name")).to_have_text(
        f"what does {XSS_TITLE} do?")
    await search_for(board, "img onerror")
    await expect(found(board)).to_have_count(2)
    await expect(found(board).nth(0).locator(".thread-name")).to_have_text(
        f"{HOSTILE} {XSS_TITLE}")
    await expect(found(board).nth(1).get_by_test_id("snippet")).to_contain_text(XSS_TITLE)
    await expect(found(board).nth(1).get_by_test_id("snippet").locator("mark")).to_have_text(
        ["img", "onerror"])

    await open_listed_result(board, "t1")
    await board.testid("rename").click()  # typed in the box, it is text too
    await board.testid("rename-input").fill(HOSTILE)
    await board.testid("rename-input").press("Enter")
    await expect(board.testid("thread-title")).to_have_text(HOSTILE)
    await board.testid("search-input").fill("")
    await expect(listed(board, "t1").locator(".thread-name")).to_have_text(HOSTILE)
    assert await page.locator("#threads img, #thread-view img").count() == 0
    assert await page.evaluate("() => window.__xss") is None
    await board.shot("hostile-titles")


async def open_listed_result(board: Dashboard, thread: str) -> None:
    await board.page.locator(f'[data-testid="search-result"][data-thread-id="{thread}"]'
                             ).get_by_role("button").click()
    await named_in_address(board, thread)


# --- phone and themes ---------------------------------------------------------------------
async def test_search_works_on_a_390_pixel_phone(harness: Harness,
                                                 open_board: OpenBoard) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Then the Lisbon trams, yellow and old, climb the hills "
                  "of the city all day long", "old")
    await chat_ok(harness, auth, "Pasta tonight", "food")
    board = await open_board(harness, 390, auth=auth)
    page = board.page
    await expect(board.testid("search-input")).to_be_hidden()  # in the closed drawer
    await page.get_by_role("button", name="Threads").click()
    await expect(board.testid("search-input")).to_be_visible()
    await search_for(board, "trams")
    await expect(found(board)).to_have_count(1)
    await page.locator("#threads").evaluate(
        "el => Promise.all(el.getAnimations().map(a => a.finished))")
    box = await board.testid("search-input").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390
    await board.shot("search-phone")
    await found(board).get_by_role("button").click()
    await expect(board.testid("search-input")).to_be_hidden()  # the drawer closes
    await expect(board.testid("thread-title")).to_have_text(
        "Then the Lisbon trams, yellow and old, climb the hills of the city all day long")
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390
    await board.shot("title-phone")
    await board.testid("rename").click()
    await expect(board.testid("rename-input")).to_be_visible()
    save = await board.testid("rename-save").bounding_box()
    assert save is not None and save["x"] + save["width"] <= 390
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= 390
    await board.shot("rename-phone")


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (1280, "dark"),
                                               (390, "light"), (390, "dark")])
async def test_titles_search_and_rename_fit_each_width_and_scheme(
        harness: Harness, open_board: OpenBoard, width: int, scheme: str) -> None:
    auth = await harness.user(plan="team")
    await chat_ok(harness, auth, "Plan a week in Lisbon: trams, tiles and pastel de nata, "
                  "with a day trip to Sintra", "trip")
    await chat_ok(harness, auth, "Lisbon weather in May?", "weather")
    await chat_ok(harness, auth, "Pasta for four", "dinner")
    await rename(harness, auth, "dinner", "Friday dinner")
    board = await open_board(harness, width, scheme, auth=auth)
    page = board.page
    if width < 760:
        await page.get_by_role("button", name="Threads").click()
    await search_for(board, "lisbon")
    await expect(found(board)).to_have_count(2)
    await page.locator("#threads").evaluate(
        "el => Promise.all(el.getAnimations().map(a => a.finished))")
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= width
    await board.shot(f"search-{width}-{scheme}")
    await found(board).first.get_by_role("button").click()
    await board.testid("rename").click()
    await board.testid("rename-input").fill("")
    await board.testid("rename-input").press("Enter")
    await expect(board.testid("rename-error")).to_have_text("title must not be empty")
    assert await page.evaluate("() => document.documentElement.scrollWidth") <= width
    await board.shot(f"rename-{width}-{scheme}")
