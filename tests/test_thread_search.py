"""Thread titles, renaming (``PATCH /api/threads/{id}``) and search (``GET /api/threads?q=``):
titles from the first message, checked names, one's own threads only, paged, and gone with
the thread (issue 29)."""

from __future__ import annotations

import io
import json
import sqlite3
import zipfile
from contextlib import closing
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gateway.base.search_text import SNIPPET_CHARS, snippet
from gateway.base.titles import derived_title
from gateway.store import NewMessage, Store, ThreadRef, TurnCommit
from gateway.store.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from gateway.store.postgres import PostgresStore
from gateway.store.postgres_migrations import MIGRATIONS as POSTGRES_MIGRATIONS
from gateway.store.sqlite import SQLiteStore
from gateway.store.sqlite import _statements as sqlite_statements
from gateway.testing.fake_llm import FakeLLM
from tests.conftest import Harness
from tests.helpers import assert_json_error
from tests.test_account_api import PASSWORD, REDACTED, save_login
from tests.test_dashboard_signin import sign_in
from tests.test_retention import last_active

AuthHeaders = dict[str, str]


async def chat_ok(harness: Harness, auth: AuthHeaders, message: str, thread: str) -> None:
    response = await harness.chat(auth, message, thread=thread)
    assert response.status == 200, await response.text()


async def threads(harness: Harness, auth: AuthHeaders, **query: Any) -> dict[str, Any]:
    response = await harness.client.get("/api/threads", params=query, headers=auth)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def search(harness: Harness, auth: AuthHeaders, q: str, **query: Any) -> list[str]:
    return [t["threadId"] for t in (await threads(harness, auth, q=q, **query))["threads"]]


async def rename(harness: Harness, auth: AuthHeaders, title: object,
                 thread: str = "t1") -> Any:
    return await harness.client.patch(f"/api/threads/{thread}", json={"title": title},
                                      headers=auth)


# --- titles -----------------------------------------------------------------------------
def test_a_derived_title_is_one_line_cut_at_a_word() -> None:
    assert derived_title("  Hello\n\nthere,\tplan\x07 my trip  ") == "Hello there, plan my trip"
    long = derived_title("word " * 40)
    assert long == "word " * 15 + "word…" and len(long) <= 80
    assert derived_title("x" * 200) == "x" * 79 + "…"
    assert derived_title("a\u202eb\u2028c") == "ab c" and derived_title("") == ""


async def test_a_thread_is_titled_by_its_first_message(harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "Plan my trip\nto Lisbon, please", "t1")
    await chat_ok(harness, auth, "and book it", "t1")
    [listed] = (await threads(harness, auth))["threads"]
    assert (listed["title"], listed["titleSet"]) == ("Plan my trip to Lisbon, please", False)
    shown = await (await harness.client.get("/api/threads/t1", headers=auth)).json()
    assert (shown["title"], shown["titleSet"]) == ("Plan my trip to Lisbon, please", False)


async def test_a_title_made_from_a_message_holding_a_saved_password_is_redacted(
        harness: Harness) -> None:
    auth = await harness.user()
    assert (await save_login(harness, auth)).status == 200
    await chat_ok(harness, auth, f"my password is {PASSWORD}", "t1")
    [listed] = (await threads(harness, auth))["threads"]
    assert listed["title"] == f"my password is {REDACTED}"


# --- renaming -----------------------------------------------------------------------------
async def test_renaming_names_the_thread_and_null_gives_back_the_first_messages(
        harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "Plan my trip", "t1")
    before = (await threads(harness, auth))["threads"][0]
    response = await rename(harness, auth, "  Lisbon in May ")
    assert response.status == 200, await response.text()
    body = await response.json()
    assert (body["threadId"], body["title"], body["titleSet"]) == ("t1", "Lisbon in May", True)
    [listed] = (await threads(harness, auth))["threads"]
    assert listed == {**before, "title": "Lisbon in May", "titleSet": True}
    assert await search(harness, auth, "may") == ["t1"]
    export = await harness.client.get("/api/user/export", headers=auth)
    thread = json.loads(zipfile.ZipFile(io.BytesIO(await export.read())).read(
        "alice/threads/t1.json"))
    assert (thread["title"], thread["titleSet"]) == ("Lisbon in May", True)  # held, so exported
    response = await rename(harness, auth, None)
    assert (await response.json())["title"] == "Plan my trip"
    assert await search(harness, auth, "may") == []


