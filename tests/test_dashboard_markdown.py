"""The dashboard's Markdown renderer in a real browser: any text renders in bounded time and
depth, to text nodes and the renderer's own elements only; bare addresses, tables, highlighted
code, a Copy button, and long code lines that scroll inside their bubble.

Uses the Chromium fixtures of ``test_dashboard_browser``; screenshots go to the same
``test-artifacts/dashboard/`` folder."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.testing.fake_llm import FakeLLM, Recorded, Scripted, completion
from tests.conftest import Harness
from tests.test_dashboard_browser import ANSWERS, ARTIFACTS, Dashboard, browser, dashboard, expect

__all__ = ["browser", "dashboard"]  # fixtures, used by name

LANGUAGES = ["python", "javascript", "typescript", "json", "bash", "sql", "go", "rust", "c",
             "yaml", "toml", "diff", "markup"]
KINDS = ["comment", "string", "number", "keyword", "literal", "type", "function", "variable",
         "property", "meta", "inserted", "deleted"]

# Run in the page on a batch of sources: render each, time it, and list what is not allowed.
# The renderer's own elements carry only these attributes; the one value that comes from the
# source is a link's address, and it must be http(s) or mailto.
CHECK_ALL = """([sources, languages, kinds]) => {
  const classes = new Set(["code-block", "code-head", "code-language", "copy-code small ghost",
    "table-scroll", "align-left", "align-center", "align-right",
    ...languages.map((l) => `language-${l}`), ...kinds.map((k) => `tok-${k}`)]);
  const fixed = {
    a: { rel: "noopener noreferrer nofollow", target: "_blank" },
    button: { type: "button", "data-testid": "copy-code", "aria-label": "Copy code" },
  };
  const tags = new Set(["P", "H3", "H4", "H5", "H6", "HR", "BLOCKQUOTE", "UL", "OL", "LI",
    "PRE", "CODE", "STRONG", "EM", "DEL", "A", "BR", "DIV", "SPAN", "BUTTON", "TABLE", "THEAD",
    "TBODY", "TR", "TH", "TD"]);
  const problems = [];
  let slowest = 0, deepest = 0, elements = 0;
  for (const source of sources) {
    const started = performance.now();
    let fragment;
    try { fragment = window.markdown.renderMarkdown(source); }
    catch (error) { problems.push([source.slice(0, 80), String(error)]); continue; }
    slowest = Math.max(slowest, performance.now() - started);
    const walk = (node, depth) => {
      deepest = Math.max(deepest, depth);
      for (const child of node.childNodes) {
        if (child.nodeType === Node.TEXT_NODE) continue;
        if (child.nodeType !== Node.ELEMENT_NODE || !tags.has(child.tagName)) {
          problems.push([source.slice(0, 80), `node ${child.nodeName}`]);
          continue;
        }
        elements += 1;
        for (const { name, value } of child.attributes) {
          const tag = child.tagName.toLowerCase();
          const ok = name === "class" ? classes.has(value)
            : name === "href" ? tag === "a" && /^(https?:|mailto:)/i.test(value)
            : name === "start" ? tag === "ol" && /^[0-9]+$/.test(value)
            : fixed[tag]?.[name] === value;
          if (!ok) problems.push([source.slice(0, 80), `${tag} ${name}=${value.slice(0, 40)}`]);
        }
        walk(child, depth + 1);
      }
    };
    walk(fragment, 0);
  }
  return { problems: problems.slice(0, 10), slowest, deepest, elements };
}"""

PIECES = ["*", "**", "***", "_", "__", "~~", "`", "``", "```", "```python\n", "~~~\n", "\n",
          "\n\n", "[", "]", "(", ")", "](", "[x](", "https://example.com", "http://a.b/c_d)",
          "HTTPS://X.Y/**", "mailto:a@b.c", "javascript:alert(1)", "<img src=x onerror=alert(1)>",
          "<script>alert(1)</script>", '<a href="javascript:x">', "|", "| a | b |",
          "|:--|--:|:-:|", "| --- |", "> ", ">>", "- ", "  - ", "1. ", "3) ", "# ", "###### ",
          "    ", "\t", "\\", "\\*", "\\|", "&amp;", "---", "* * *", "def f(x):", "'''", '"',
          "$HOME", "/*", "--", "#", "@", "\u202e", "\U0001f600", "\x00"]
SOURCES = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=60).map(
    "".join)

N = 10_000
HUGE = ["[" * N, "*" * N, "_" * N, "`" * N, "~" * N, ">" * N, "#" * N, "|" * N, "-" * N,
        "(" * N, "](" * N, "[a](" * (N // 4), "**a" * (N // 3), "*a " * (N // 3),
        "_a " * (N // 3), "a*" * (N // 2), "[" * N + "a](https://x.y" + ")" * N,
        "[" * N + "](" + "x" * N, "**" * N + "a" + "**" * N, "*" * N + "a" + "*" * N,
        "~~" * N + "a" + "~~" * N, "`" * (N // 2) + "a" + "`" * (N // 2 - 1),
        "".join("`" * k + " " for k in range(1, 140)), "> " * N, "- " * N,
        "\n".join(" " * k + "- a" for k in range(300)),
        "\n".join("> " * k + "a" for k in range(300)),
        "https://" * N, "http://x" + "_" * N, "h" * N, "\\" * N, "| a |\n|---|\n" + "| b |\n" * N,
        "```\n" + "x" * (10 * N), "```python\n" + '"""' + "a\\" * N, "```rust\nr#\"" + "#" * N,
        "```sql\n" + "'" * N, "```yaml\n" + "- " * N + "x", "```bash\n" + "$" * N,
        "```c\n/*" + "*" * N, "# " + " " * N + "x", "* " * N + "x", "1. " * N]


