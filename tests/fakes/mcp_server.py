"""A real MCP server, written with the official SDK, for the MCP plugin's tests and bench.

``python -m tests.fakes.mcp_server --log FILE stdio`` serves it on stdin/stdout (one process a
connection); ``... http`` serves Streamable HTTP on a loopback port it prints as its first line.
Every request and notification it receives is appended to ``FILE`` as one line (the method,
then the tool's name for ``tools/call``), so a test counts connections (``initialize``),
``tools/list`` calls and cancellations at the server.

Its tools: ``echo``, ``add``, ``slow`` (works ``seconds``, reporting progress every
``every`` seconds when asked), ``hang`` (never answers), ``crash`` (the process exits),
``flood`` (``count`` progress and log notifications, then a short answer), ``big`` (a text of
``size`` characters), ``picture`` (a PNG and a caption), ``document`` (an embedded resource),
``whoami`` (the ``X-User`` header it was called with, over HTTP), ``grow`` (adds the tool
``late`` and tells the client its tool list changed), and two whose names need the client's
sanitising: ``get.item`` and ``get_item``, and one named with 70 characters.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import socket
import sys
from pathlib import Path
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents

LONG_NAME = "a_tool_whose_name_is_long_enough_to_pass_the_sixty_four_character_limit"
# the smallest PNG: one transparent pixel
PIXEL = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6300010000050001" "0d0a2db40000000049454e44ae426082")).decode()


class Recorder:
    """Appends each request's and notification's method to the log file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, line: str) -> None:
        """Append one line (opened each time: several processes may share the file)."""
        with self.path.open("a", encoding="utf-8") as log:
            log.write(line + "\n")

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: CallNext[Any],
                       ) -> HandlerResult:
        params = ctx.params or {}
        name = params.get("name", "") if ctx.method == "tools/call" else ""
        self.write(f"{ctx.method} {name}".strip())
        return await call_next(ctx)


def build(recorder: Recorder) -> MCPServer:
    """The server and its tools."""
    server = MCPServer("fake", middleware=[recorder])

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two numbers.")
    def add(a: float, b: float) -> str:
        return str(a + b)

    @server.tool(description="Work for a while, reporting progress when asked.")
    async def slow(seconds: float, every: float, ctx: Context) -> str:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        done = 0
        while loop.time() < end:
            await asyncio.sleep(min(every, max(0.0, end - loop.time())))
            done += 1
            if every < seconds:
                await ctx.report_progress(done)
        return f"worked {seconds} s"

    @server.tool(description="Never answer.")
    async def hang() -> str:
        await asyncio.Event().wait()
        return "never"

    @server.tool(description="Exit the server process.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Send many notifications, then answer.")
    async def flood(count: int, ctx: Context) -> str:
        for number in range(count):
            await ctx.report_progress(number, count)
            await ctx.info(f"notification {number}")
        return f"sent {count}"

    @server.tool(description="A long text.")
    def big(size: int) -> str:
        return "x" * size

    @server.tool(description="A picture with a caption.")
    def picture() -> list[TextContent | ImageContent]:
        return [TextContent(type="text", text="a pixel"),
                ImageContent(type="image", data=PIXEL, mime_type="image/png")]

    @server.tool(description="A document, as an embedded resource.")
    def document() -> list[EmbeddedResource]:
        return [EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="file:///srv/notes.txt", mime_type="text/plain", text="the notes"))]

    @server.tool(description="The FAKE_MCP_SECRET this process was started with.")
    def secret() -> str:
        return os.environ.get("FAKE_MCP_SECRET", "unset")

    @server.tool(description="Who is calling (the X-User header).")
    def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        return headers.get("x-user", "nobody")

    @server.tool(description="Add the tool 'late' and say the tool list changed.")
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "late and here", name="late", description="Added later.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    server.add_tool(lambda: "dotted", name="get.item", description="A dotted name.")
    server.add_tool(lambda: "underscored", name="get_item", description="An underscored name.")
    server.add_tool(lambda: "long", name=LONG_NAME, description="A long name.")
    return server


def main() -> None:
    """Serve over stdio or Streamable HTTP, as the arguments say."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("transport", choices=("stdio", "http"))
    args = parser.parse_args()
    recorder = Recorder(args.log)
    server = build(recorder)
    if args.transport == "stdio":
        recorder.write("process")
        asyncio.run(server.run_stdio_async())
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    sys.exit(main())
