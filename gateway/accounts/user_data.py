"""Everything held about one user, exported as an archive a person can read, or deleted.

The export is a zip of JSON (pretty-printed) and JSONL files:

- ``account.json``: the account, its balances and what it holds;
- ``threads/{threadId}.json``: each thread's title, summary, pinned memory, rolling messages
  and whole display transcript, oldest first;
- ``sessions/{threadId}/active.jsonl`` and ``…/{archive}.jsonl``: the agent sessions as
  stored (files or PostgreSQL);
- ``specialists.json``, ``usage.json`` (the ledger), ``browser-credentials.json`` (sites and
  user names, never a password), ``webhooks.json`` (endpoints, never a secret).

Deleting removes the same: the store's rows (the account's own and those of its threads,
their inbox and outbox rows included; SQLite overwrites what it frees and checkpoints its WAL,
so no byte of it stays in the files) and every session, active and archived.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from typing import Any

from gateway.accounts.secrets import SecretBox
from gateway.base.errors import NotFound
from gateway.memory.sessions import Sessions
from gateway.store import Store, Thread

PAGE = 500


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"


async def _threads(store: Store, user_id: str) -> list[Thread]:
    threads: list[Thread] = []
    cursor = None
    while True:
        page, cursor = await store.list_threads(user_id, PAGE, cursor)
        threads += page
        if cursor is None:
            return threads


async def _transcript(store: Store, key: str) -> list[dict[str, Any]]:
    """The whole display transcript, oldest first."""
    pages = []
    before = None
    while True:
        page = await store.display_page(key, PAGE, before)
        pages.append(page.messages)
        if page.next_before is None:
            break
        before = page.next_before
    return [{"id": m.id, "role": m.role, "content": m.content, "createdAt": m.created_at}
            for messages in reversed(pages) for m in messages]


async def export_user(store: Store, sessions: Sessions, secret_box: SecretBox,
                      user_id: str) -> bytes:
    """The user's archive (see the module docstring); :class:`NotFound` if no such user."""
    user = await store.get_user(user_id)
    if user is None:
        raise NotFound(f"no user {user_id!r}", code="user_not_found")
    files: dict[str, bytes] = {}
    threads = await _threads(store, user_id)
    files["account.json"] = _json({
        "userId": user.user_id, "plan": user.plan, "credits": user.credits,
        "browserMinutes": user.browser_minutes, "period": user.period,
        "createdAt": user.created_at, "admin": user.admin, "blocked": user.blocked,
        "dailyCredits": user.daily_credits, "lastActive": user.active_at,
        "holds": await store.user_counts(user_id)})
    for thread in threads:
        key = thread.ref.session_key
        _, rolling = await store.rolling_memory(key)
        files[f"threads/{thread.ref.thread_id}.json"] = _json({
            "threadId": thread.ref.thread_id, "title": thread.title,
            "titleSet": thread.named, "channel": thread.ref.channel, "sessionKey": key,
            "createdAt": thread.created_at, "updatedAt": thread.updated_at,
            "summary": thread.summary, "pinned": await store.get_pinned(thread.ref),
            "rollingMessages": [{"role": m.role, "content": m.content} for m in rolling],
            "transcript": await _transcript(store, key)})
        active = await sessions.export(key)
        if active is not None:
            files[f"sessions/{thread.ref.thread_id}/active.jsonl"] = active
        for archived in (await sessions.session_status(key)).archives:
            data = await sessions.export(key, archived.name)
            if data is not None:
                files[f"sessions/{thread.ref.thread_id}/{archived.name}"] = data
    files["specialists.json"] = _json(await store.list_specialists(user_id))
    files["usage.json"] = _json(await _ledger(store, user_id))
    files["browser-credentials.json"] = _json([
        {"site": record.site, "username": (secret_box.open(record.blob, user_id) or {}).get(
            "username")} for record in await store.list_credentials(user_id)])
    files["webhooks.json"] = _json([
        {"id": w.id, "url": w.url, "events": list(w.events), "createdAt": w.created_at}
        for w in await store.list_webhooks(user_id)])
    files["jobs.json"] = _json([
        {"id": j.id, "threadId": j.ref.thread_id, "channel": j.ref.channel, "kind": j.kind,
         "spec": j.spec, "timeZone": j.time_zone, "action": j.action, "text": j.text,
         "misfire": j.misfire, "state": j.state, "nextRun": j.next_run, "runs": j.runs,
         "misses": j.misses, "createdAt": j.created_at}
        for j in await store.list_jobs(user_id)])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in files.items():
            zipped.writestr(f"{user_id}/{name}", data)
    return buffer.getvalue()


async def _ledger(store: Store, user_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    before = None
    while True:
        entries, before = await store.ledger_page(user_id, PAGE, before)
        rows += [{"id": e.id, "kind": e.charge.kind, "model": e.charge.model,
                  "thread": e.thread_key, "promptTokens": e.charge.prompt_tokens,
                  "completionTokens": e.charge.completion_tokens, "credits": e.charge.credits,
                  "browserMinutes": e.charge.minutes, "createdAt": e.created_at}
                 for e in entries]
        if before is None:
            return rows


@dataclass(frozen=True)
class Deleted:
    """What deleting a user removed."""

    threads: int
    sessions: int


async def delete_user(store: Store, sessions: Sessions, user_id: str) -> Deleted:
    """Remove the user's sessions, then every row held about them; :class:`NotFound` if no
    such user. (Sessions first: a crash in between leaves rows that a second run deletes,
    never sessions no row leads to.)"""
    if await store.get_user(user_id) is None:
        raise NotFound(f"no user {user_id!r}", code="user_not_found")
    threads = await _threads(store, user_id)
    removed = 0
    for thread in threads:
        removed += await sessions.remove(thread.ref.session_key)
    await store.delete_user(user_id)
    return Deleted(len(threads), removed)