@pytest.fixture
async def renderer(harness: Harness, browser: Any) -> AsyncIterator[Any]:
    """A page of the dashboard with its Markdown module as ``window.markdown``."""
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    await page.goto(str(harness.client.make_url("/")))
    await page.evaluate("async () => { window.markdown = await import('/static/markdown.js'); }")
    yield page
    await page.close()
    assert errors == []


async def check_all(page: Any, sources: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = await page.evaluate(CHECK_ALL, [sources, LANGUAGES, KINDS])
    return result


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sources=st.lists(SOURCES, min_size=40, max_size=40))
async def test_any_text_renders_to_safe_nodes_quickly(renderer: Any, sources: list[str]) -> None:
    result = await check_all(renderer, sources)  # 40 sources a call: 1,000 in all
    assert result["problems"] == []
    assert result["slowest"] < 250
    assert result["deepest"] <= 40


async def test_ten_thousand_brackets_or_stars_render_in_bounded_time_and_depth(
        renderer: Any) -> None:
    result = await check_all(renderer, HUGE)
    assert result["problems"] == []
    assert result["slowest"] < 500, result
    assert result["deepest"] <= 40, result


async def test_a_bare_address_is_a_link_and_send_still_works(dashboard: Dashboard) -> None:
    await dashboard.sign_in(await dashboard.harness.user())
    await dashboard.send("read https://example.com, then tell me")
    await dashboard.wait_reply(1)
    mine = dashboard.messages("user").last.locator("a")
    await expect(mine).to_have_attribute("href", "https://example.com")
    await expect(mine).to_have_text("https://example.com")
    await dashboard.testid("composer").fill("and again")
    await expect(dashboard.testid("send")).to_be_enabled()
    await dashboard.testid("send").click()
    await dashboard.wait_reply(2)


async def test_a_thread_that_holds_an_address_opens_with_its_messages(
        dashboard: Dashboard) -> None:
    harness = dashboard.harness
    auth = await harness.user()
    assert (await harness.chat(auth, "see https://example.com/docs", thread="links")).status == 200
    await dashboard.sign_in(auth)
    await dashboard.page.locator('[data-testid="thread"][data-thread-id="links"] button').click()
    await dashboard.wait_reply(1)
    link = dashboard.messages("assistant").last.locator('a[href="https://example.com/docs"]')
    await expect(link).to_have_text("https://example.com/docs")
    await expect(dashboard.messages("user")).to_have_count(1)