@pytest.mark.parametrize("title", ["", "   ", "x" * 121, "two\nlines", "tab\there",
                                   "bell\x07", "flip\u202eit", 42, ["a"]])
async def test_a_bad_title_is_refused(harness: Harness, title: object) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hello", "t1")
    await assert_json_error(await rename(harness, auth, title), 400, "invalid_title")
    assert (await threads(harness, auth))["threads"][0]["title"] == "hello"


async def test_renaming_refuses_saved_passwords_others_threads_and_bad_bodies(
        harness: Harness) -> None:
    alice = await harness.user()
    bob = await harness.user("bob")
    await chat_ok(harness, alice, "hello", "t1")
    assert (await save_login(harness, alice)).status == 200
    await assert_json_error(await rename(harness, alice, f"pw {PASSWORD}"), 400,
                            "contains_secret")
    await assert_json_error(await rename(harness, bob, "mine now"), 404, "thread_not_found")
    await assert_json_error(await rename(harness, alice, "x", thread="never-used"), 404,
                            "thread_not_found")
    response = await harness.client.patch("/api/threads/t1", json={}, headers=alice)
    await assert_json_error(response, 400, "invalid_title")
    response = await harness.client.patch("/api/threads/t1", data=b"{", headers=alice)
    await assert_json_error(response, 400, "invalid_json")
    assert (await threads(harness, alice))["threads"][0]["title"] == "hello"


async def test_renaming_with_the_session_cookie_needs_the_csrf_token(harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "hello", "t1")
    csrf = await sign_in(harness, auth)
    response = await harness.client.patch("/api/threads/t1", json={"title": "New"})
    await assert_json_error(response, 403, "csrf_failed")
    response = await harness.client.patch("/api/threads/t1", json={"title": "New"},
                                          headers={"X-CSRF-Token": csrf})
    assert response.status == 200 and (await response.json())["title"] == "New"


# --- search -------------------------------------------------------------------------------
async def test_search_finds_ones_own_threads_newest_first_with_a_snippet(
        harness: Harness, fake_llm: FakeLLM) -> None:
    alice = await harness.user()
    bob = await harness.user("bob")
    long = "Earlier we spoke of many things. " * 10 + "Then the Lisbon trams. " + "More. " * 30
    await chat_ok(harness, alice, long, "old")
    await chat_ok(harness, alice, "Pasta tonight", "food")
    await chat_ok(harness, alice, "nothing to see", "named")
    assert (await rename(harness, alice, "Lisbon ideas", thread="named")).status == 200
    await chat_ok(harness, bob, "Lisbon for bob", "t1")

    body = await threads(harness, alice, q="LISB!")
    assert body["terms"] == ["lisb"] and body["nextBefore"] is None
    named, old = body["threads"]
    assert (named["threadId"], named["title"], named["match"]) == (
        "named", "Lisbon ideas", {"messageId": None, "snippet": ""})
    assert old["threadId"] == "old" and old["title"] == derived_title(long)
    match = old["match"]
    assert match["snippet"].startswith("…") and match["snippet"].endswith("…")
    assert "Lisbon trams" in match["snippet"] and len(match["snippet"]) <= SNIPPET_CHARS + 2
    page = await (await harness.client.get("/api/threads/old", headers=alice,
                                           params={"before": match["messageId"] + 1,
                                                   "limit": 1})).json()
    [reply] = page["display_messages"]  # the newest match (the fake model echoes): the UI
    assert reply["id"] == match["messageId"]  # can open the thread there
    assert reply["role"] == "assistant" and "Then the Lisbon trams" in reply["content"]
    assert await search(harness, alice, "pasta tonight") == ["food"]
    assert await search(harness, alice, "pasta lisbon") == []
    assert await search(harness, bob, "lisbon") == ["t1"]
    assert await search(harness, bob, "ideas pasta earlier") == []

    first = await threads(harness, alice, q="lisbon", limit=1)
    assert [t["threadId"] for t in first["threads"]] == ["named"]
    assert await search(harness, alice, "lisbon", before=first["nextBefore"]) == ["old"]


async def test_deleted_and_expired_threads_are_not_found(
        harness: Harness) -> None:
    auth = await harness.user()
    await chat_ok(harness, auth, "zanzibar one", "t1")
    await chat_ok(harness, auth, "zanzibar two", "t2")
    assert await search(harness, auth, "zanzibar") == ["t2", "t1"]
    assert (await harness.client.delete("/api/threads/t2", headers=auth)).status == 204
    assert await search(harness, auth, "zanzibar") == ["t1"]


