"""The caller's account: credits, specialists, saved browser credentials."""

from __future__ import annotations

from aiohttp import web

from .. import validation
from ..errors import NotFound
from ..store import SecretRecord
from .context import caller
from .middleware import read_json_object

MAX_SITE_CHARS = 253
MAX_SECRET_CHARS = 1000


async def get_credits(request: web.Request) -> web.Response:
    """Plan and balances."""
    gateway, user = caller(request)
    fresh = await gateway.store.get_user(user.user_id) or user
    return web.json_response({"userId": fresh.user_id, "plan": fresh.plan,
                              "credits": fresh.credits, "browserMinutes": fresh.browser_minutes})


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
    site = validation.text(body.get("site"), "site", MAX_SITE_CHARS)
    username = validation.text(body.get("username"), "username", MAX_SECRET_CHARS)
    password = validation.text(body.get("password"), "password", MAX_SECRET_CHARS)
    blob = gateway.secret_box.seal({"username": username, "password": password}, user.user_id)
    records = await gateway.store.put_credential(user.user_id, site.strip(), blob)
    return await _credential_list(request, records)


async def delete_credential(request: web.Request) -> web.Response:
    """Forget the login for ``?site=``; answer with the remaining list."""
    gateway, user = caller(request)
    site = validation.text(request.query.get("site"), "site", MAX_SITE_CHARS)
    return await _credential_list(
        request, await gateway.store.delete_credential(user.user_id, site.strip()))
