"""``/api/admin/*``: accounts (list and search, block, grant, daily caps), usage and cost over
time, the gateway's health and the audit log. Admin accounts only: the auth middleware
answers anyone else 403 ``admin_only``; every change an admin makes is in the audit log with
their id and address (:mod:`gateway.accounts.admin`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from aiohttp import web

from gateway.accounts.admin import Actor
from gateway.api.context import caller, int_param
from gateway.api.middleware import read_json_object
from gateway.base import validation
from gateway.base.errors import BadRequest, Conflict
from gateway.base.times import iso_utc
from gateway.billing.credits import daily_allowance
from gateway.gateway import Gateway
from gateway.store import (
    AuditQuery,
    AuditRecord,
    Spend,
    UsageQuery,
    User,
    UserQuery,
    policy,
)
from gateway.store import usage as rollups

DEFAULT_USERS, MAX_USERS = 50, 500
DEFAULT_AUDIT, MAX_AUDIT = 50, 500
MAX_SEARCH_CHARS = 128
DEFAULT_TOP, MAX_TOP = 10, 100
# A report's default range and its longest, per bucket.
DEFAULT_SPAN = {"day": timedelta(days=30), "hour": timedelta(hours=48)}
MAX_SPAN = {"day": timedelta(days=366), "hour": timedelta(days=31)}
FAILING_SINCE_SECONDS = 86_400.0  # the health report counts deliveries failed for good since
STAMP = {"day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H"}
MIN_YEAR, MAX_YEAR = 2000, 9000  # a report's range, and the audit log's since
# A moment a query names: a date, or a date and time (hours, minutes, seconds, a fraction of
# them each optional), UTC unless it names an offset
WHEN = re.compile(r"\d{4}-\d\d-\d\d(?:T\d\d(?::\d\d(?::\d\d(?:\.\d{1,6})?)?)?"
                  r"(?:Z|[+-]\d\d:\d\d)?)?")


def _actor(request: web.Request) -> Actor:
    """The admin making the request, and the address it came from."""
    _, user = caller(request)
    return Actor(user.user_id, request.remote or "unknown")


def _user_json(gateway: Gateway, user: User) -> dict[str, object]:
    now = gateway.clock()
    daily = daily_allowance(gateway.settings, user, now)
    return {"userId": user.user_id, "plan": user.plan, "credits": user.credits,
            "browserMinutes": user.browser_minutes, "period": user.period,
            "createdAt": user.created_at, "lastActive": user.active_at,
            "admin": user.admin, "blocked": user.blocked, "dailyCredits": user.daily_credits,
            "dailyCap": daily.cap if daily else None,
            "spentToday": user.spent_today if user.spent_day == policy.day_of(now) else 0}


def _spend_json(spend: Spend) -> dict[str, int]:
    return {"calls": spend.calls, "promptTokens": spend.prompt_tokens,
            "completionTokens": spend.completion_tokens, "credits": spend.credits,
            "browserMinutes": spend.minutes}


def _flag(request: web.Request, name: str) -> bool | None:
    """An optional ``true``/``false`` query parameter (400 otherwise)."""
    raw = request.query.get(name)
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise BadRequest(f"{name} must be true or false", code=f"invalid_{name}")
    return raw == "true"


def _target(request: web.Request) -> str:
    """The account named in the path (400 if no account could have that id)."""
    return validation.user_id(request.match_info["user_id"])


# --- accounts ------------------------------------------------------------------------------
async def list_users(request: web.Request) -> web.Response:
    """``GET /api/admin/users``: accounts by user id, a page at a time (``limit``, and
    ``after``: the ``nextAfter`` of the page before), those whose id holds ``q`` (any case),
    on ``plan``, ``blocked`` or not, ``admin`` or not. Each with its plan, balances, when it
    was last charged for a call, its flags and its daily cap."""
    gateway, _ = caller(request)
    limit = int_param(request, "limit", DEFAULT_USERS, low=1, high=MAX_USERS)
    assert limit is not None
    after = request.query.get("after")
    search = request.query.get("q")
    plan = request.query.get("plan")
    query = UserQuery(limit + 1, validation.user_id(after) if after is not None else None,
                      validation.text(search, "q", MAX_SEARCH_CHARS)
                      if search is not None else None,
                      validation.name(plan, "plan") if plan is not None else None,
                      _flag(request, "blocked"), _flag(request, "admin"))
    users = await gateway.store.find_users(query)
    page = users[:limit]
    return web.json_response({"users": [_user_json(gateway, user) for user in page],
                              "nextAfter": page[-1].user_id if len(users) > limit else None})


async def block_user(request: web.Request) -> web.Response:
    """``POST /api/admin/users/{user_id}/block``: refuse the account's API calls, dashboard
    and channel turns from its next request on (its data stays; scheduled jobs do not run).
    An admin cannot block their own account."""
    gateway, admin = caller(request)
    user_id = _target(request)
    if user_id == admin.user_id:
        raise Conflict("an admin cannot block their own account", code="cannot_block_self")
    user = await gateway.admin.set_blocked(user_id, True, _actor(request))
    return web.json_response(_user_json(gateway, user))


async def unblock_user(request: web.Request) -> web.Response:
    """``POST /api/admin/users/{user_id}/unblock``: let the account in again."""
    gateway, _ = caller(request)
    user = await gateway.admin.set_blocked(_target(request), False, _actor(request))
    return web.json_response(_user_json(gateway, user))


async def grant_credits(request: web.Request) -> web.Response:
    """``POST /api/admin/users/{user_id}/grants``: add ``credits`` to the account, a ledger
    row of kind ``admin_grant``; the ``reason`` (required) goes to the audit log."""
    gateway, _ = caller(request)
    user_id = _target(request)
    body = await read_json_object(request)
    user = await gateway.admin.grant(user_id, body.get("credits"), body.get("reason"),
                                     _actor(request))
    return web.json_response({"user": _user_json(gateway, user), "granted": body["credits"]},
                             status=201)


async def set_budget(request: web.Request) -> web.Response:
    """``PUT /api/admin/users/{user_id}/budget``: the account's own daily credit cap
    (``dailyCredits``: a whole number, 0 for none; null for its plan's)."""
    gateway, _ = caller(request)
    user_id = _target(request)
    body = await read_json_object(request)
    if "dailyCredits" not in body:
        raise BadRequest("dailyCredits is required (null: the plan's)",
                         code="invalid_daily_credits")
    user = await gateway.admin.set_daily_credits(user_id, body["dailyCredits"], _actor(request))
    return web.json_response(_user_json(gateway, user))


# --- usage --------------------------------------------------------------------------------
def _moment(request: web.Request, name: str) -> datetime | None:
    """A query parameter as a UTC moment: a date (``2026-12-01``) or an ISO-8601 date-time
    (UTC when it names no offset); None when absent."""
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        if not WHEN.fullmatch(raw):
            raise ValueError(raw)
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a date (YYYY-MM-DD) or an ISO-8601 date-time",
                         code=f"invalid_{name}") from None
    if not MIN_YEAR <= moment.year <= MAX_YEAR:
        raise BadRequest(f"{name} must be in the years {MIN_YEAR} to {MAX_YEAR}",
                         code=f"invalid_{name}")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _floor(moment: datetime, bucket: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == "day" else moment


def usage_query(request: web.Request, now: float) -> UsageQuery:
    """The report ``GET /api/admin/usage`` asks for: its range in whole buckets, ``from``
    floored and ``to`` (exclusive) rounded up to one; by default the last 30 days (``day``)
    or 48 hours (``hour``) up to now."""
    bucket = request.query.get("bucket", "day")
    if bucket not in rollups.BUCKETS:
        raise BadRequest("bucket must be day or hour", code="invalid_bucket")
    group_by = request.query.get("groupBy", "model")
    if group_by not in rollups.GROUPS:
        raise BadRequest("groupBy must be one of " + ", ".join(rollups.GROUPS),
                         code="invalid_groupBy")
    top = int_param(request, "top", DEFAULT_TOP, low=1, high=MAX_TOP)
    assert top is not None
    step = timedelta(days=1) if bucket == "day" else timedelta(hours=1)
    until = _moment(request, "to") or datetime.fromtimestamp(now, UTC)
    end = _floor(until, bucket)
    end = end + step if end < until else end
    start = _floor(_moment(request, "from") or end - DEFAULT_SPAN[bucket], bucket)
    if not start < end:
        raise BadRequest("from must be before to", code="invalid_range")
    if end - start > MAX_SPAN[bucket]:
        raise BadRequest(f"a report by {bucket} covers at most {MAX_SPAN[bucket].days} days",
                         code="invalid_range")
    return UsageQuery(start.strftime(STAMP[bucket]), end.strftime(STAMP[bucket]), bucket,
                      group_by, top)


async def usage_report(request: web.Request) -> web.Response:
    """``GET /api/admin/usage``: credits, calls, tokens and browser minutes over time, per
    ``bucket`` (``day`` or ``hour``) from ``from`` to ``to`` (exclusive), grouped by ``plan``,
    ``model``, ``channel``, ``tool`` or ``user`` (the top spenders), with the range's totals
    and its ``top`` spenders (of the whole UTC days the range touches: per-account figures
    are kept per day). Read from rollups kept with the ledger, never the ledger itself."""
    gateway, _ = caller(request)
    query = usage_query(request, gateway.clock())
    if query.group_by == "user" and query.bucket == "hour":
        raise BadRequest("usage by user is kept per day: use bucket=day",
                         code="invalid_bucket")
    report = await gateway.store.usage_report(query)
    first, end = rollups.days_of(query.start, query.end)
    return web.json_response({
        "from": query.start, "to": query.end, "bucket": query.bucket,
        "groupBy": query.group_by,
        "series": [{"bucket": row.bucket, "group": row.group, **_spend_json(row.spend)}
                   for row in report.rows],
        "totals": _spend_json(report.total),
        "topSpenders": {"from": first, "to": end, "users": [
            {"userId": user_id, **_spend_json(spend)} for user_id, spend in report.spenders]},
    })


# --- health and the audit log ------------------------------------------------------------------
def _host(url: str) -> str:
    """An endpoint's scheme and host: its path and query may hold a secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


async def get_health(request: web.Request) -> web.Response:
    """``GET /api/admin/health``: each channel's inbox and outbox (replies waiting, the
    oldest one's age, replies failed for good), the webhook endpoints failing (deliveries
    being retried, or failed for good in the last 24 hours) and the scheduled jobs by state."""
    gateway, _ = caller(request)
    now = gateway.clock()
    since = now - FAILING_SINCE_SECONDS
    health = await gateway.store.health(since)
    return web.json_response({
        "channels": [{"channel": c.channel, "inboxPending": c.inbox_pending,
                      "outboxPending": c.outbox_pending,
                      "oldestPending": iso_utc(c.oldest_pending)
                      if c.oldest_pending is not None else None,
                      "oldestPendingSeconds": round(max(0.0, now - c.oldest_pending), 3)
                      if c.oldest_pending is not None else None,
                      "failed": c.failed} for c in health.channels],
        "webhooks": [{"id": w.webhook_id, "userId": w.user_id, "host": _host(w.url),
                      "retrying": w.retrying, "failed": w.failed,
                      "lastStatusCode": w.last_status, "lastError": w.last_error}
                     for w in health.webhooks],
        "failingSince": iso_utc(since),
        "jobs": {state: health.jobs.get(state, 0) for state in ("active", "paused", "done")},
    })


def _audit_json(record: AuditRecord) -> dict[str, object]:
    entry = record.entry
    return {"id": record.id, "at": record.at, "actor": entry.actor, "action": entry.action,
            "target": entry.target, "details": entry.details, "source": entry.source}


async def get_audit(request: web.Request) -> web.Response:
    """``GET /api/admin/audit``: the audit log, newest first, a page at a time (``limit``,
    ``before``: the ``nextBefore`` of the page before), from ``since`` on, of one ``actor``
    or ``action``."""
    gateway, _ = caller(request)
    limit = int_param(request, "limit", DEFAULT_AUDIT, low=1, high=MAX_AUDIT)
    before = int_param(request, "before", None, low=1, high=2**62)
    assert limit is not None
    since = _moment(request, "since")
    actor, action = request.query.get("actor"), request.query.get("action")
    records = await gateway.store.audit_log(AuditQuery(
        limit + 1, before, iso_utc(since.timestamp()) if since is not None else None,
        validation.text(actor, "actor", MAX_SEARCH_CHARS) if actor is not None else None,
        validation.text(action, "action", MAX_SEARCH_CHARS) if action is not None else None))
    page = records[:limit]
    return web.json_response({"entries": [_audit_json(record) for record in page],
                              "nextBefore": page[-1].id if len(records) > limit else None})
