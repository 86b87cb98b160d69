"""The OpenAI-compatible fake (zero delay) as its own process: ``python -m bench.fake_llm_server
PORT``."""

from __future__ import annotations

import sys

from aiohttp import web

from gateway.testing.fake_llm import completion

REPLY = "Noted. " * 20


async def handle(request: web.Request) -> web.Response:
    """Answer every chat completion at once (requests are not recorded: memory stays flat)."""
    await request.read()
    return web.json_response(completion(REPLY, prompt_tokens=100, completion_tokens=20))


async def healthz(request: web.Request) -> web.Response:
    """Ready."""
    return web.json_response({"status": "ok"})


if __name__ == "__main__":
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