@pytest.mark.sqlite_only
async def test_threads_purged_by_retention_are_not_found(harness: Harness) -> None:
    auth = await harness.user()  # on the free plan: 30 days
    await chat_ok(harness, auth, "zanzibar one", "t1")
    await chat_ok(harness, auth, "zanzibar two", "t2")
    last_active(harness.gateway.settings, "alice--t1", 31)
    assert [t.session_key for t in (await harness.gateway.retention.purge()).threads] == [
        "alice--t1"]
    assert await search(harness, auth, "zanzibar") == ["t2"]


@pytest.mark.parametrize(("query", "code"), [
    ({"q": ""}, "invalid_q"), ({"q": "   "}, "invalid_q"), ({"q": "a\x00b"}, "invalid_q"),
    ({"q": "x" * 201}, "invalid_q"),
    ({"q": "ok", "before": "yesterday"}, "invalid_before"),
    ({"q": "ok", "limit": "0"}, "invalid_limit")])
async def test_bad_search_input_is_a_clear_400(harness: Harness, query: dict[str, str],
                                               code: str) -> None:
    auth = await harness.user()
    response = await harness.client.get("/api/threads", params=query, headers=auth)
    await assert_json_error(response, 400, code)


async def test_a_query_without_words_finds_nothing_and_only_eight_words_count(
        harness: Harness) -> None:
    """A search box's input is never an error for its words: punctuation alone matches no
    thread, and past the eighth word the answer's ``terms`` says which words were searched."""
    auth = await harness.user()
    await chat_ok(harness, auth, "a b c d e f g h here", "t1")
    assert await threads(harness, auth, q="?!-") == {"threads": [], "nextBefore": None,
                                                     "terms": []}
    found = await threads(harness, auth, q="a b c d e f g h nowhere")
    assert found["terms"] == list("abcdefgh")
    assert [t["threadId"] for t in found["threads"]] == ["t1"]


def test_a_snippet_is_one_line_around_the_first_match() -> None:
    text = "alpha " * 50 + "The\nLisbon trams are yellow. " + "omega " * 50
    cut = snippet(text, ("lisbon",))
    assert cut.startswith("…") and cut.endswith("…") and "\n" not in cut
    assert "The Lisbon trams are yellow." in cut and len(cut) <= SNIPPET_CHARS + 2
    assert cut.index("Lisbon") <= 45  # the match near the start: context before, more after
    assert snippet("short text", ("zz",)) == "short text"
    assert snippet("x_lisbon" + " y" * 100, ("lisbon",)).startswith("x_lisbon")


# --- threads from before titles and search ------------------------------------------------
OLD_ROWS = [
    "INSERT INTO users (user_id, plan, credits, browser_minutes, created_at)"
    " VALUES ('alice', 'free', 10, 0, '2026-01-01T00:00:00.000000Z')",
    "INSERT INTO threads (id, session_key, user_id, thread_id, channel, created_at, updated_at)"
    " VALUES (7, 'alice--old', 'alice', 'old', 'dashboard', '2026-01-01T00:00:00.000000Z',"
    " '2026-01-01T00:00:00.000000Z')",
    "INSERT INTO display_messages (thread, role, content, created_at) VALUES"
    " (7, 'user', 'Zanzibar\nspice tour?', '2026-01-01T00:00:00.000000Z'),"
    " (7, 'assistant', 'Yes: cloves.', '2026-01-01T00:00:00.000000Z')",
]


