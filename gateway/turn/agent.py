"""One chat turn, and the summarization it may trigger: :class:`Agent`.

rotate the session if due → load (one store call) → assemble the prompt → provider call, and
tool rounds while the model asks for tools → commit (one transaction) → append the session
events → answer → summarize if ``messages`` reached SUMMARIZE_AT. The caller holds the thread's
turn lock for all of it, summarization included.

SQLite is written before the session file: a crash between the two loses only the turn's tool
state (as a rotation would), never a reply the session file knows and SQLite does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway import observe
from gateway.accounts.access import Accounts
from gateway.accounts.secrets import (
    SecretBox,
    longest_spelling,
    open_credentials,
    redact,
    redact_chat_message,
    redactor_for,
)
from gateway.base.errors import (
    AccountBlocked,
    Conflict,
    EmptyReply,
    NotFound,
    PaymentRequired,
    ProviderError,
    TurnStopped,
    Unavailable,
)
from gateway.base.logs import masking_in_logs, shown
from gateway.base.metrics import Metrics
from gateway.base.pictures import Image
from gateway.base.times import iso_utc
from gateway.base.tokens import IMAGE_TOKENS, TokenCounter
from gateway.billing.credits import (
    CallUsage,
    CreditsBusy,
    DailyCapReached,
    UsageBounds,
    charge_for,
    worst_case,
)
from gateway.billing.quotas import Quotas, TurnBill
from gateway.config.settings import Settings
from gateway.interfaces import Completion, CompletionRequest, TextSink, TurnContext
from gateway.memory.sessions import Rotation, Sessions, ToolExchange
from gateway.memory.summaries import accept_summary, fold_point, summary_request
from gateway.observe import Span, TraceContext
from gateway.plugins.hooks import PluginHooks
from gateway.store import (
    NewMessage,
    Store,
    StoredMessage,
    SummaryCommit,
    ThreadRef,
    TurnCommit,
    TurnState,
    TurnWritten,
    User,
    policy,
)
from gateway.store import events as webhook_events
from gateway.store.records import REPLY_SLOT, USER_MESSAGE_SLOT
from gateway.tools import Credential, Toolbox, ToolCall, ToolContext
from gateway.turn import traces
from gateway.turn.fallback import Answer, ProviderChain
from gateway.turn.prompt import Prompt, PromptInputs, assemble
from gateway.turn.request import Turn
from gateway.turn.tool_pictures import pictures_message, pictures_note, tool_pictures

log = logging.getLogger(__name__)
OUT_OF_CREDITS_MIDWAY = ("I ran out of AI credits while working with tools, so I stopped "
                         "before finishing. Ask the operator for more credits.")
CREDITS_HELD_MIDWAY = ("I stopped before finishing: your other requests in progress hold the "
                       "rest of your AI credits. Ask again in a moment.")
DAILY_CAP_MIDWAY = ("I reached today's limit of AI credits while working with tools, so I "
                    "stopped before finishing. It resets at 00:00 UTC.")
TOOLS_CHARS = 100  # the tool names a tool round's charge carries, at most
STOPPED_MIDWAY = "(Stopped while I was working with tools, before I wrote an answer.)"
TOOL_ERROR = "error: "  # how every result the toolbox makes of a failed call begins


@dataclass(frozen=True)
class TurnResult:
    """What a channel gets back from a turn."""

    reply: str
    prompt_tokens: int
    completion_tokens: int
    credits: int
    summarized: bool
    session_rotated: bool
    stopped: bool = False  # stopped while streaming: the reply is what had arrived
    # the turn's span's W3C context (None with tracing off): its reply's delivery links to it
    trace: TraceContext | None = None


@dataclass(frozen=True)
class PendingSummary:
    """A summarization the turn triggered; it runs after the answer, under the same lock, so
    the thread is exactly as the turn left it: what it needs is carried here, not re-read."""

    ref: ThreadRef
    billed_user: str
    secrets: tuple[str, ...]
    summary: str
    version: int
    messages: list[StoredMessage]
    credits: int  # the billed user's balance after the turn
    low_credits: int | None = None  # the billed user's credits.low threshold
    daily_cap: int | None = None  # the billed user's daily cap (credits.low near it)


@dataclass
class _AgentRun:
    """The provider calls of one turn: the final text, the tool exchange, the usage."""

    text: str = ""
    exchange: list[dict[str, Any]] = field(default_factory=list)
    exchange_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stopped: bool = False

    def record(self, messages: list[dict[str, Any]], secrets: tuple[str, ...],
               count: Callable[[dict[str, Any]], int]) -> None:
        """Keep a tool round for the session file, counted once: what is stored and replayed
        never holds a saved password, not even in a call's arguments."""
        stored = [redact_chat_message(message, secrets) for message in messages]
        self.exchange += stored
        self.exchange_tokens += sum(count(message) for message in stored)


