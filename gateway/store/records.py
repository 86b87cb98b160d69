"""Plain records that cross the store's interface. No SQL, no behaviour."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class User:
    """A gateway account: billing is per user."""

    user_id: str
    plan: str
    credits: int
    browser_minutes: int
    created_at: str
    period: str  # the billing period (UTC "YYYY-MM") whose grant the balance includes


@dataclass(frozen=True)
class WebSession:
    """A signed-in dashboard session: whose it is, and the CSRF token its changes carry."""

    user: User
    csrf: str


@dataclass(frozen=True)
class ThreadRef:
    """Where a conversation lives: its owner, its API id, its session key and channel."""

    user_id: str
    thread_id: str
    session_key: str
    channel: str


@dataclass(frozen=True)
class Thread:
    """A stored conversation."""

    ref: ThreadRef
    summary: str
    summary_tokens: int
    summary_version: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class StoredMessage:
    """One rolling-memory entry with its cached token count."""

    id: int
    role: str
    content: str
    tokens: int


@dataclass(frozen=True)
class DisplayMessage:
    """One entry of the display transcript (dashboard only)."""

    id: int
    role: str
    content: str
    created_at: str


@dataclass(frozen=True)
class SecretRecord:
    """An encrypted browser credential as stored."""

    site: str
    blob: bytes


@dataclass(frozen=True)
class TurnState:
    """Everything one turn reads, loaded in one store call."""

    user: User
    thread: Thread | None
    pinned: dict[str, str]
    messages: list[StoredMessage]
    specialist_instructions: str | None
    credentials: list[SecretRecord]
    claimed: Claimed | None = None  # what the read claimed, when it was given a Claim
    session: SessionState | None = None  # the active session, where the store keeps them


@dataclass(frozen=True)
class SessionWrite:
    """A turn's session lines, appended by the commit that stores the turn (sessions kept in
    the store): the header (written only if the session is new) and the event lines, whose
    ``USER_MESSAGE_SLOT`` / ``REPLY_SLOT`` ids the commit replaces with the ids it gives the
    two messages; ``replay`` marks the lines of the reply's tool exchange."""

    user_id: str
    thread_id: str
    header: str
    lines: list[str]
    replay: list[bool]


USER_MESSAGE_SLOT = -1  # in a SessionWrite line: the id the user's message will get
REPLY_SLOT = -2  # ...and the id the reply will get


@dataclass(frozen=True)
class SessionState:
    """An active session kept in the store: its size in bytes (as a file's), its last write
    (epoch s) and the lines of its replay window (the replies still in rolling memory)."""

    size: int
    last_write: float
    replay: list[str]


@dataclass(frozen=True)
class Claim:
    """What a turn claims of the billed account as its state is read, in stores shared by
    several processes: one request against the plan's rate limit, and a credit hold."""

    hold_id: str
    credits: int  # the hold: the first call's worst case at MAX_CONTEXT
    now: float  # epoch seconds
    expires: float  # when a hold its process never released is forgotten
    rate_limits: dict[str, int] | None  # requests a minute by plan (None: not counted)


@dataclass(frozen=True)
class Claimed:
    """What a :class:`Claim` (or a later reservation) found: whether the request fitted the
    rate limit (else the seconds until it would), whether the hold was placed, and the
    balance it was checked against."""

    rate_ok: bool
    retry_after: float
    held: bool
    balance: int


@dataclass(frozen=True)
class NewMessage:
    """A message to append to rolling memory and the display transcript."""

    role: str
    content: str
    tokens: int


@dataclass(frozen=True)
class Charge:
    """One ledger row: an LLM call, metered browser time, or (negative amounts) a grant."""

    kind: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    credits: int
    minutes: int = 0


@dataclass(frozen=True)
class LedgerEntry:
    """A ledger row as the usage API shows it."""

    id: int
    thread_key: str | None
    charge: Charge
    created_at: str


@dataclass(frozen=True)
class ExpiredThread:
    """A thread whose owner's plan retention has passed."""

    session_key: str
    user_id: str
    plan: str
    updated_at: str


@dataclass(frozen=True)
class Moment:
    """The instant of one write, as the store records it: epoch seconds (due times, ordering)
    and the same instant as ISO-8601 text (the rows' timestamps)."""

    epoch: float
    iso: str


@dataclass(frozen=True)
class Billing:
    """Charges to book for one user in one thread, and the balance under which that tells
    ``credits.low`` (None: never)."""

    user_id: str
    thread_key: str | None
    charges: Sequence[Charge]
    low_credits: int | None = None