async def test_addresses_become_links_and_only_safe_ones(renderer: Any) -> None:
    source = ("See https://example.com/a_b. Or <https://x.y/(1)>, **https://bold.example**, "
              "[docs](https://d.example/p?q=1) [bad](javascript:void) "
              "[mail](mailto:a@b.c) and `https://in.code`.")
    links = await renderer.evaluate("""source => {
      const box = document.createElement("div");
      box.append(window.markdown.renderMarkdown(source));
      return [box.textContent, [...box.querySelectorAll("a")].map((a) =>
        [a.getAttribute("href"), a.textContent, a.parentElement.tagName])];
    }""", source)
    assert links == [
        "See https://example.com/a_b. Or https://x.y/(1), https://bold.example, docs "
        "bad (javascript:void) mail and https://in.code.",
        [["https://example.com/a_b", "https://example.com/a_b", "P"],
         ["https://x.y/(1)", "https://x.y/(1)", "P"],
         ["https://bold.example", "https://bold.example", "STRONG"],
         ["https://d.example/p?q=1", "docs", "P"], ["mailto:a@b.c", "mail", "P"]]]


SHAPES = """(source) => {
  const box = document.createElement("div");
  box.append(window.markdown.renderMarkdown(source));
  return box;
}"""


async def test_tables_with_alignment_and_cells_as_markdown(renderer: Any) -> None:
    source = ("Before\n| Left | Centre | Right | Plain |\n|:-----|:------:|-----:|---|\n"
              "| `a\\|b` | **bold** | 3 | a \\| b |\n| [x](https://x.y) | | 12 |\n\nAfter")
    table = await renderer.evaluate_handle(SHAPES, source)
    cells = await table.evaluate("""box => [...box.querySelectorAll("tr")].map(
        (tr) => [...tr.children].map((c) => [c.tagName, c.className, c.textContent]))""")
    assert cells == [
        [["TH", "align-left", "Left"], ["TH", "align-center", "Centre"],
         ["TH", "align-right", "Right"], ["TH", "", "Plain"]],
        [["TD", "align-left", "a|b"], ["TD", "align-center", "bold"], ["TD", "align-right", "3"],
         ["TD", "", "a | b"]],
        [["TD", "align-left", "x"], ["TD", "align-center", ""], ["TD", "align-right", "12"],
         ["TD", "", ""]]]
    assert await table.evaluate("box => [...box.children].map((c) => c.className || c.tagName)") \
        == ["P", "table-scroll", "P"]
    assert await table.evaluate("box => box.querySelector('td code').textContent") == "a|b"
    assert await table.evaluate("box => box.querySelector('td a').href") == "https://x.y/"


async def test_code_is_highlighted_with_classed_spans_only(renderer: Any) -> None:
    source = ("```py\n@cache\ndef total(items: list[int]) -> int:\n"
              "    return sum(items) + 0x1F  # hex\n```\n\n"
              "```ts\nconst n: number = parse(`a${b}`); // c\n```\n\n"
              "```sql\nSELECT name FROM users WHERE id = 'a''b';\n```\n\n"
              "```brainfuck\n+[--->++<]>+.\n```")
    box = await renderer.evaluate_handle(SHAPES, source)
    tokens = await box.evaluate("""box => [...box.querySelectorAll("pre code")].map((code) => [
        code.className, [...code.querySelectorAll("span")].map((s) => [s.className, s.textContent]),
        code.textContent])""")
    python, typescript, sql, unknown = tokens
    assert python[0] == "language-python"
    assert python[2] == ("@cache\ndef total(items: list[int]) -> int:\n"
                         "    return sum(items) + 0x1F  # hex")
    assert {("tok-meta", "@cache"), ("tok-keyword", "def"), ("tok-function", "total"),
            ("tok-type", "list"), ("tok-keyword", "return"), ("tok-number", "0x1F"),
            ("tok-comment", "# hex")} <= set(map(tuple, python[1]))
    assert {("tok-keyword", "const"), ("tok-type", "number"), ("tok-function", "parse"),
            ("tok-string", "`a${b}`"), ("tok-comment", "// c")} <= set(map(tuple, typescript[1]))
    assert {("tok-keyword", "SELECT"), ("tok-keyword", "WHERE"),
            ("tok-string", "'a''b'")} <= set(map(tuple, sql[1]))
    assert unknown == ["", [], "+[--->++<]>+."]
    labels = await box.evaluate(
        "box => [...box.querySelectorAll('.code-language')].map((s) => s.textContent)")
    assert labels == ["py", "ts", "sql", "brainfuck"]


