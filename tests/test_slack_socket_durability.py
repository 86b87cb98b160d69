"""Slack's Socket Mode across processes: real ``cloudybot serve`` children on the kit's fake
Socket Mode server. An acknowledged envelope survives a SIGKILL (answered once after the
restart); with several processes on PostgreSQL only one holds the socket, and another takes it
over when that one dies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.testing.fake_llm import FakeLLM
from gateway.testing.slack import APP_TOKEN, FakeSlack
from gateway.testing.slack import TOKEN as SLACK_TOKEN
from tests.process import ServeProcess
from tests.test_crash_recovery import (
    BACKLOG,
    CHATS,
    kill_restart_and_check,
    llm_env,
    processes,
    serve,
    slow_llm,
)

__all__ = ["processes", "slow_llm"]  # fixtures


def socket_env(fake_slack: FakeSlack) -> dict[str, str]:
    """Slack in Socket Mode only: no signing secret, so no public route either."""
    return {"CLOUDYBOT_SLACK_BOT_TOKEN": SLACK_TOKEN, "CLOUDYBOT_SLACK_APP_TOKEN": APP_TOKEN,
            "CLOUDYBOT_SLACK_API_BASE": fake_slack.base_url}


def replies(fake_slack: FakeSlack) -> list[tuple[str, str]]:
    return [(f"slack:T0G9PQBBK:{call.params['channel']}", call.params["text"])
            for call in fake_slack.calls_to("chat.postMessage")]


async def test_an_acknowledged_socket_mode_backlog_survives_sigkill(
        tmp_path: Path, slow_llm: FakeLLM, fake_slack: FakeSlack,
        processes: list[ServeProcess]) -> None:
    first = await serve(tmp_path / "data", {**llm_env(slow_llm), **socket_env(fake_slack)},
                        processes)
    await fake_slack.wait_until(lambda: len(fake_slack.sockets) == 1, timeout=20)
    expected: dict[str, list[str]] = {}
    envelopes = []
    for number in range(BACKLOG):
        channel = f"D0CHAT{number % CHATS}"
        text = f"message {number}"
        envelopes.append(await fake_slack.send_event(
            {"type": "message", "channel_type": "im", "channel": channel, "user": "U0ADA",
             "text": text, "ts": f"1767226000.{number:06d}"}, f"Ev{number}"))
        expected.setdefault(f"slack:T0G9PQBBK:{channel}", []).append(text)
    # acknowledged: committed to the inbox; from here on only the gateway has them
    await fake_slack.wait_until(lambda: all(e in fake_slack.acks for e in envelopes),
                                timeout=20)
    await kill_restart_and_check(first, processes, lambda: replies(fake_slack), expected)
    assert fake_slack.connections == 2  # the restarted process connected again


def holds_the_socket(process: ServeProcess) -> bool:
    return "this process holds the Socket Mode connection" in process.log.read_text()


async def test_one_process_holds_the_socket_and_another_takes_over(
        tmp_path: Path, postgres_url: str, fake_llm: FakeLLM, fake_slack: FakeSlack,
        processes: list[ServeProcess]) -> None:
    env = {"CLOUDYBOT_DATABASE_URL": postgres_url, "CLOUDYBOT_SECRET_KEY": "one-secret-key",
           **llm_env(fake_llm), **socket_env(fake_slack),
           "CLOUDYBOT_LEADER_RETRY_SECONDS": "0.3"}
    both = [ServeProcess(tmp_path / f"gateway-{index}", env) for index in range(2)]
    processes.extend(both)
    await asyncio.gather(*(process.start() for process in both))
    await fake_slack.wait_until(lambda: len(fake_slack.sockets) == 1, timeout=20)
    dm = {"type": "message", "channel_type": "im", "channel": "D0LAN2Q65", "user": "U0ADA"}
    await fake_slack.wait_for_ack(await fake_slack.send_event(
        {**dm, "text": "first", "ts": "1767226000.000001"}, "Ev-first"))
    await fake_slack.wait_for("chat.postMessage", 1, timeout=20)
    await asyncio.sleep(1.0)  # over 3 leader retries: time for a second socket to show up
    assert fake_slack.connections == 1
    [leader] = [process for process in both if holds_the_socket(process)]
    [other] = [process for process in both if process is not leader]

    await leader.kill()
    await fake_slack.wait_until(lambda: fake_slack.connections == 2 and
                                len(fake_slack.sockets) == 1, timeout=30)
    await fake_slack.wait_for_ack(await fake_slack.send_event(
        {**dm, "text": "second", "ts": "1767226000.000002"}, "Ev-second"))
    await fake_slack.wait_for("chat.postMessage", 2, timeout=20)
    assert [text for _, text in replies(fake_slack)] == ["echo: first", "echo: second"]
    assert holds_the_socket(other)
