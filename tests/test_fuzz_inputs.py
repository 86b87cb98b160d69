"""Fuzzing every route the app serves (SPEC §7, §11: no input yields a 500): arbitrary header
bytes, arbitrary bodies, JSON with huge integers and deep nesting, with the Telegram and Slack
channels on against their fakes.

Requests go over a raw socket, so header values are sent byte for byte. Only bytes the HTTP
parser itself refuses before any gateway code runs are left out (control characters, CR, LF);
those are tested, with what aiohttp logs about them, in test_untrusted_input.py.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.testing.slack import SIGNING_SECRET, FakeSlack, sign
from gateway.testing.telegram import SECRET as TELEGRAM_SECRET
from tests.conftest import Harness
from tests.test_untrusted_input import (
    QUERY,
    RawResponse,
    http_request,
    raw_exchange,
    served_routes,
)

# Each example goes to every route (about twenty): some 2,000 requests a test.
FUZZ = settings(max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# --- strategies ------------------------------------------------------------------------------
# Bytes the parser accepts in a header value: HTAB, SP to ~, and 0x80-0xFF (not UTF-8 as a rule).
header_bytes = st.binary(max_size=80).map(
    lambda raw: bytes(b for b in raw if b == 9 or 32 <= b != 127).strip(b" \t"))
TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# Headers that frame the message: the parser owns them, and the fuzz must keep the request whole.
FRAMING = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "expect"}
# Headers some route reads: each is in about half of the examples.
READ_NAMES = ["Authorization", "X-Telegram-Bot-Api-Secret-Token", "X-Slack-Signature",
              "X-Slack-Request-Timestamp", "X-Slack-Retry-Num", "Content-Type",
              "Content-Encoding"]
OTHER_NAMES = ["Accept", "Accept-Encoding", "Cookie", "Origin", "Referer", "User-Agent",
               "X-Forwarded-For", "Range", "If-None-Match"]
header_names = st.one_of(
    st.sampled_from(OTHER_NAMES),
    st.text(TOKEN_CHARS, min_size=1, max_size=20).filter(lambda n: n.lower() not in FRAMING),
).map(str.encode)


def with_prefix(prefixes: list[bytes]) -> st.SearchStrategy[bytes]:
    """A plausible start (``Bearer ``, ``v0=``, a media type) followed by arbitrary bytes."""
    return st.builds(lambda prefix, tail: prefix + tail, st.sampled_from(prefixes), header_bytes)


header_values = st.one_of(
    header_bytes,
    with_prefix([b"Bearer ", b"bearer ", b"Basic ", b"v0=", b"application/json; charset=",
                 b"multipart/form-data; boundary=", b"gzip", b"deflate", b"br"]),
    st.sampled_from([b"\xff", b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                     b"Bearer \xff\xfe", b"application/json", b"gzip", b"deflate", b"br",
                     b"zstd", b"-1", b"99999999999999999999999", b"1" * 200]),
)
# aiohttp refuses these itself (its own text 400, before any gateway code runs): a second
# copy of a header it allows once, and a compression whose decoder is not installed.
SINGLETONS = {b"content-location", b"content-range", b"content-type", b"etag", b"max-forwards",
              b"server", b"user-agent"}
UNDECODABLE = {b"br", b"zstd"}


def _sendable(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    seen: set[bytes] = set()
    kept = []
    for name, value in headers:
        if name.lower() in SINGLETONS and name.lower() in seen:
            continue
        if name.lower() == b"content-encoding" and value.strip().lower() in UNDECODABLE:
            continue
        seen.add(name.lower())
        kept.append((name, value))
    return kept


headers_lists = st.builds(
    lambda read, other: _sendable([(name.encode(), value) for name, value in read.items()]
                                  + other),
    st.fixed_dictionaries({}, optional={name: header_values for name in READ_NAMES}),
    st.lists(st.tuples(header_names, header_values), max_size=4))

class _Raw(str):
    """A number written as is into the JSON text (json.dumps cannot write a huge integer)."""


HUGE = "9" * 5000
json_leaves = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False), st.text(max_size=30),
    st.integers(), st.sampled_from([HUGE, "-" + HUGE, "1e999999", "-0", "1E-99999"]).map(
        _Raw))


def to_json(value: Any) -> str:
    """JSON text of ``value``; ``_Raw`` leaves go in verbatim."""
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


json_values = st.recursive(
    json_leaves, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(st.text(max_size=10), inner,
                                                         max_size=4)),
    max_leaves=12)
FIELDS = ["threadId", "message", "specialist", "key", "value", "instructions", "site",
          "username", "password", "update_id", "message_id", "type", "event", "challenge"]
shaped_objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
bodies = st.one_of(
    st.binary(max_size=400),
    json_values.map(to_json).map(str.encode),
    shaped_objects.map(to_json).map(str.encode),
    # Python's JSON parser gives up at about 1,000 levels.
    st.integers(min_value=1, max_value=3000).map(lambda n: b"[" * n),
    st.integers(min_value=1, max_value=3000).map(lambda n: b'{"a":' * n),
    st.sampled_from([b"", b"{}", b"[]", b"null", HUGE.encode(), b'{"threadId":' + HUGE.encode()
                     + b"}", b'{"update_id":' + HUGE.encode() + b"}", b"\xff\xfe\x00{"]),
)


# --- the gateway under test --------------------------------------------------------------------
StartGateway = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def everything(fake_slack: FakeSlack, start_telegram: StartGateway) -> tuple[Harness,
                                                                                    bytes]:
    """A gateway with the dashboard API, Telegram (webhook) and Slack on; a user's token."""
    harness = await start_telegram(slack_bot_token=fake_slack.token,
                                   slack_signing_secret=SIGNING_SECRET,
                                   slack_api_base=fake_slack.base_url)
    auth = await harness.user(plan="team")  # no per-minute limit: every request is parsed
    return harness, auth["Authorization"].encode()