async def found_in_old_thread(store: Store) -> None:
    await store.open()
    try:
        thread = await store.get_thread("alice--old")
        assert thread is not None and (thread.title, thread.named) == ("Zanzibar spice tour?",
                                                                        False)
        for terms in (("zanzi",), ("cloves",)):
            hits, _ = await store.search_threads("alice", terms, 10)
            assert [h.thread.ref.thread_id for h in hits] == ["old"], terms
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_threads_stored_before_sqlite_migration_10_are_titled_and_found(
        tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for script in SQLITE_MIGRATIONS[:9]:
            for statement in sqlite_statements(script):
                conn.execute(statement)
        conn.execute("PRAGMA user_version = 9")
        for statement in OLD_ROWS:
            conn.execute(statement)
    await found_in_old_thread(SQLiteStore(path))


async def test_threads_stored_before_postgresql_migration_9_are_titled_and_found(
        postgres_url: str) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")
        for number, script in enumerate(POSTGRES_MIGRATIONS[:8], start=1):
            await conn.execute(script)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
        for statement in OLD_ROWS:
            await conn.execute(statement)
    finally:
        await conn.close()
    await found_in_old_thread(PostgresStore(postgres_url))


@pytest.mark.sqlite_only
async def test_a_deleted_users_words_leave_the_sqlite_full_text_index(tmp_path: Path) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = SQLiteStore(path)
    await store.open()
    try:
        for user in ("alice", "bob"):
            await store.create_user(user, "free", 100, 0, "2026-01")
        for n in range(30):  # several index segments, as a live database has
            await store.commit_turn(TurnCommit(
                ThreadRef("alice", f"t{n}", f"alice--t{n}", "dashboard"), "alice",
                [NewMessage("user", f"xylophonic{n} quixotry", 1)], []))
        await store.commit_turn(TurnCommit(ThreadRef("bob", "t", "bob--t", "dashboard"), "bob",
                                           [NewMessage("user", "bob stays", 1)], []))
        await store.set_title("alice--t0", "zugzwangish")

        def stored() -> bytes:
            return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
        assert b"xylophonic" in stored() and b"zugzwangish" in stored()
        assert await store.delete_user("alice")
        assert b"xylophonic" not in stored() and b"quixotry" not in stored()
        assert b"zugzwangish" not in stored()
        hits, _ = await store.search_threads("bob", ("stays",), 10)
        assert [h.thread.ref.thread_id for h in hits] == ["t"]
    finally:
        await store.close()


# --- SQLite's search index, written in batches ---------------------------------------------
def _index_state(path: Path, word: str) -> tuple[int, int]:
    """(display messages not indexed yet, indexed messages holding ``word``)."""
    with closing(sqlite3.connect(path)) as conn:
        queued = conn.execute("SELECT count(*) FROM display_messages WHERE id >"
                              " (SELECT through FROM display_search_indexed)").fetchone()[0]
        indexed = conn.execute("SELECT count(*) FROM display_search WHERE display_search"
                               " MATCH ?", (word,)).fetchone()[0]
        conn.execute("INSERT INTO display_search (display_search) VALUES ('integrity-check')")
    return queued, indexed


async def _alice_store(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    await store.open()
    await store.create_user("alice", "free", 100, 0, "2026-01")
    return store


def _turn(thread: str, *texts: str, replaces: tuple[int, ...] = ()) -> TurnCommit:
    roles = ("user", "assistant")
    return TurnCommit(ThreadRef("alice", thread, f"alice--{thread}", "dashboard"), "alice",
                      [NewMessage(roles[n % 2], text, 1) for n, text in enumerate(texts)], [],
                      replaces=replaces)


@pytest.mark.sqlite_only
async def test_sqlite_queues_messages_for_the_index_and_a_search_finds_the_queued_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = await _alice_store(path)
    try:
        for n in range(3):
            await store.commit_turn(_turn(f"t{n}", "marimba practice", "Noted."))
        assert _index_state(path, "marimba") == (6, 0)  # queued, not indexed yet
        hits, _ = await store.search_threads("alice", ("marimba",), 10)
        assert sorted(h.thread.ref.thread_id for h in hits) == ["t0", "t1", "t2"]
        assert _index_state(path, "marimba") == (0, 3)

        monkeypatch.setattr("gateway.store.sqlite.SEARCH_INDEX_BATCH", 4)
        await store.commit_turn(_turn("t3", "marimba again", "Noted."))
        assert _index_state(path, "marimba") == (2, 3)
        await store.commit_turn(_turn("t4", "marimba once more", "Noted."))
        assert _index_state(path, "marimba") == (0, 5)  # the batch was full: indexed, no search
    finally:
        await store.close()


@pytest.mark.sqlite_only
@pytest.mark.parametrize("indexed", [False, True], ids=["queued", "indexed"])
async def test_a_replaced_exchange_leaves_the_sqlite_index_exact(tmp_path: Path,
                                                                indexed: bool) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = await _alice_store(path)
    try:
        written = await store.commit_turn(_turn("t", "xylophone lesson", "bassoon reply"))
        if indexed:
            await store.index_search()
        # the replacement's display rows take the ids of the ones it deletes (SQLite reuses
        # the largest rowids): they must be indexed, and the old words gone from the index
        await store.commit_turn(_turn("t", "xylophone lesson", "clarinet reply",
                                      replaces=tuple(written.message_ids)))
        assert [h.thread.ref.thread_id for h in
                (await store.search_threads("alice", ("clarinet",), 10))[0]] == ["t"]
        assert (await store.search_threads("alice", ("bassoon",), 10))[0] == []
        assert _index_state(path, "bassoon") == (0, 0)
        assert _index_state(path, "xylophone") == (0, 1)
        assert await store.delete_user("alice")  # queued or indexed, its rows leave cleanly
        assert _index_state(path, "xylophone") == (0, 0)
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_replacing_the_newest_indexed_exchange_leaves_newer_messages_to_be_indexed(
        tmp_path: Path) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = await _alice_store(path)
    try:
        written = await store.commit_turn(_turn("a", "harpsichord tuning", "bassoon reply"))
        await store.index_search()  # the watermark is at the reply
        await store.commit_turn(_turn("b", "theremin lesson", "Noted."))  # past it
        # the deleted reply was at the watermark: it may come down, never up past thread b's
        await store.commit_turn(_turn("a", "harpsichord tuning", "clarinet reply",
                                      replaces=tuple(written.message_ids)))
        assert _index_state(path, "bassoon") == (4, 0)  # b's two and a's new two
        for word, thread in (("theremin", "b"), ("clarinet", "a")):
            hits, _ = await store.search_threads("alice", (word,), 10)
            assert [h.thread.ref.thread_id for h in hits] == [thread]
        assert (await store.search_threads("alice", ("bassoon",), 10))[0] == []
        assert _index_state(path, "harpsichord") == (0, 1)
    finally:
        await store.close()


def _index_the_queue(conn: sqlite3.Connection) -> None:
    """How messages were indexed before SQLite migration 16: from the queue migration 14 made."""
    conn.execute("INSERT INTO display_search (rowid, content) SELECT d.id, d.content"
                 " FROM display_search_pending p JOIN display_messages d USING (id)")
    conn.execute("DELETE FROM display_search_pending")


@pytest.mark.sqlite_only
async def test_sqlite_migration_16_indexes_what_was_queued_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gateway.sqlite3"
    with monkeypatch.context() as before_16:
        before_16.setattr("gateway.store.sqlite.MIGRATIONS", SQLITE_MIGRATIONS[:15])
        before_16.setattr("gateway.store.sqlite._index_search", _index_the_queue)
        store = await _alice_store(path)
        await store.commit_turn(_turn("t0", "glockenspiel indexed", "Noted."))
        await store.index_search()
        await store.commit_turn(_turn("t1", "glockenspiel queued", "Noted."))
        await store.close()
    store = SQLiteStore(path)
    await store.open()
    try:
        assert _index_state(path, "glockenspiel") == (0, 2)  # each indexed once, none left
        hits, _ = await store.search_threads("alice", ("glockenspiel",), 10)
        assert sorted(h.thread.ref.thread_id for h in hits) == ["t0", "t1"]
        await store.commit_turn(_turn("t2", "glockenspiel later", "Noted."))
        assert _index_state(path, "glockenspiel") == (2, 2)
        hits, _ = await store.search_threads("alice", ("glockenspiel",), 10)
        assert len(hits) == 3
    finally:
        await store.close()


@pytest.mark.sqlite_only
async def test_a_failed_batch_of_indexing_leaves_the_turn_committed_and_the_search_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        ) -> None:
    path = tmp_path / "gateway.sqlite3"
    store = await _alice_store(path)
    try:
        def full_disk(conn: sqlite3.Connection) -> None:
            raise sqlite3.OperationalError("database or disk is full")
        monkeypatch.setattr("gateway.store.sqlite.SEARCH_INDEX_BATCH", 2)
        with monkeypatch.context() as patch:
            patch.setattr("gateway.store.sqlite._index_search", full_disk)
            written = await store.commit_turn(_turn("t", "oboe recital", "Noted."))
        assert len(written.message_ids) == 2
        assert "indexing messages for search failed" in caplog.text
        assert _index_state(path, "oboe") == (2, 0)  # still queued
        hits, _ = await store.search_threads("alice", ("oboe",), 10)
        assert [h.thread.ref.thread_id for h in hits] == ["t"]
    finally:
        await store.close()
