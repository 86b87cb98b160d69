"""Provider fallback: one LLM call tried down the chain of providers until one answers.

The chain is the configured provider and model, then each of ``CLOUDYBOT_LLM_FALLBACK`` in
order. A call moves on to the next link when a provider cannot answer now
(:class:`~gateway.base.errors.ProviderUnavailable`: 429, 5xx, 529, a timeout, no connection)
*before it handed on any text*: once a streamed answer has begun, a failure fails the call
(the reader saw the start of one answer; another model's would not continue it). Any other
error (a 400, a malformed answer) is the call's, not the provider's availability: it fails
the call at once.

Each link has a circuit breaker (:class:`~gateway.base.breaker.CircuitBreaker`): after
``CLOUDYBOT_LLM_BREAKER_FAILURES`` failures in a row its provider is skipped, until one call
probes it after ``CLOUDYBOT_LLM_BREAKER_COOLDOWN_SECONDS``. A call is never refused without
trying a provider: when every circuit is open, the first link is tried all the same.

The answer says which link answered (:class:`Answer`): the call is billed at that link's
configured model. A failed attempt answered nothing and is never charged. Each move to the next
link is an event (``fallback``: from, to, why) on the call's span, counted in its
``cloudybot.provider.fallbacks``.

A streamed call may be stopped (the dashboard's Stop button): when its ``stop`` event is set,
the attempt under way is cancelled (its connection to the provider closed) and the text the
link had streamed is the answer, marked ``stopped``; with nothing streamed yet the call raises
:class:`~gateway.base.errors.TurnStopped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.base.breaker import CircuitBreaker
from gateway.base.errors import GatewayError, ProviderError, ProviderUnavailable, TurnStopped
from gateway.base.metrics import Metrics
from gateway.interfaces import Completion, CompletionRequest, Provider, TextSink
from gateway.observe import current_span

log = logging.getLogger(__name__)
CIRCUIT_OPEN = "circuit_open"


@dataclass(frozen=True)
class Link:
    """One provider and model of the chain, under its own circuit breaker; ``name`` (unique
    in the chain, ``provider/model``) labels its metrics."""

    name: str
    provider: Provider
    model: str
    breaker: CircuitBreaker


@dataclass(frozen=True)
class Answer:
    """A call's answer and who gave it: ``model``, the configured model of the link that
    answered (its price applies), ``provider``, that link's provider's name."""

    completion: Completion
    model: str
    provider: str
    stopped: bool = False  # cut short by a stop: the completion is the text streamed so far


@dataclass
class _Progress:
    """What a streamed call has handed on so far, and the link it came from."""

    link: Link | None = None
    text: str = ""


class ProviderChain:
    """The providers a call may go to, in order; see the module docstring."""

    def __init__(self, links: Sequence[Link], metrics: Metrics) -> None:
        if not links:
            raise ValueError("a provider chain needs a provider")
        self.links = tuple(links)
        self.metrics = metrics
        for link in self.links:  # every breaker's series is there from the start
            self._show(link)

    @property
    def primary(self) -> Provider:
        """The configured provider (the chain's first)."""
        return self.links[0].provider

    async def start(self) -> None:
        """Start every link's provider."""
        for link in self.links:
            await link.provider.start()

    async def close(self) -> None:
        """Close every link's provider (one failing does not keep the others open)."""
        for link in self.links:
            try:
                await link.provider.close()
            except Exception:
                log.exception("provider %s failed to close", link.name)

    async def call(self, request: CompletionRequest, on_text: TextSink | None = None,
                   stop: asyncio.Event | None = None) -> Answer:
        """Answer ``request`` (streamed into ``on_text`` when given) by the first link that
        can; raise the last failure when none could. Once ``stop`` is set, the call ends with
        the text streamed so far (see the module docstring)."""
        if stop is None or on_text is None:
            return await self._call(request, on_text, _Progress())
        if stop.is_set():
            raise TurnStopped("stopped before the model wrote anything")
        progress = _Progress()
        sink = on_text

        async def heard(piece: str) -> None:
            progress.text += piece
            await sink(piece)
        calling = asyncio.ensure_future(self._call(request, heard, progress))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait((calling, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (calling, stopping):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        if not calling.cancelled():
            return calling.result()
        link = progress.link
        if link is None or not progress.text:
            raise TurnStopped("stopped before the model wrote anything")
        return Answer(Completion(progress.text, link.model), link.model, link.provider.name,
                      stopped=True)

    async def _call(self, request: CompletionRequest, on_text: TextSink | None,
                    progress: _Progress) -> Answer:
        """The chain tried in order for one call; ``progress`` learns the link being tried."""
        passed: list[tuple[str, str]] = []  # (link, why) passed over since the last attempt
        failure: ProviderUnavailable | None = None
        tried = False
        for link in self.links:
            allowed = link.breaker.allows()
            self._show(link)
            if not allowed:
                passed.append((link.name, CIRCUIT_OPEN))
                continue
            tried = True
            progress.link = link
            answer, failure = await self._try(link, request, on_text, passed)
            if answer is not None:
                return answer
        if not tried:  # every circuit is open: try the configured provider all the same
            progress.link = self.links[0]
            answer, failure = await self._try(self.links[0], request, on_text, [])
            if answer is not None:
                return answer
        assert failure is not None
        raise failure

    async def _try(self, link: Link, request: CompletionRequest, on_text: TextSink | None,
                   passed: list[tuple[str, str]],
                   ) -> tuple[Answer | None, ProviderUnavailable | None]:
        """One attempt on ``link``, counting the links ``passed`` over to reach it as
        fallbacks: its answer, or why it could not answer (when the call may move on). Raises
        what fails the call: an error after text was handed on, or one that is not about
        availability."""
        span = current_span()
        for source, reason in passed:
            self.metrics.provider_fallbacks.labels(source, link.name, reason).inc()
            log.warning("provider %s could not answer (%s); trying %s", source, reason,
                        link.name)
            span.event("fallback", {"cloudybot.fallback.from": source,
                                    "cloudybot.fallback.to": link.name,
                                    "cloudybot.fallback.reason": reason})
            span.count("cloudybot.provider.fallbacks")
        passed.clear()
        streamed = False

        async def sink(piece: str) -> None:
            nonlocal streamed
            streamed = True
            assert on_text is not None
            await on_text(piece)
        try:
            completion = await self._attempt(link, dataclasses.replace(request, model=link.model),
                                             sink if on_text is not None else None)
        except ProviderUnavailable as exc:
            self._record(link, link.breaker.failed)
            if streamed:  # the reader saw the start of this answer: no silent switch
                raise
            passed.append((link.name, exc.reason))
            return None, exc
        except ProviderError:  # the provider answered, with an error of the call's own
            self._record(link, link.breaker.succeeded)
            raise
        except BaseException:
            self._record(link, link.breaker.abandoned)
            raise
        self._record(link, link.breaker.succeeded)
        return Answer(completion, link.model, link.provider.name), None

    async def _attempt(self, link: Link, request: CompletionRequest,
                       on_text: TextSink | None) -> Completion:
        """One provider call, timed and its errors counted (by provider name)."""
        provider = link.provider
        started = time.perf_counter()
        try:
            return await (provider.complete(request) if on_text is None
                          else provider.stream(request, on_text))
        except GatewayError as exc:
            self.metrics.provider_errors.labels(provider.name, str(exc.status)).inc()
            raise
        finally:
            self.metrics.provider_seconds.labels(provider.name).observe(
                time.perf_counter() - started)

    def _record(self, link: Link, outcome: Callable[[], None]) -> None:
        """Tell ``link``'s breaker the outcome, and show its state."""
        outcome()
        self._show(link)

    def _show(self, link: Link) -> None:
        self.metrics.provider_circuit.labels(link.name).set(int(link.breaker.state))
