"""POST /chat end to end against the fake OpenAI-compatible server."""

from __future__ import annotations

from tests.conftest import Harness


async def test_chat_replies_and_reports_usage(harness: Harness) -> None:
    auth = await harness.user()
    response = await harness.chat(auth, "hello there")
    assert response.status == 200
    body = await response.json()
    assert body["threadId"] == "t1"
    assert body["reply"] == "echo: hello there"
    assert body["usage"] == {"promptTokens": 10, "completionTokens": 5, "credits": 1}
    assert body["summarized"] is False
    assert body["sessionRotated"] is False
