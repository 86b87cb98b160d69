"""The HTTP API: ``/chat`` and ``/api/*``, every route behind a bearer token (served by the
dashboard channel)."""

from __future__ import annotations

from aiohttp import web

from . import account, chat, inspector, openai_compat, pinned, signin, threads, webhooks


def api_routes() -> list[web.RouteDef]:
    """Every ``/chat``, ``/api/*`` and OpenAI-compatible ``/v1/*`` route (all need a bearer
    token or a dashboard session) and the dashboard's sign-in routes under ``/auth/``."""
    return [
        web.post("/auth/session", signin.post_sign_in),
        web.get("/auth/login", signin.get_login_link),
        web.get("/api/session", signin.get_session),
        web.delete("/api/session", signin.delete_session),
        web.post("/chat", chat.post_chat),
        web.get("/api/user/memory", pinned.get_memory),
        web.put("/api/user/memory", pinned.put_memory),
        web.delete("/api/user/memory", pinned.delete_memory),
        web.get("/api/user/credits", account.get_credits),
        web.get("/api/user/usage", account.get_usage),
        web.get("/api/user/usage/daily", account.get_daily_usage),
        web.get("/api/user/browser-credentials", account.list_credentials),
        web.put("/api/user/browser-credentials", account.put_credential),
        web.delete("/api/user/browser-credentials", account.delete_credential),
        web.get("/api/threads", threads.list_threads),
        web.get("/api/threads/{thread_id}", threads.get_thread),
        web.get("/api/threads/{thread_id}/context", inspector.get_context),
        web.get("/api/threads/{thread_id}/session", threads.get_session),
        web.post("/api/threads/{thread_id}/clear", threads.clear_thread),
        web.delete("/api/threads/{thread_id}", threads.delete_thread),
        web.get("/api/specialists", account.list_specialists),
        web.get("/api/specialists/{name}", account.get_specialist),
        web.put("/api/specialists/{name}", account.put_specialist),
        web.delete("/api/specialists/{name}", account.delete_specialist),
        web.post("/api/webhooks", webhooks.post_webhook),
        web.get("/api/webhooks", webhooks.list_webhooks),
        web.delete("/api/webhooks/{webhook_id}", webhooks.delete_webhook),
        web.get("/api/webhooks/{webhook_id}/deliveries", webhooks.list_deliveries),
        web.post("/api/webhooks/{webhook_id}/test", webhooks.post_test),
        web.get("/v1/models", openai_compat.get_models),
        web.post("/v1/chat/completions", openai_compat.post_chat_completions),
    ]
