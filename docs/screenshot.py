"""Draw the README's picture of the dashboard: ``python3 dev.py screenshot``.

A gateway on loopback (a temporary data dir, the test kit's fake LLM answering with a little
Markdown), one user with a conversation, pinned facts and a specialist; headless Chromium
(``/usr/bin/chromium``, driven by Playwright) signs in and photographs it into
``docs/dashboard.png``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright

from gateway.app import build_app
from gateway.config.settings import load_settings
from gateway.gateway import Gateway
from gateway.plugins.manager import declared_settings, make_plugin_manager
from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion, default_reply
from gateway.testing.loopback import LoopbackServer

OUT = Path(__file__).resolve().parent / "dashboard.png"
CONVERSATION = [
    ("I'm in Lyon next weekend. What should I eat?",
     "Lyon is France's food capital, so you're in luck. Three classics:\n\n"
     "1. **Quenelles** de brochet with Nantua sauce\n"
     "2. **Salade lyonnaise**: frisée, lardons and a poached egg\n"
     "3. **Praline tart** for dessert\n\n"
     "Eat them in a *bouchon*, a small traditional restaurant."),
    ("Any bouchon near the old town?",
     "Yes: the `Vieux Lyon` quarter has several. Book ahead for Saturday night, and ask for "
     "the *menu du jour*: it is usually the best value."),
]


def answers(request: Recorded) -> Scripted:
    """The next canned reply for a chat turn; summaries as the kit makes them."""
    if request.is_summary:
        return default_reply(request)
    said = request.messages[-1]["content"]
    for question, reply in CONVERSATION:
        if said == question:
            return Scripted(body=completion(reply, 420, 90))
    return default_reply(request)


async def main() -> int:
    llm = FakeLLM()
    llm.responder = answers
    await llm.start()
    with tempfile.TemporaryDirectory() as data_dir:
        pm = make_plugin_manager()
        settings = load_settings(None, env={
            "CLOUDYBOT_DATA_DIR": data_dir, "CLOUDYBOT_LLM_BASE_URL": llm.url,
            "CLOUDYBOT_LLM_API_KEY": "fake", "CLOUDYBOT_LLM_MODEL": "gpt-4o-mini",
            "CLOUDYBOT_PURGE_INTERVAL_MINUTES": "0"}, plugins=declared_settings(pm))
        gateway = Gateway(settings, pm)
        server = LoopbackServer()
        port = await server.serve(await build_app(gateway))
        base = f"http://127.0.0.1:{port}"
        try:
            await gateway.accounts.add_user("ada", plan="pro")
            code = await gateway.accounts.login_link_code("ada")
            await photograph(base, code)
        finally:
            await server.close()
            await llm.close()
    print(f"wrote {OUT}")
    return 0


async def photograph(base: str, code: str) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = await browser.new_page(viewport={"width": 1360, "height": 820},
                                      device_scale_factor=1)
        await page.goto(f"{base}/auth/login?code={code}")
        await page.get_by_test_id("sign-in-with-link").click()
        composer = page.get_by_test_id("composer")
        await composer.wait_for()
        await page.get_by_role("tab", name="Memory").click()
        await page.get_by_test_id("memory-key").fill("diet")
        await page.get_by_test_id("memory-value").fill("vegetarian, loves cheese")
        await page.get_by_test_id("memory-save").click()
        await page.locator('[data-testid="memory-entry"]').wait_for()
        for number, (question, _) in enumerate(CONVERSATION, start=1):
            await composer.fill(question)
            await page.get_by_test_id("send").click()
            await page.wait_for_function(
                "n => document.querySelectorAll('[data-testid=message][data-role=assistant]"
                ":not(.streaming)').length >= n", arg=number)
        await page.get_by_role("tab", name="Context").click()
        await page.locator('.segment[data-layer="pinned"]').wait_for()
        await page.screenshot(path=str(OUT))
        await browser.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))


