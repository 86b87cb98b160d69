"""The caller's account: credits, specialists, saved browser credentials."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aiohttp import web

from gateway.accounts import user_data
from gateway.accounts.secrets import REDACTED, refuse_saved_passwords
from gateway.api.context import caller, int_param
from gateway.api.middleware import read_json_object
from gateway.base import validation
from gateway.base.errors import BadRequest, NotFound
from gateway.billing.credits import period_bounds
from gateway.store import Charge, SecretRecord

MAX_SITE_CHARS = validation.MAX_SITE_CHARS
MIN_PASSWORD_CHARS = 8
DEFAULT_USAGE_PAGE = 50
MAX_USAGE_PAGE = 500
MAX_SECRET_CHARS = 1000
# Passwords refused as such: parts of the redaction marker, which every redaction would show.
REFUSED_PASSWORDS = sorted({REDACTED[i:j] for i in range(len(REDACTED))
                            for j in range(i + MIN_PASSWORD_CHARS, len(REDACTED) + 1)})
DEFAULT_DAYS = 30
MAX_DAYS = 366


async def get_credits(request: web.Request) -> web.Response:
    """Plan, balances and the current period (this month's grant applied if due)."""
    gateway, user = caller(request)
    fresh = await gateway.accounts.current_user(await gateway.store.get_user(user.user_id) or user)
    start, end = period_bounds(fresh.period)
    return web.json_response({"userId": fresh.user_id, "plan": fresh.plan,
                              "credits": fresh.credits, "browserMinutes": fresh.browser_minutes,
                              "period": fresh.period, "periodStart": start, "periodEnd": end})


def _charge_json(charge: Charge) -> dict[str, object]:
    return {"promptTokens": charge.prompt_tokens, "completionTokens": charge.completion_tokens,
            "credits": charge.credits, "browserMinutes": charge.minutes}


async def get_usage(request: web.Request) -> web.Response:
    """The ledger, newest first (``?limit=&before=``), with per-kind totals of this period."""
    gateway, user = caller(request)
    limit = int_param(request, "limit", DEFAULT_USAGE_PAGE, low=1, high=MAX_USAGE_PAGE)
    before = int_param(request, "before", None, low=1, high=2**62)
    assert limit is not None
    fresh = await gateway.accounts.current_user(user)
    start, end = period_bounds(fresh.period)
    entries, next_before = await gateway.store.ledger_page(user.user_id, limit, before)
    totals = await gateway.store.ledger_totals(user.user_id, start)
    return web.json_response({
        "userId": user.user_id,
        "period": fresh.period, "periodStart": start, "periodEnd": end,
        "entries": [{"id": e.id, "kind": e.charge.kind, "model": e.charge.model,
                     "thread": e.thread_key, "createdAt": e.created_at,
                     **_charge_json(e.charge)} for e in entries],
        "nextBefore": next_before,
        "totals": {kind: {"count": int(t.model), **_charge_json(t)}
                   for kind, t in totals.items()},
    })


async def get_daily_usage(request: web.Request) -> web.Response:
    """``GET /api/user/usage/daily?days=`` (1-366, default 30): credits and browser minutes
    spent per UTC day and kind, from the ledger (grants left out), every day listed, the
    oldest first; for the dashboard's usage chart."""
    gateway, user = caller(request)
    days = int_param(request, "days", DEFAULT_DAYS, low=1, high=MAX_DAYS)
    assert days is not None
    today = datetime.fromtimestamp(gateway.clock(), UTC).date()
    first = today - timedelta(days=days - 1)
    spent: dict[str, dict[str, dict[str, int]]] = {
        (first + timedelta(days=n)).isoformat(): {} for n in range(days)}
    for day, kind, credits, minutes in await gateway.store.ledger_daily(
            user.user_id, first.isoformat()):
        if day in spent:
            spent[day][kind] = {"credits": credits, "browserMinutes": minutes}
    return web.json_response({"userId": user.user_id, "days": [
        {"date": day, "credits": sum(k["credits"] for k in kinds.values()), "kinds": kinds}
        for day, kinds in spent.items()]})


def _specialist(name: str, instructions: str) -> web.Response:
    return web.json_response({"name": name, "instructions": instructions})


async def list_specialists(request: web.Request) -> web.Response:
    """All the caller's specialists."""
    gateway, user = caller(request)
    specialists = await gateway.store.list_specialists(user.user_id)
    return web.json_response({"specialists": [
        {"name": name, "instructions": text} for name, text in specialists.items()]})


async def get_specialist(request: web.Request) -> web.Response:
    """One specialist; 404 if the caller has none of that name."""
    gateway, user = caller(request)
    name = validation.name(request.match_info["name"], "name")
    instructions = await gateway.store.get_specialist(user.user_id, name)
    if instructions is None:
        raise NotFound(f"no specialist named {name!r}", code="specialist_not_found")
    return _specialist(name, instructions)


async def put_specialist(request: web.Request) -> web.Response:
    """Create or replace a specialist's instructions."""
    gateway, user = caller(request)
    name = validation.name(request.match_info["name"], "name")
    body = await read_json_object(request)
    instructions = validation.text(body.get("instructions"), "instructions",
                                   validation.MAX_INSTRUCTIONS_CHARS)
    await refuse_saved_passwords(gateway.store, gateway.secret_box, user.user_id,
                                 {"name": name, "instructions": instructions})
    await gateway.store.put_specialist(user.user_id, name, instructions)
    return _specialist(name, instructions)


async def delete_specialist(request: web.Request) -> web.Response:
    """Delete a specialist; 404 if there was none."""
    gateway, user = caller(request)
    name = validation.name(request.match_info["name"], "name")
    if not await gateway.store.delete_specialist(user.user_id, name):
        raise NotFound(f"no specialist named {name!r}", code="specialist_not_found")
    return web.Response(status=204)


async def _credential_list(request: web.Request,
                           records: list[SecretRecord]) -> web.Response:
    gateway, user = caller(request)
    listed = []
    for record in records:
        document = gateway.secret_box.open(record.blob, user.user_id)
        listed.append({"site": record.site,
                       "username": document["username"] if document else None})
    return web.json_response(listed)


async def list_credentials(request: web.Request) -> web.Response:
    """Saved logins as ``[{site, username}]``; never the password."""
    gateway, user = caller(request)
    return await _credential_list(request, await gateway.store.list_credentials(user.user_id))


async def put_credential(request: web.Request) -> web.Response:
    """Save a login, encrypted at rest; answer with the list (no passwords)."""
    gateway, user = caller(request)
    body = await read_json_object(request)
    site = validation.site(body.get("site"))
    username = validation.text(body.get("username"), "username", MAX_SECRET_CHARS)
    password = validation.text(body.get("password"), "password", MAX_SECRET_CHARS)
    if len(password) < MIN_PASSWORD_CHARS:
        # Saved passwords are redacted wherever they appear in stored text: a very short one
        # would cut ordinary words apart.
        raise BadRequest(f"password must be at least {MIN_PASSWORD_CHARS} characters",
                         code="invalid_password")
    if password in REFUSED_PASSWORDS:
        # Every redaction would then show it.
        raise BadRequest("password must not be part of the redaction marker "
                         f"{REDACTED!r}", code="invalid_password")
    blob = gateway.secret_box.seal({"username": username, "password": password}, user.user_id)
    records = await gateway.store.put_credential(user.user_id, site, blob)
    return await _credential_list(request, records)


async def delete_credential(request: web.Request) -> web.Response:
    """Forget the login for ``?site=``; answer with the remaining list."""
    gateway, user = caller(request)
    site = validation.text(request.query.get("site"), "site", MAX_SITE_CHARS)
    return await _credential_list(
        request, await gateway.store.delete_credential(user.user_id, site.strip()))


async def get_export(request: web.Request) -> web.Response:
    """``GET /api/user/export``: everything held about the caller as one zip (JSON and JSONL
    files a person can read; never a password or a secret)."""
    gateway, user = caller(request)
    data = await user_data.export_user(gateway.store, gateway.sessions, gateway.secret_box,
                                       user.user_id)
    return web.Response(body=data, content_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{user.user_id}-export.zip"'})