def route_list(harness: Harness) -> list[tuple[str, str]]:
    routes = served_routes(harness.client.app)
    paths = {path for _, path in routes}
    assert {"/chat", "/telegram/webhook", "/slack/events", "/healthz"} <= paths, paths
    return routes


def refused_by_aiohttp(response: RawResponse, headers: list[tuple[bytes, bytes]]) -> bool:
    """aiohttp's own plain-text 400 for a compressed body it could not inflate while parsing
    (before any middleware: whether the body is inflated there or on ``read()`` depends on
    how the bytes arrive). Only a request with a Content-Encoding may get it."""
    encoded = any(name.lower() == b"content-encoding" for name, _ in headers)
    return (encoded and response.status == 400
            and response.headers.get("content-type", "").startswith("text/plain"))


async def assert_no_5xx_anywhere(harness: Harness, headers: list[tuple[bytes, bytes]],
                                 body: bytes) -> None:
    """Send the request to every route; fail on a 5xx or an error that is not the SPEC's
    JSON object."""
    for method, path in route_list(harness):
        try:
            response = await raw_exchange(harness, http_request(method, path + QUERY, headers,
                                                                body))
        except TimeoutError:
            raise AssertionError(("no answer", method, path, headers, body[:200])) from None
        context = (method, path, headers, body[:200], response)
        assert response.status < 500, context
        if response.status >= 400:
            assert b"Traceback" not in response.body, context
            if not refused_by_aiohttp(response, headers):
                response.json_error()


# --- the fuzz tests ------------------------------------------------------------------------------
@FUZZ
@given(headers=headers_lists, body=bodies)
async def test_arbitrary_headers_and_bodies_on_every_route(
        everything: tuple[Harness, bytes], headers: list[tuple[bytes, bytes]],
        body: bytes) -> None:
    harness, _ = everything
    await assert_no_5xx_anywhere(harness, headers, body)


@FUZZ
@given(headers=headers_lists, body=bodies,
       content_type=st.sampled_from([b"application/json", b"text/plain",
                                     b"application/x-www-form-urlencoded"]))
async def test_authenticated_and_signed_requests_with_arbitrary_bodies(
        everything: tuple[Harness, bytes], headers: list[tuple[bytes, bytes]], body: bytes,
        content_type: bytes) -> None:
    """With a valid token, webhook secret and Slack signature, so that every body reaches the
    handler's parser."""
    harness, token = everything
    valid = [(b"Authorization", token), (b"Content-Type", content_type),
             (b"X-Telegram-Bot-Api-Secret-Token", TELEGRAM_SECRET.encode())]
    valid += [(name.encode(), value.encode()) for name, value in sign(SIGNING_SECRET, body).items()
              if name != "Content-Type"]
    extra = [(name, value) for name, value in headers
             if name.lower() not in {n.lower() for n, _ in valid}]
    await assert_no_5xx_anywhere(harness, _sendable(valid + extra), body)
