"""One chat turn, and the summarization it may trigger.

load (one store call) → assemble the prompt → provider call → commit (one transaction) →
answer → summarize if ``messages`` reached SUMMARIZE_AT. The caller holds the thread's turn lock
for all of it, summarization included.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import hooks
from .billing import charge_for
from .errors import NotFound, PaymentRequired, ProviderError
from .interfaces import Completion, CompletionRequest, TurnContext
from .memory import accept_summary, fold_point, summary_request
from .prompt import Credential, PromptInputs, assemble
from .secrets import redact
from .store import NewMessage, SummaryCommit, ThreadRef, TurnCommit

if TYPE_CHECKING:
    from .gateway import Gateway

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnResult:
    """What a channel gets back from a turn."""

    reply: str
    prompt_tokens: int
    completion_tokens: int
    credits: int
    summarized: bool
    session_rotated: bool


@dataclass(frozen=True)
class PendingSummary:
    """A summarization the turn triggered; it runs after the answer, under the same lock."""

    ref: ThreadRef
    billed_user: str
    secrets: tuple[str, ...]


def _decrypt(gw: Gateway, user_id: str, records: list) -> list[Credential]:
    credentials = []
    for record in records:
        document = gw.secret_box.open(record.blob, user_id)
        if document is None:
            log.warning("a saved credential of user %r cannot be decrypted; skipped", user_id)
            continue
        credentials.append(Credential(record.site, document["username"], document["password"]))
    return credentials


async def _call_provider(gw: Gateway, request: CompletionRequest) -> Completion:
    completion = await gw.provider.complete(request)
    if not isinstance(completion, Completion):
        raise ProviderError(f"provider {gw.provider.name!r} returned no completion")
    return completion


async def run_turn(gw: Gateway, user_id: str, ref: ThreadRef, message: str,
                   specialist: str | None) -> tuple[TurnResult, PendingSummary | None]:
    """Run one turn under the caller's lock; return its result and any summarization due."""
    settings = gw.settings
    state = await gw.store.load_turn(ref.session_key, user_id, specialist)
    if specialist is not None and state.specialist_instructions is None:
        raise NotFound(f"no specialist named {specialist!r}", code="specialist_not_found")
    if state.user.credits <= 0:
        raise PaymentRequired("no AI credits left; ask for a grant or wait for the next period")

    credentials = _decrypt(gw, user_id, state.credentials)
    secrets = tuple(c.password for c in credentials)
    turn = TurnContext(user_id, ref.thread_id, ref.session_key, ref.channel, message, specialist)
    sections = await hooks.collect(gw.pm.hook.prompt_sections, gateway=gw, turn=turn)
    stored_message = redact(message, secrets)
    prompt = assemble(
        PromptInputs(
            instructions=settings.system_prompt,
            model=settings.llm_model,
            pinned=state.pinned,
            specialist=(specialist, state.specialist_instructions)
            if specialist and state.specialist_instructions else None,
            summary=state.thread.summary if state.thread else "",
            credentials=credentials,
            session_rotated=False,
            sections=sections,
            recent=state.messages,
            user_message=message,
            user_tokens=gw.counter.count(message),
        ),
        gw.counter,
        settings.max_context,
    )
    completion = await _call_provider(gw, CompletionRequest(
        prompt.messages, settings.llm_model, settings.llm_max_tokens))
    reply = redact(completion.text, secrets).strip()
    if not reply:
        raise ProviderError("the provider returned an empty reply")

    reply_tokens = gw.counter.count(reply)
    prompt_tokens = completion.prompt_tokens if completion.prompt_tokens is not None \
        else prompt.prompt_tokens
    completion_tokens = completion.completion_tokens if completion.completion_tokens is not None \
        else gw.counter.count(completion.text)
    charge = charge_for(settings, "chat", completion.model,
                        prompt_tokens, completion_tokens)
    stored = await gw.store.commit_turn(TurnCommit(
        ref=ref,
        billed_user=user_id,
        messages=[NewMessage("user", stored_message, gw.counter.count(stored_message)),
                  NewMessage("assistant", reply, reply_tokens)],
        charge=charge,
    ))
    await hooks.notify_each(gw.pm.hook.turn_completed, gateway=gw, turn=turn, reply=reply)

    pending = None
    if stored >= settings.summarize_at:
        pending = PendingSummary(ref, user_id, secrets)
    result = TurnResult(reply, prompt_tokens, completion_tokens, charge.credits,
                        summarized=pending is not None, session_rotated=False)
    return result, pending


async def summarize(gw: Gateway, pending: PendingSummary) -> bool:
    """Fold older messages into the summary; on any failure change nothing. True if applied."""
    settings = gw.settings
    thread, messages = await gw.store.rolling_memory(pending.ref.session_key)
    cut = fold_point(messages, settings.keep_recent)
    if thread is None or len(messages) < settings.summarize_at or cut == 0:
        return False
    user = await gw.store.get_user(pending.billed_user)
    if user is None or user.credits <= 0:
        log.info("summarization of %s postponed: no credits", pending.ref.session_key)
        return False
    folded = messages[:cut]
    request = summary_request(thread.summary, folded, settings.llm_model)
    try:
        completion = await _call_provider(gw, request)
    except ProviderError as exc:
        log.warning("summarization of %s failed (%s); will retry on a later turn",
                    pending.ref.session_key, exc.message)
        return False
    summary = accept_summary(redact(completion.text, pending.secrets))
    if summary is None:
        log.warning("summarization of %s returned nothing usable; will retry on a later turn",
                    pending.ref.session_key)
        return False
    request_tokens = completion.prompt_tokens if completion.prompt_tokens is not None \
        else gw.counter.messages(list(request.messages))
    completion_tokens = completion.completion_tokens if completion.completion_tokens is not None \
        else gw.counter.count(completion.text)
    applied = await gw.store.commit_summary(SummaryCommit(
        session_key=pending.ref.session_key,
        billed_user=pending.billed_user,
        expected_version=thread.summary_version,
        summary=summary,
        summary_tokens=gw.counter.count(summary),
        folded_through_id=folded[-1].id,
        charge=charge_for(settings, "summarize", completion.model,
                          request_tokens, completion_tokens),
    ))
    if not applied:
        log.info("summarization of %s discarded: the thread changed meanwhile",
                 pending.ref.session_key)
    return applied