async def test_lists_hold_code_blocks_and_nested_lists(renderer: Any) -> None:
    source = ("1. Install:\n   ```bash\n   pip install x\n   ```\n2. Run\n   - fast\n   - safe\n"
              "\n````markdown\n```\ninner\n```\n````")
    box = await renderer.evaluate_handle(SHAPES, source)
    assert await box.evaluate("box => box.querySelector('ol li pre').textContent") \
        == "pip install x"
    assert await box.evaluate(
        "box => [...box.querySelectorAll('ol > li > ul > li')].map((li) => li.textContent)") \
        == ["fast", "safe"]
    assert await box.evaluate("box => box.querySelector(':scope > .code-block pre').textContent") \
        == "```\ninner\n```"


RICH = ("Here is the comparison:\n\n| Plan | Credits | Price |\n|:-----|:------:|------:|\n"
        "| free | 100 | 0 € |\n| pro | 5,000 | 12 € |\n| team | 50,000 | 99 € |\n\n"
        "```python\nfrom dataclasses import dataclass\n\n@dataclass\nclass Plan:\n"
        "    name: str\n    credits: int = 100  # a month\n\n"
        "    def price(self, months: int) -> float:\n        return 12.5 * months\n```\n\n"
        "And one long line:\n\n```bash\ncurl -s https://example.com/" + "very-long-path/" * 20
        + " -H 'Accept: application/json'\n```\n\nDone.")


def rich_replies(fake_llm: FakeLLM) -> None:
    def answer(request: Recorded) -> Scripted:
        return Scripted(body=completion(RICH))
    fake_llm.responder = answer


NO_OVERFLOW = """() => {
  const page = document.scrollingElement;
  const scroller = document.getElementById("transcript-scroll");
  const edge = scroller.getBoundingClientRect().right;
  const bubbles = [...document.querySelectorAll(".message-body")];
  const pre = [...document.querySelectorAll("#transcript pre")].at(-1);
  return {
    page: page.scrollWidth - page.clientWidth,
    transcript: scroller.scrollWidth - scroller.clientWidth,
    bubblesInside: bubbles.every((b) => b.getBoundingClientRect().right <= edge + 0.5),
    codeScrolls: pre.scrollWidth > pre.clientWidth && getComputedStyle(pre).overflowX === "auto",
  };
}"""


@pytest.mark.parametrize("width", [1280, 390])
async def test_a_long_code_line_scrolls_inside_its_bubble(
        harness: Harness, browser: Any, fake_llm: FakeLLM, width: int) -> None:
    rich_replies(fake_llm)
    page = await browser.new_page(viewport={"width": width, "height": 900})
    board = Dashboard(harness, page)
    await board.sign_in(await harness.user())
    await board.send("Compare the plans, in a table")
    await board.wait_reply(1)
    await page.locator(f"{ANSWERS} .tok-keyword").first.wait_for()
    assert await page.evaluate(NO_OVERFLOW) == {
        "page": 0, "transcript": 0, "bubblesInside": True, "codeScrolls": True}
    name = "desktop" if width > 760 else "phone"
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        answer = page.locator(ANSWERS).last
        await answer.scroll_into_view_if_needed()
        await board.shot(f"markdown-{name}-{scheme}")
        await answer.screenshot(path=str(ARTIFACTS / f"markdown-reply-{name}-{scheme}.png"))
    await page.close()
    assert board.errors == []


async def test_the_copy_button_puts_the_code_on_the_clipboard(
        harness: Harness, browser: Any, fake_llm: FakeLLM) -> None:
    rich_replies(fake_llm)
    context = await browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = await context.new_page()
    board = Dashboard(harness, page)
    await board.sign_in(await harness.user())
    await board.send("Show me the code")
    await board.wait_reply(1)
    button = page.locator(ANSWERS).last.get_by_role("button", name="Copy code").first
    await button.click()
    await expect(button).to_have_text("Copied")
    copied = await page.evaluate("() => navigator.clipboard.readText()")
    assert copied == RICH.split("```python\n")[1].split("\n```")[0]
    assert copied.startswith("from dataclasses import dataclass\n") and "<span" not in copied
    await context.close()
    assert board.errors == []
