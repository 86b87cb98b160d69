"""Typed keys for application and request state."""

from __future__ import annotations

from aiohttp import web

from gateway.gateway import Gateway
from gateway.store import User, WebSession

gateway_key = web.AppKey("gateway", Gateway)
user_key = web.RequestKey("user", User)
web_session_key = web.RequestKey("web_session", WebSession)
