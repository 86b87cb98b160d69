"""The pytest kit's harness: a reply, a failed one explained, and no reply at all."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gateway import DeliveryFailed, DeliveryRetry
from gateway.testing.plugin import GatewayHarness
from tests.conftest import Harness
from tests.fakes.loop import LoopChannel

StartGateway = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def kit(loop: LoopChannel, start_gateway: StartGateway) -> GatewayHarness:
    """The suite's harness is the kit's (``GatewayHarness``), on the ``loop`` channel."""
    return await start_gateway()


async def test_exchange_returns_the_delivered_reply(kit: GatewayHarness,
                                                    loop: LoopChannel) -> None:
    reply = await kit.exchange(lambda: kit.gateway.receive(loop.message("m1", "hello")),
                               channel="loop", message_id="m1")
    assert reply == "echo: hello"


async def test_exchange_says_why_a_refused_delivery_never_came(kit: GatewayHarness,
                                                               loop: LoopChannel) -> None:
    loop.failures["m2"] = [DeliveryFailed("the chat is gone")]
    with pytest.raises(AssertionError, match=r"could not be delivered: .*the chat is gone"):
        await kit.exchange(lambda: kit.gateway.receive(loop.message("m2", "hello")),
                           channel="loop", message_id="m2")


async def test_exchange_says_a_reply_is_still_being_retried(kit: GatewayHarness,
                                                            loop: LoopChannel) -> None:
    loop.failures["m3"] = [DeliveryRetry(3600)]
    with pytest.raises(AssertionError, match=r"still pending \(retried 1 time"):
        await kit.exchange(lambda: kit.gateway.receive(loop.message("m3", "hello")),
                           channel="loop", message_id="m3", timeout=0.5)


async def test_exchange_says_when_nothing_was_received(kit: GatewayHarness) -> None:
    async def sends_nothing() -> None:
        return None

    with pytest.raises(AssertionError, match="no reply was queued for loop message m4"):
        await kit.exchange(sends_nothing, channel="loop", message_id="m4")


async def test_assert_no_reply_holds_for_an_ignored_message_and_fails_for_an_answered_one(
        kit: GatewayHarness, loop: LoopChannel) -> None:
    await kit.assert_no_reply("loop", "m5")
    await kit.gateway.receive(loop.message("m5", "hello"))
    with pytest.raises(AssertionError, match="a reply was sent to loop message m5"):
        await kit.assert_no_reply("loop", "m5")