@dataclass(frozen=True)
class _Reading:
    """What a turn (or the context inspector) read of its thread, ready for the prompt: the
    thread (owner as stored), its state, what plugins see of the turn, the saved logins and
    their passwords, and the session it runs in (the rotation it began with, if any)."""

    ref: ThreadRef
    state: TurnState
    context: TurnContext
    credentials: list[Credential]
    secrets: tuple[str, ...]
    rotation: Rotation | None
    new_session: bool


@dataclass
class _Work:
    """One turn in progress: the request, what it read, its bill, its prompt, its calls."""

    turn: Turn
    reading: _Reading
    bill: TurnBill
    prompt: Prompt
    toolbox: Toolbox
    replaces: tuple[int, ...] = ()  # the rolling ids of the exchange the turn replaces
    run: _AgentRun = field(default_factory=_AgentRun)
    trace: TraceContext | None = None  # the turn's span's context, kept with its reply


@dataclass(frozen=True)
class Agent:
    """Runs chat turns and the summarizations they make due, with exactly what they use (the
    gateway builds it when it starts). The caller holds the thread's turn lock."""

    settings: Settings
    store: Store
    providers: ProviderChain
    counter: TokenCounter
    sessions: Sessions
    secret_box: SecretBox
    toolbox: Toolbox
    hooks: PluginHooks
    accounts: Accounts
    quotas: Quotas
    metrics: Metrics

    # --- the turn -------------------------------------------------------------------------
    async def run_turn(self, turn: Turn) -> tuple[TurnResult, PendingSummary | None]:
        """Run one turn; return its result and any summarization due. ``turn.on_text``
        receives the reply as it is written (see :meth:`_run_agent`); ``turn.images`` go to
        the model with the message, never into memory or the transcript. With
        ``turn.replace_last`` the thread's last exchange is left out of the prompt and deleted
        by the turn's commit (409 ``nothing_to_replace`` when rolling memory does not end with
        one)."""
        async with self.quotas.admit(turn.user_id) as admission:  # before the balance is read
            state = await self.store.load_turn(turn.ref, turn.user_id, turn.specialist,
                                               admission.claim)
            ref = _thread_of(turn, state)
            state, replaces = _without_last_exchange(state) if turn.replace_last \
                else (state, ())
            user = await self.accounts.current_user(state.user)
            if user.blocked:  # an admin blocked the account: nothing runs, nothing is charged
                raise AccountBlocked()
            _check_specialist(turn.specialist, state)
            plan = self.settings.plans.get(user.plan)
            # 429 past the rate limit or if other turns hold the rest; 402 if spent
            await admission.check(user, plan.requests_per_minute if plan else 0, state.claimed)
            reading = await self._read(ref, state, turn.message, turn.specialist)
            toolbox = await self.toolbox.for_user(user.user_id, user.plan)
            with _masking(reading.secrets):  # what the provider says is logged without them
                with observe.span(traces.PROMPT_SPAN) as step:
                    prompt = await self._prompt(reading, (turn.message, turn.images), toolbox)
                    if step.recording:
                        step.update(traces.prompt_attributes(prompt, self.counter.count))
                # the turn's span's context goes with a reply the outbox delivers
                delivered = turn.answers is not None or turn.job is not None
                work = _Work(turn, reading, TurnBill(self.settings, admission, user.credits),
                             prompt, toolbox, replaces,
                             trace=observe.current_span().context() if delivered else None)
                return await self._answer(work)

    async def _answer(self, work: _Work) -> tuple[TurnResult, PendingSummary | None]:
        """The turn after admission: agent and commit, session file, observers, and the
        summarization it makes due."""
        reply, written, new_messages, in_commit = await self._run_and_commit(work)
        bill, run = work.bill, work.run
        spent = bill.settle()
        self.metrics.charged(bill.charges)
        if not in_commit:
            await self._append_session(work, reply, written)
        await self.hooks.turn_completed(work.reading.context, reply)
        pending = self._summary_due(work, written, new_messages, bill.balance - spent)
        result = TurnResult(reply, run.prompt_tokens, run.completion_tokens, spent,
                            summarized=pending is not None,
                            session_rotated=work.reading.new_session, stopped=run.stopped,
                            trace=work.trace)
        return result, pending

    def _low_credits(self, user: User) -> int | None:
        """The balance under which the user's credits are low (``credits.low``)."""
        plan = self.settings.plans.get(user.plan)
        return policy.low_credits_threshold(plan.credits) if plan else None

    def _daily_cap(self, user: User) -> int | None:
        """The user's daily credit cap (its own, else its plan's; None: none), near which
        ``credits.low`` is told."""
        plan = self.settings.plans.get(user.plan)
        return policy.daily_cap(plan.daily_credits if plan else 0, user.daily_credits)

    async def _read(self, ref: ThreadRef, state: TurnState, message: str,
                    specialist: str | None) -> _Reading:
        """What the turn works from: its session begun (rotated if due), the saved logins
        opened, and what plugins see of it (a password the user typed stays hidden)."""
        began = time.time_ns() if observe.current_span().recording else 0
        rotation, active = await self.sessions.begin_turn(ref.session_key, state)
        if rotation is not None and began:  # its span, once it is known to have rotated
            with observe.span(traces.ROTATE_SPAN, {"cloudybot.session.reason": rotation.reason},
                              start_ns=began):
                pass
        return self._reading(ref, state, message, specialist,
                             (rotation, _starts_session(rotation is not None, active, state)))

    def _reading(self, ref: ThreadRef, state: TurnState, message: str, specialist: str | None,
                 session: tuple[Rotation | None, bool]) -> _Reading:
        """The thread as read, with its saved logins opened and the plugins' view of it;
        ``session`` is the rotation the turn began with and whether it starts a session."""
        credentials = open_credentials(self.secret_box, state.user.user_id, state.credentials)
        secrets = tuple(credential.password for credential in credentials)
        context = TurnContext(state.user.user_id, ref.thread_id, ref.session_key, ref.channel,
                              redact(message, secrets), specialist)
        rotation, new_session = session
        return _Reading(ref, state, context, credentials, secrets, rotation, new_session)

    async def next_prompt(self, ref: ThreadRef, user_id: str,
                          specialist: str | None = None) -> tuple[Prompt, tuple[str, ...]]:
        """The prompt the next turn of ``ref`` would send before its new message (empty
        here), and the saved passwords it holds: assembled by the very code a turn uses,
        plugin sections included, while changing nothing (no rotation, no charge)."""
        state = await self.store.load_turn(ref, user_id, specialist)
        _check_specialist(specialist, state)
        due, active = self.sessions.peek(ref.session_key, state)
        reading = self._reading(ref, state, "", specialist,
                                (None, _starts_session(due is not None, active, state)))
        toolbox = await self.toolbox.for_user(state.user.user_id, state.user.plan)
        return await self._prompt(reading, ("", ()), toolbox), reading.secrets

    async def _prompt(self, reading: _Reading, said: tuple[str, Sequence[Image]],
                      toolbox: Toolbox) -> Prompt:
        """The turn's prompt for what was ``said`` (the message and its pictures): the
        plugins' sections, then assembly under MAX_CONTEXT (the pictures and the tools'
        schemas counted too)."""
        message, images = said
        settings = self.settings
        state, context = reading.state, reading.context
        specialist = context.specialist
        return assemble(
            PromptInputs(
                instructions=settings.system_prompt,
                model=settings.llm_model,
                pinned=state.pinned,
                specialist=(specialist, state.specialist_instructions)
                if specialist and state.specialist_instructions else None,
                summary=state.thread.summary if state.thread else "",
                credentials=reading.credentials,
                session_rotated=reading.new_session,
                sections=await self.hooks.prompt_sections(context),
                recent=state.messages,
                user_message=message,
                user_tokens=self.counter.count(message) + IMAGE_TOKENS * len(images),
                user_images=tuple(image.data_url() for image in images),
                # a new session replays nothing: the tool state went with the old one
                exchanges=self.sessions.exchanges(context.session_key, state.messages[0].id,
                                                  state)
                if state.messages and not reading.new_session else {},
                reserved_tokens=toolbox.schema_tokens,
                vault=settings.browser_vault,
            ),
            self.counter,
            settings.max_context,
        )

    async def _run_and_commit(self, work: _Work,
                              ) -> tuple[str, TurnWritten, list[NewMessage], bool]:
        """The agent's calls, then the turn in one transaction: the reply, the ids written,
        the two messages written, and whether the session's lines went with them (sessions
        kept in the store). On any failure nothing of the turn is stored, but the calls that
        did answer (a chat call before a failed tool round) are still charged. The commit
        carries the turn's webhook events (the reply; the rotation it began with) and, under
        the billed user's ``credits.low`` threshold, ``credits.low``."""
        turn, reading, bill = work.turn, work.reading, work.bill
        ref, stored_message, rotation = reading.ref, reading.context.message, reading.rotation
        try:
            await self._run_agent(work)
            reply = redact(work.run.text, reading.secrets).strip()
            if not reply:  # (its call was not charged: see _run_agent)
                raise EmptyReply("the model returned an empty answer")
            if turn.job is not None and turn.job.status == "late":
                reply = f"({turn.job.detail}) {reply}"
            new_messages = [
                NewMessage("user", stored_message, self.counter.count(stored_message)),
                NewMessage("assistant", reply, self.counter.count(reply))]
            session = self.sessions.with_commit(
                ref.user_id, ref.thread_id, ref.session_key,
                lambda: _session_events(work, reply, [USER_MESSAGE_SLOT, REPLY_SLOT]))
            events = [webhook_events.message_created(ref, reply, bill.charges)]
            if rotation is not None:
                events.insert(0, webhook_events.session_rotated(ref, rotation.reason,
                                                                rotation.name))
            if turn.job is not None:
                events.append(webhook_events.job_completed(
                    ref, turn.job.job_id, iso_utc(turn.job.due), turn.job.status, reply))
            written = await self.store.commit_turn(TurnCommit(
                ref=ref, billed_user=turn.user_id, messages=new_messages,
                charges=bill.charges, inbound=turn.answers, hold=bill.hold, session=session,
                events=tuple(events), low_credits=self._low_credits(reading.state.user),
                daily_cap=self._daily_cap(reading.state.user), replaces=work.replaces,
                job=turn.job, trace=work.trace.text if work.trace is not None else None))
        except BaseException:
            if bill.charges:
                await self.store.record_charges(turn.user_id, ref.session_key, bill.charges,
                                                bill.hold)
                bill.settle()
                self.metrics.charged(bill.charges)
            raise
        return reply, written, new_messages, session is not None

    async def _append_session(self, work: _Work, reply: str, written: TurnWritten) -> None:
        """The turn's events at the end of its session file (tool exchange kept for
        replay)."""
        ref, run = work.reading.ref, work.run
        reply_id = written.message_ids[-1]
        exchange = (reply_id, ToolExchange(tuple(run.exchange), run.exchange_tokens)) \
            if run.exchange else None
        try:
            await self.sessions.write_turn(ref.session_key, ref.user_id, ref.thread_id,
                                           _session_events(work, reply, written.message_ids),
                                           exchange)
        except (OSError, Unavailable):
            # The turn is committed; only its tool state is lost, as a rotation would lose it.
            log.exception("cannot append to the session file of %s", ref.session_key)

    def _summary_due(self, work: _Work, written: TurnWritten, new_messages: list[NewMessage],
                     credits: int) -> PendingSummary | None:
        """The summarization this turn makes due, if rolling memory (what the turn read plus
        what it wrote) reached SUMMARIZE_AT. Under the turn lock nobody else adds to this
        thread: the count needs no query."""
        state = work.reading.state
        if len(state.messages) + len(written.message_ids) < self.settings.summarize_at:
            return None
        stored = [StoredMessage(message_id, new.role, new.content, new.tokens)
                  for message_id, new in zip(written.message_ids, new_messages, strict=True)]
        thread = state.thread
        return PendingSummary(work.reading.ref, state.user.user_id, work.reading.secrets,
                              summary=thread.summary if thread else "",
                              version=thread.summary_version if thread else 0,
                              messages=[*state.messages, *stored], credits=credits,
                              low_credits=self._low_credits(state.user),
                              daily_cap=self._daily_cap(state.user))

    # --- the agent loop ----------------------------------------------------------------------
    async def _run_agent(self, work: _Work) -> None:
        """Call the provider; while it asks for tools, run them and call again (bounded).

        With the turn's ``on_text``, each call streams: ``on_text`` gets the text of the
        answer being written so far (redacted), growing; a round that ends in tool calls is
        followed by a new answer, which starts again from its first piece.

        Each call first reserves its worst case: with nothing left, the first call is a 402 (a
        429 ``credits_busy`` if other turns only hold what is left) and a later (tool) round
        ends the turn with a message. When tool results no longer fit under MAX_CONTEXT, the
        oldest history units go first; only when none is left does the agent stop.

        When ``turn.stop`` is set, the call streaming is cut and what it wrote is the reply,
        billed by the gateway's own count (the provider reports no usage for a cut stream); a
        stop before the first call wrote anything raises :class:`TurnStopped` (nothing stored
        or charged), one in a later round ends the turn with :data:`STOPPED_MIDWAY`. A final
        answer with no text left once redacted is a failed call: not charged (the turn fails
        with :class:`EmptyReply`).
        """
        settings = self.settings
        prompt, run, secrets = work.prompt, work.run, work.reading.secrets
        turn = work.reading.context
        context = ToolContext(turn.user_id, turn.thread_id, turn.session_key,
                              tuple(work.reading.credentials))
        live_exchange: list[dict[str, Any]] = []  # sent to the provider as the model wrote it
        live_tokens = 0  # of live_exchange, counted once as each round adds to it
        tools = ""  # the tools whose results the next call reads (its charge names them)
        for round_number in range(settings.max_tool_rounds + 1):
            prompt_tokens = prompt.prompt_tokens + live_tokens
            if not await self._reserve(work, round_number, prompt_tokens):
                return
            completion = await self._round(work, (round_number, prompt_tokens, tools),
                                           live_exchange)
            if completion is None:
                return
            if not completion.tool_calls:
                run.text = completion.text
                return
            if round_number == settings.max_tool_rounds:
                break
            added, shown = await self._tool_round(completion, context,
                                                  (work.toolbox, secrets))
            tools = ",".join(sorted({call.name for call in completion.tool_calls}))[:TOOLS_CHARS]
            live_exchange += added + shown
            live_tokens += sum(self.counter.chat_message(m) for m in added + shown)
            run.record(added, secrets, self.counter.chat_message)  # pictures are not kept
            while prompt.prompt_tokens + live_tokens > settings.max_context:
                if not prompt.drop_oldest():
                    run.text = ("I had to stop: the tool results no longer fit in my context "
                                "window. Ask again with a narrower request.")
                    return
        run.text = (f"I stopped after {settings.max_tool_rounds} rounds of tool calls without "
                    "reaching an answer. Ask again, perhaps more specifically.")

    async def _round(self, work: _Work, call: tuple[int, int, str],
                     live_exchange: list[dict[str, Any]]) -> Completion | None:
        """One round's provider call, in its span, charged (see :meth:`_run_agent`): its
        completion, or None when a stop cut a later round. ``call``: the round's number, its
        prompt's tokens and the tools whose results it reads (its charge names them)."""
        round_number, prompt_tokens, tools = call
        run, bill, secrets = work.run, work.bill, work.reading.secrets
        kind = "chat" if round_number == 0 else "tool_round"
        request = self._chat_request(work, live_exchange)
        streamed = work.turn.on_text is not None
        with observe.span(traces.call_span_name(request),
                          lambda: traces.call_attributes(request, kind, streamed),
                          kind="client") as step:
            answer = await self._ask(work, round_number, request)
            if answer is None:
                step.fail("turn_stopped")
                return None
            completion = answer.completion
            run.stopped = answer.stopped
            usage = self._usage(answer, prompt_tokens, self.settings.llm_max_tokens)
            run.prompt_tokens += usage.prompt_tokens
            run.completion_tokens += usage.completion_tokens
            billed = bool(completion.tool_calls) or bool(redact(completion.text, secrets).strip())
            if billed:
                bill.charge(kind, usage, tools)
            if step.recording:
                self._trace_call(step, (request, answer, usage), secrets)
                step.set(traces.BILLED, billed)
        return completion

    def _chat_request(self, work: _Work,
                      live_exchange: list[dict[str, Any]]) -> CompletionRequest:
        """The turn's chat call: its prompt and the tool exchange so far, with the tools."""
        settings = self.settings
        return CompletionRequest(work.prompt.messages + live_exchange, settings.llm_model,
                                 settings.llm_max_tokens, tools=work.toolbox.schemas)

    def _trace_call(self, step: Span, call: tuple[CompletionRequest, Answer, CallUsage],
                    secrets: tuple[str, ...]) -> None:
        """What a recording call span says of the call: its answer, and, with
        ``CLOUDYBOT_TRACE_CONTENT``, its messages (redacted)."""
        request, answer, usage = call
        redactor = redactor_for(secrets)
        step.update(traces.answer_attributes(answer, usage, redactor))
        if self.settings.trace_content:
            step.update(traces.input_content(request.messages, redactor))
            step.update(traces.output_content(answer, redactor))

    @staticmethod
    async def _reserve(work: _Work, round_number: int, prompt_tokens: int) -> bool:
        """Reserve a call's worst case; False when a later round cannot (the turn ends with
        its message). The first round's refusal is raised (402, or 429 ``credits_busy``)."""
        try:
            await work.bill.reserve(prompt_tokens)
        except (PaymentRequired, CreditsBusy) as refusal:
            if round_number == 0:
                raise
            work.run.text = DAILY_CAP_MIDWAY if isinstance(refusal, DailyCapReached) \
                else OUT_OF_CREDITS_MIDWAY if isinstance(refusal, PaymentRequired) \
                else CREDITS_HELD_MIDWAY
            return False
        return True

    async def _ask(self, work: _Work, round_number: int,
                   request: CompletionRequest) -> Answer | None:
        """One provider call of the turn (streamed to ``turn.on_text`` if any); None when a
        stop cut a later round (the turn ends with :data:`STOPPED_MIDWAY`)."""
        on_text = work.turn.on_text
        try:
            return await self._call_provider(
                request,
                _growing(on_text, work.reading.secrets) if on_text is not None else None,
                work.turn.stop)
        except TurnStopped:
            if round_number == 0:
                raise
            work.run.text, work.run.stopped = STOPPED_MIDWAY, True
            return None

    async def _tool_round(self, completion: Completion, context: ToolContext,
                          turn_tools: tuple[Toolbox, tuple[str, ...]],
                          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Run the tool calls of ``completion`` with the turn's toolbox: the model's call
        message and the results, as chat messages for the next call (results redacted with
        the turn's saved passwords: a tool may echo one); and, for a vision model, the
        pictures the results carried, in a message after them (sent, never kept)."""
        call_message: dict[str, Any] = {
            "role": "assistant", "content": completion.text or None,
            "tool_calls": [call.as_message_part() for call in completion.tool_calls]}
        results, pictures = [], []
        for call in completion.tool_calls:
            text, shown = await self._run_tool(call, context, turn_tools)
            results.append({"role": "tool", "tool_call_id": call.id, "content": text})
            pictures += [(call, picture) for picture in shown]
        return [call_message, *results], [pictures_message(pictures)] if pictures else []

    async def _run_tool(self, call: ToolCall, context: ToolContext,
                        turn_tools: tuple[Toolbox, tuple[str, ...]],
                        ) -> tuple[str, tuple[Image, ...]]:
        """One tool call, in its span: its result's text, redacted (saying what became of its
        pictures), and the pictures the model is shown. A result the toolbox made of a failure
        (``error: ...``) fails the span."""
        toolbox, secrets = turn_tools
        if not observe.current_span().recording:
            text, shown = await self._tool_output(call, context, toolbox)
            return redact(text, secrets), shown
        redactor = redactor_for(secrets)
        with observe.span(traces.tool_span_name(call, redactor),
                          traces.tool_attributes(call, redactor)) as step:
            text, shown = await self._tool_output(call, context, toolbox)
            result = redactor.text(text)
            if result.startswith(TOOL_ERROR):
                step.fail("tool_error")
            if self.settings.trace_content:
                step.update(traces.tool_content(call, result, redactor))
        return result, shown

    async def _tool_output(self, call: ToolCall, context: ToolContext,
                           toolbox: Toolbox) -> tuple[str, tuple[Image, ...]]:
        """The call's result text with the note on its pictures, and those shown."""
        output = await toolbox.run(call, context, self.settings.tool_timeout_seconds)
        shown = tool_pictures(output.pictures, self.settings)
        return (output.text + pictures_note(len(output.pictures), len(shown),
                                            self.settings.llm_vision), shown)

    async def _call_provider(self, request: CompletionRequest, on_text: TextSink | None = None,
                             stop: asyncio.Event | None = None) -> Answer:
        """One call, streamed into ``on_text`` when given (and cut short once ``stop`` is
        set), down the provider chain (:mod:`gateway.turn.fallback`). Whatever a provider
        plugin returns is checked: anything but text and well-formed tool calls is a 502 now,
        not a crash later in the turn."""
        answer = await self.providers.call(request, on_text, stop)
        completion = answer.completion
        if not isinstance(completion, Completion) or not isinstance(completion.text, str) \
                or not isinstance(completion.tool_calls, tuple) \
                or not all(_well_formed(call) for call in completion.tool_calls):
            raise ProviderError(f"provider {answer.provider!r} returned no completion")
        return answer

    def _usage(self, answer: Answer, counted_prompt: int, max_tokens: int) -> CallUsage:
        """The call as billed: the configured model that answered, and the prompt and
        completion tokens: the reported usage within its bounds, else our own count.

        A reported count is believed only as a non-negative integer within its
        :class:`UsageBounds` (of ``counted_prompt``, our tiktoken count of what was sent, and
        ``max_tokens``). Otherwise (with a warning), or when it is not reported, our own count
        is billed: ``counted_prompt``, or the answer counted with tiktoken but never above the
        bound, so that a call never costs more than the reservation made for it.
        """
        completion = answer.completion
        bounds = UsageBounds.of(counted_prompt, max_tokens)
        prompt = self._believed(answer, "prompt", completion.prompt_tokens, bounds.prompt)
        done = self._believed(answer, "completion", completion.completion_tokens,
                              bounds.completion)
        if prompt is None:
            prompt = counted_prompt
        if done is None:
            count = self.counter.count
            done = min(bounds.completion, count(completion.text) + sum(
                count(call.name) + count(call.arguments) for call in completion.tool_calls))
        if completion.model != answer.model:  # billed as configured; its word only logged
            log.debug("provider %r answered as model %s", answer.provider,
                      shown(completion.model))
        return CallUsage(answer.model, completion.model, prompt, done)

    def _believed(self, answer: Answer, name: str, reported: object,
                  limit: int) -> int | None:
        """A reported token count if it is an integer in ``0..limit``; else None, with a
        warning."""
        if reported is None:
            return None
        if type(reported) is int and 0 <= reported <= limit:
            return reported
        log.warning("provider %r reported %s tokens = %s, not a count within 0..%d; billing "
                    "the gateway's own count", answer.provider, name, shown(reported), limit)
        return None

    # --- summarization -------------------------------------------------------------------------
    async def summarize(self, pending: PendingSummary) -> bool:
        """Fold older messages into the summary; on any failure change nothing. True if
        applied.

        Like a turn's calls, the summarization call reserves its worst case first, so that
        turns of the same user in flight on other threads count it. It has a span of its own
        (the turn's child: the turn spawned it), its provider call's span inside.
        """
        folded = self._to_fold(pending)
        if not folded:
            return False
        with observe.span(traces.SUMMARIZE_SPAN, lambda: traces.summary_attributes(
                pending.ref.session_key, len(folded))) as step:
            applied = await self._fold(pending, folded)
            step.set(traces.SUMMARY_APPLIED, applied)
        return applied

    async def _fold(self, pending: PendingSummary, folded: list[StoredMessage]) -> bool:
        """The summarization of ``folded`` (see :meth:`summarize`)."""
        settings = self.settings
        request = summary_request(pending.summary, folded, settings.llm_model)
        counted = self.counter.messages(request.messages)
        async with self.quotas.admit(pending.billed_user) as admission:
            try:
                await admission.reserve_alone(worst_case(settings, counted, request.max_tokens))
            except (PaymentRequired, CreditsBusy):
                log.info("summarization of %s postponed: the credits are spent or held by "
                         "turns in flight", pending.ref.session_key)
                self.metrics.summarizations.labels("postponed").inc()
                return False
            answered = await self._summary_from_provider(pending, request, counted)
            if answered is None:
                return False
            summary, usage = answered
            charge = charge_for(settings, "summarize", usage)
            applied = await self.store.commit_summary(SummaryCommit(
                session_key=pending.ref.session_key,
                billed_user=pending.billed_user,
                expected_version=pending.version,
                summary=summary,
                summary_tokens=self.counter.count(summary),
                folded_through_id=folded[-1].id,
                charge=charge,
                hold=admission.hold,
                events=(webhook_events.thread_summarized(pending.ref, summary, len(folded)),),
                low_credits=pending.low_credits,
                daily_cap=pending.daily_cap,
            ))
            admission.settle(charge.credits if applied else 0)  # a discarded one is free
        self.metrics.summarizations.labels("applied" if applied else "discarded").inc()
        if applied:
            self.metrics.charged([charge])
        if applied:
            self.sessions.forget_exchanges_before(pending.ref.session_key, folded[-1].id + 1)
        else:
            log.info("summarization of %s discarded: the thread changed meanwhile",
                     pending.ref.session_key)
        return applied

    def _to_fold(self, pending: PendingSummary) -> list[StoredMessage]:
        """The oldest messages to fold into the summary (all but KEEP_RECENT, at a turn's
        boundary); none when there are too few, or no credits to pay for it."""
        messages = pending.messages
        cut = fold_point(messages, self.settings.keep_recent)
        if len(messages) < self.settings.summarize_at or cut == 0:
            return []
        if pending.credits <= 0:
            log.info("summarization of %s postponed: no credits", pending.ref.session_key)
            return []
        return messages[:cut]

    async def _summary_from_provider(self, pending: PendingSummary, request: CompletionRequest,
                                     counted: int) -> tuple[str, CallUsage] | None:
        """The new summary (redacted, checked usable) and the call that wrote it, as billed
        (``counted``: its prompt's tokens); None, logged, when the call failed or wrote
        nothing usable (a later turn tries again)."""
        with observe.span(traces.call_span_name(request),
                          lambda: traces.call_attributes(request, "summarize", False),
                          kind="client") as step:
            try:
                with _masking(pending.secrets):
                    answer = await self._call_provider(request)
            except ProviderError as exc:
                log.warning("summarization of %s failed (%s); will retry on a later turn",
                            pending.ref.session_key, exc.message)
                step.fail(exc.code)
                return None
            usage = self._usage(answer, counted, request.max_tokens)
            if step.recording:
                self._trace_call(step, (request, answer, usage), pending.secrets)
        summary = accept_summary(redact(answer.completion.text, pending.secrets))
        if summary is None:
            log.warning("summarization of %s returned nothing usable; will retry on a later "
                        "turn", pending.ref.session_key)
            return None
        return summary, usage


def _thread_of(turn: Turn, state: TurnState) -> ThreadRef:
    """The turn's thread as stored (its owner kept), or the turn's own when it is new. An API
    caller may use only their own threads (404); a channel message joins its conversation
    whoever started it."""
    thread = state.thread
    if thread is None:
        return turn.ref
    if thread.ref.user_id != turn.ref.user_id and not turn.from_channel and turn.job is None:
        raise NotFound(f"no thread {turn.ref.thread_id!r}", code="thread_not_found")
    return thread.ref


def _without_last_exchange(state: TurnState) -> tuple[TurnState, tuple[int, ...]]:
    """The thread as a turn that replaces its last exchange reads it (without that exchange),
    and the rolling ids of the exchange; 409 when rolling memory does not end with one (a new
    or cleared thread)."""
    messages = state.messages
    if len(messages) < 2 or (messages[-2].role, messages[-1].role) != ("user", "assistant"):
        raise Conflict("this thread has no last exchange in its memory to replace",
                       code="nothing_to_replace")
    return (dataclasses.replace(state, messages=messages[:-2]),
            (messages[-2].id, messages[-1].id))


def _check_specialist(specialist: str | None, state: TurnState) -> None:
    """404 when the turn names a specialist the user does not have."""
    if specialist is not None and state.specialist_instructions is None:
        raise NotFound(f"no specialist named {specialist!r}", code="specialist_not_found")


def _starts_session(rotates: bool, active: bool, state: TurnState) -> bool:
    """Whether a turn starts a new session: its session rotates, or the conversation has
    history but no session file (rotated earlier: ``cloudybot sessions rotate``,
    rotate_session_if_needed)."""
    return rotates or (not active and state.thread is not None
                       and bool(state.messages or state.thread.summary))


def _well_formed(call: object) -> bool:
    return isinstance(call, ToolCall) and all(
        isinstance(part, str) for part in (call.id, call.name, call.arguments, call.malformed))


def _masking(secrets: tuple[str, ...]) -> contextlib.AbstractContextManager[None]:
    """Mask the user's saved passwords (in every encoding) in the lines logged inside."""
    if not secrets:
        return contextlib.nullcontext()
    return masking_in_logs(redactor_for(secrets).text)


def _growing(on_text: TextSink, secrets: tuple[str, ...]) -> TextSink:
    """A sink for one call's pieces that hands ``on_text`` the whole text so far, redacted.

    With saved passwords, the newest characters are held back (as many as the longest
    password's longest encoding): a password still arriving piece by piece is not whole yet,
    so it could not be redacted. The stored reply, redacted whole, replaces the preview.
    """
    written = ""
    held = max((longest_spelling(secret) for secret in secrets), default=0)

    async def add(piece: str) -> None:
        nonlocal written
        written += piece
        if not secrets:
            await on_text(written)
            return
        shown = redact(written, secrets)
        await on_text(shown[:max(0, len(shown) - held)])
    return add


def _session_events(work: _Work, reply: str, message_ids: list[int]) -> list[dict[str, Any]]:
    """The turn as session events: user message, tool calls and results, reply, usage."""
    run, rotation = work.run, work.reading.rotation
    user_id, reply_id = message_ids
    events: list[dict[str, Any]] = []
    if rotation is not None:
        events.append({"type": "rotation", "reason": rotation.reason,
                       "previous": rotation.name})
    if work.replaces:  # regenerate or edit: the exchange these ids named is gone
        events.append({"type": "replaced", "messageIds": list(work.replaces)})
    events.append({"type": "user", "content": work.reading.context.message,
                   "messageId": user_id})
    round_number = 0
    for message in run.exchange:
        if message["role"] == "assistant":
            round_number += 1
            events.append({"type": "tool_calls", "replyId": reply_id, "round": round_number,
                           "content": message["content"],
                           "calls": [{"id": c["id"], "name": c["function"]["name"],
                                      "arguments": c["function"]["arguments"]}
                                     for c in message["tool_calls"]]})
        else:
            events.append({"type": "tool_result", "replyId": reply_id, "round": round_number,
                           "toolCallId": message["tool_call_id"], "content": message["content"]})
    reply_event: dict[str, Any] = {"type": "assistant", "content": reply, "messageId": reply_id}
    if run.stopped:
        reply_event["stopped"] = True
    if run.exchange:
        reply_event["toolTokens"] = run.exchange_tokens  # so a replay never counts them again
    events.append(reply_event)
    events.append({"type": "usage", "promptTokens": run.prompt_tokens,
                   "completionTokens": run.completion_tokens,
                   "credits": work.bill.spent, "calls": len(work.bill.charges)})
    return events
