"""The browser tool's arguments are the model's: untrusted. Whatever they hold, the tool answers
with a result the model can read (never an exception), opens nothing it should not, and keeps
working afterwards."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.tools import ToolContext, ToolOutput
from plugins.browser import pool_of
from plugins.browser.actions import ACTIONS
from tests.conftest import Harness
from tests.fakes.website import Website
from tests.helpers import require_chromium

require_chromium()

CONTEXT = ToolContext("alice", "fuzz", "alice--fuzz")
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
           | st.text(max_size=40))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=5)
TEXTS = st.text(max_size=60) | st.sampled_from([
    "", " ", "*", "body", "#nope", "xpath=//td", "text=Paris", "input", "button", "a",
    "table >> td", "//*", "\x00", "internal:role=button", "http://127.0.0.1/", "127.0.0.1",
    "bank.example.com", "http://[::1]:80/", "javascript:alert(1)", "data:text/html,hi"])
ARGUMENTS = st.fixed_dictionaries({"action": st.sampled_from(ACTIONS) | VALUES}, optional={
    "url": TEXTS | VALUES, "target": TEXTS | VALUES, "value": TEXTS | VALUES,
    "site": TEXTS | VALUES, "extra": VALUES})
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


async def no_dns(host: str, port: int) -> list[str]:
    raise OSError(f"{host}: not resolved in this test")


def readable(result: Any) -> None:
    """What the model reads: text, a JSON-able object, or text with pictures (a screenshot:
    JSON text and its PNG)."""
    if isinstance(result, ToolOutput):
        json.loads(result.text)
        assert all(picture.data.startswith(b"\x89PNG") for picture in result.pictures), result
        return
    assert isinstance(result, str | dict), result
    json.dumps(result)


@FUZZ
@given(arguments=ARGUMENTS)
async def test_without_a_page_no_argument_opens_one_or_costs_a_minute(
        harness: Harness, arguments: dict[str, Any]) -> None:
    gateway = harness.gateway
    if await gateway.store.get_user("alice") is None:
        await gateway.accounts.add_user("alice")
    browsers = pool_of(gateway.host_for("browser"))
    assert browsers is not None
    browsers.proxy.resolve = no_dns  # a host name never reaches this machine's resolver

    result = await gateway.tools["browser"].run(arguments, CONTEXT)

    readable(result)
    assert isinstance(result, str) and result.startswith("error:"), result
    assert browsers.sessions == {}
    assert not [row for row in await gateway.store.ledger("alice") if row.kind == "browser"]


@FUZZ
@given(arguments=ARGUMENTS.filter(lambda a: a["action"] != "open"))
async def test_on_an_open_page_any_argument_is_answered_and_the_page_still_works(
        harness: Harness, website: Website, arguments: dict[str, Any]) -> None:
    gateway = harness.gateway
    tool = gateway.tools["browser"]
    browsers = pool_of(gateway.host_for("browser"))
    assert browsers is not None
    if browsers.get(CONTEXT.session_key) is None:
        if await gateway.store.get_user("alice") is None:
            await gateway.accounts.add_user("alice", plan="team")
        browsers.proxy.resolve = no_dns
        opened = await tool.run({"action": "open", "url": f"{website.base}/table"}, CONTEXT)
        assert json.loads(json.dumps(opened))["title"] == "Cities", opened

    readable(await tool.run(arguments, CONTEXT))

    after = await tool.run({"action": "open", "url": f"{website.base}/table"}, CONTEXT)
    assert isinstance(after, dict) and after["title"] == "Cities", after


@pytest.fixture
async def harness(start_gateway: Any, request: pytest.FixtureRequest) -> Harness:
    """One gateway with the browser for all of a test's examples (quick actions: a missing
    target fails in a second); private addresses allowed for the tests on an open page."""
    started: Harness = await start_gateway(
        browser_enabled=True, browser_action_timeout_seconds=1,
        browser_allow_private="open_page" in request.node.name)
    return started