class ChannelMessage(NamedTuple):
    """Which channel message something answers: the channel's name and the message's id."""

    channel: str
    message_id: str


@dataclass(frozen=True)
class TurnCommit:
    """Everything one turn writes, in one transaction."""

    ref: ThreadRef
    billed_user: str
    messages: list[NewMessage]
    charges: list[Charge]
    # the channel message this turn answers: marked answered, and its reply put in the
    # outbox, in the same commit
    inbound: ChannelMessage | None = None
    hold: str | None = None  # the turn's credit hold, released by the same commit
    session: SessionWrite | None = None  # the turn's session lines, where the store keeps them
    events: tuple[WebhookEvent, ...] = ()  # for the thread owner's webhooks, in the same commit
    # credits.low is told (in the same commit) if the charges take the billed balance under this
    low_credits: int | None = None

    @property
    def reply(self) -> str:
        """The assistant's reply: the last message written."""
        return self.messages[-1].content if self.messages else ""

    @property
    def billing(self) -> Billing:
        """The turn's charges, booked to the billed user in its thread."""
        return Billing(self.billed_user, self.ref.session_key, self.charges, self.low_credits)


@dataclass(frozen=True)
class TurnWritten:
    """What committing a turn produced: the new messages' ids, in order."""

    message_ids: list[int]


@dataclass(frozen=True)
class SummaryCommit:
    """A summarization result: applied only if the thread is still at ``expected_version``."""

    session_key: str
    billed_user: str
    expected_version: int
    summary: str
    summary_tokens: int
    folded_through_id: int
    charge: Charge
    hold: str | None = None  # the summarization's credit hold, released by the same commit
    events: tuple[WebhookEvent, ...] = ()  # for the thread owner's webhooks, if applied
    low_credits: int | None = None  # as TurnCommit's

    @property
    def billing(self) -> Billing:
        """The summarization's charge, booked to the billed user in its thread."""
        return Billing(self.billed_user, self.session_key, (self.charge,), self.low_credits)


@dataclass
class ThreadPage:
    """A page of the display transcript, oldest first."""

    messages: list[DisplayMessage] = field(default_factory=list)
    next_before: int | None = None


@dataclass(frozen=True)
class InboxEntry:
    """A channel message as the durable inbox holds it until it is answered.

    ``address`` (JSON text) is where the reply goes; ``payload`` is the rest of the message,
    sealed (it holds the user's words before redaction).
    """

    channel: str
    message_id: str
    conversation: str
    address: str
    max_chars: int
    payload: bytes
    id: int = 0


@dataclass(frozen=True)
class Delivery:
    """A reply in the durable outbox: ``pending`` until the platform accepts every chunk,
    then ``delivered``; ``failed`` when it was refused for good or retried too long."""

    id: int
    channel: str
    message_id: str  # of the inbound message it answers
    conversation: str
    address: str
    text: str
    max_chars: int
    state: str
    chunks_sent: int
    attempts: int
    next_attempt: float  # epoch seconds
    created: float  # epoch seconds
    last_error: str | None


@dataclass(frozen=True)
class WebhookEvent:
    """Something to tell the owner's webhooks (those subscribed to ``type``): the store writes
    it to the webhook outbox in the transaction of the change it reports, adding the time."""

    type: str
    data: dict[str, object]


@dataclass(frozen=True)
class Webhook:
    """A registered endpoint: where a user's events of the listed types go, signed with the
    secret (``secret`` is sealed: :class:`gateway.secrets.SecretBox`)."""

    id: str
    user_id: str
    url: str
    events: tuple[str, ...]
    secret: bytes
    created_at: str


@dataclass(frozen=True)
class WebhookDelivery:
    """One event for one endpoint in the webhook outbox: ``pending`` until the endpoint
    answers 2xx (``delivered``) or the retries run out (``failed``). ``message_id`` is the
    ``webhook-id`` header, the same on every attempt; ``body`` the exact bytes signed."""

    id: int
    message_id: str
    webhook_id: str
    event: str
    body: str
    state: str
    attempts: int
    last_status: int | None
    next_attempt: float  # epoch seconds
    created: float  # epoch seconds
    last_error: str | None


class DueDelivery(NamedTuple):
    """A pending webhook delivery as the dispatcher schedules it (its body is read when it
    is sent): ordered by when it is due."""

    next_attempt: float
    id: int
    webhook_id: str


class WebhookAttempt(NamedTuple):
    """What one attempt at a delivery came to, as the store records it."""

    delivery_id: int
    state: str  # delivered, failed, or pending (to be tried again at next_attempt)
    attempts: int
    status: int | None
    next_attempt: float
    error: str | None
