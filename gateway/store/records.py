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
    admin: bool = False  # may use the admin API (gateway.accounts.admin)
    blocked: bool = False  # its API calls and channel turns are refused; its data stays
    daily_credits: int | None = None  # its own daily cap (None: its plan's; 0: none)
    spent_day: str = ""  # the UTC day ("YYYY-MM-DD") spent_today counts
    spent_today: int = 0  # credits charged on spent_day
    active_at: str | None = None  # when it was last charged for a call (ISO-8601 UTC)


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
    # What the thread is called: the user's name for it (``named``), else the title its first
    # message gives ("" if it has none yet). Read by the thread reads that list or show it.
    title: str = ""
    named: bool = False


@dataclass(frozen=True)
class ThreadHit:
    """A thread a search found: its newest message that matched (``message_id`` and its
    ``text``), or None and "" when only its title did."""

    thread: Thread
    message_id: int | None
    text: str


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
    daily_caps: dict[str, int] | None = None  # daily credit caps by plan (0: none)


@dataclass(frozen=True)
class Claimed:
    """What a :class:`Claim` (or a later reservation) found: whether the request fitted the
    rate limit (else the seconds until it would), whether the hold was placed, and the
    balance it was checked against."""

    rate_ok: bool
    retry_after: float
    held: bool
    balance: int
    daily: DailyAllowance | None = None  # the daily cap in force on it, as the claim read it


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
    # the tool whose results the call read (tool rounds), or that metered the minutes: the
    # usage rollups' tool dimension ("" for none); not a ledger column
    tool: str = ""


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
    channel: str | None = None  # of the thread (None: read from the thread's row)
    daily_cap: int | None = None  # the user's daily cap: credits.low near it (None: no cap)


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
    # ...or take the billed user's spending today near this, their daily cap (policy.reached)
    daily_cap: int | None = None
    # the rolling ids (user message, reply) of the thread's last exchange, which this turn
    # replaces (regenerate, edit): deleted with the newest display messages, in the same commit
    replaces: tuple[int, ...] = ()
    # the scheduled run this turn is: its claim ends, and its reply is queued, in the same
    # commit (nothing is written if the claim was lost)
    job: JobOutcome | None = None
    # the turn's W3C trace context (stored text, see gateway.observe): kept with the reply's
    # outbox row, so that its delivery, whenever and wherever it happens, links to the turn
    trace: str | None = None

    @property
    def reply(self) -> str:
        """The assistant's reply: the last message written."""
        return self.messages[-1].content if self.messages else ""

    @property
    def billing(self) -> Billing:
        """The turn's charges, booked to the billed user in its thread."""
        return Billing(self.billed_user, self.ref.session_key, self.charges, self.low_credits,
                       self.ref.channel, self.daily_cap)


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
    daily_cap: int | None = None  # as TurnCommit's

    @property
    def billing(self) -> Billing:
        """The summarization's charge, booked to the billed user in its thread."""
        return Billing(self.billed_user, self.session_key, (self.charge,), self.low_credits,
                       daily_cap=self.daily_cap)


@dataclass
class ThreadPage:
    """A page of the display transcript, oldest first."""

    messages: list[DisplayMessage] = field(default_factory=list)
    next_before: int | None = None


@dataclass(frozen=True)
class InboxEntry:
    """A channel message as the durable inbox holds it until it is answered.

    ``address`` (JSON text) is where the reply goes; ``payload`` is the rest of the message,
    sealed (it holds the user's words before redaction); ``trace``, the W3C trace context of
    its intake (stored text, see :mod:`gateway.observe`; None with tracing off): the turn that
    answers it continues that trace. For a message queued to the outbox, ``trace`` goes with
    the outbox row instead.
    """

    channel: str
    message_id: str
    conversation: str
    address: str
    max_chars: int
    payload: bytes
    id: int = 0
    trace: str | None = None


@dataclass(frozen=True)
class Intake:
    """A channel message just committed to the inbox: its id, and whether earlier messages of
    its conversation are still pending with another process (one that died, or is answering
    them), which must be answered first."""

    id: int
    behind_others: bool = False


@dataclass(frozen=True)
class Earlier:
    """The pending messages before one of its conversation: those now this process's to answer
    (oldest first), and how many another live process is still answering."""

    taken: list[InboxEntry]
    elsewhere: int = 0


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
    # the W3C trace context of what wrote the reply (its turn's), stored text: its sends link
    # to it (see gateway.observe); None with tracing off
    trace: str | None = None


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


@dataclass(frozen=True)
class Job:
    """A scheduled job: owned by a user, posting in the thread (and channel) it was made in.

    ``kind`` is ``at`` (once, ``spec`` an ISO time), ``every`` (``spec`` whole seconds) or
    ``cron`` (``spec`` five fields, read in ``time_zone``). ``action`` is ``message`` (post
    ``text`` as it is: no model call) or ``prompt`` (run an agent turn with ``text``).
    ``misfire`` says what a run missed while no gateway ran becomes: ``run_once`` (one run,
    marked late) or ``skip``. ``next_run`` (epoch s) is the due time of its next run, None
    once it is done; ``address`` (JSON) is where the thread's channel delivers.
    """

    id: str
    user_id: str
    ref: ThreadRef
    address: str
    max_chars: int
    kind: str
    spec: str
    time_zone: str
    action: str
    text: str
    misfire: str
    state: str  # active, paused or done
    next_run: float | None
    runs: int = 0
    misses: int = 0
    last_run: float | None = None
    last_status: str | None = None
    created_at: str = ""


@dataclass(frozen=True)
class JobRequest:
    """What a new job is to do: when (``kind`` ``at``/``every``/``cron``, its ``spec`` and
    time zone, read by :func:`gateway.jobs.timing.of`), post ``text`` as it is
    (``message``) or run a turn with it (``prompt``), and what a run missed while the
    gateway was down becomes (``run_once`` or ``skip``)."""

    kind: str
    spec: str
    time_zone: str
    action: str
    text: str
    misfire: str = "run_once"


@dataclass(frozen=True)
class JobLease:
    """A due run of ``job`` claimed by one process until ``until`` (epoch s): its result is
    committed only while ``token`` still holds the job (:class:`JobOutcome`)."""

    job: Job
    due: float
    token: str
    until: float


@dataclass(frozen=True)
class JobOutcome:
    """What a claimed run came to, committed with the claim's end in one transaction.

    :param status: ``sent``, ``late`` (sent past its time), ``skipped`` (missed, not run),
        ``refused`` (no credits) or ``failed``.
    :param missed: the due times missed while no gateway ran, each recorded (not run).
    :param next_run: the next due time (None: the job is done).
    :param deliver: the reply goes to the thread's channel through its outbox, as
        ``job-{id}-{due}`` (set for channel threads).
    """

    job_id: str
    token: str
    due: float
    status: str
    detail: str = ""
    missed: tuple[float, ...] = ()
    next_run: float | None = None
    deliver: bool = False

    @property
    def message_id(self) -> str:
        """The run's outbox id: one per job and due time, so a run is queued once."""
        return f"job-{self.job_id}-{int(self.due * 1000)}"


@dataclass(frozen=True)
class JobRun:
    """One recorded run (or miss) of a job."""

    job_id: str
    due: float
    status: str
    detail: str
    at: float


@dataclass(frozen=True)
class DailyAllowance:
    """A daily credit cap in force on an account: the most credits a UTC ``day`` allows
    (``cap``) and what was charged on it so far (``spent``)."""

    cap: int
    spent: int
    day: str  # YYYY-MM-DD

    @property
    def left(self) -> int:
        """What the cap leaves for the rest of the day (negative once overshot)."""
        return self.cap - self.spent


# --- administration ------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditEntry:
    """An administrative act to append to the audit log: who (an admin's user id, or the
    operating-system user of a ``cloudybot`` command), what (``action`` on ``target``, with
    ``details``: never a secret), from where (the client's address, or ``cli``)."""

    actor: str
    action: str
    target: str | None
    details: dict[str, object]
    source: str


@dataclass(frozen=True)
class AuditRecord:
    """An audit log row: the entry, its id (ascending with time) and when (ISO-8601 UTC)."""

    id: int
    at: str
    entry: AuditEntry


@dataclass(frozen=True)
class AuditQuery:
    """Which audit rows to read: newest first, before id ``before``, from ``since`` (ISO
    time) on, of one ``actor`` and/or ``action`` (None: any), at most ``limit``."""

    limit: int
    before: int | None = None
    since: str | None = None
    actor: str | None = None
    action: str | None = None


@dataclass(frozen=True)
class UserQuery:
    """A page of accounts, by user id from the first after ``after``: those whose id holds
    ``search`` (any case), on ``plan``, blocked or not, admins or not (None: any)."""

    limit: int
    after: str | None = None
    search: str | None = None
    plan: str | None = None
    blocked: bool | None = None
    admin: bool | None = None


@dataclass(frozen=True)
class Spend:
    """What calls cost, summed: LLM calls, their tokens, credits and browser minutes."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    credits: int = 0
    minutes: int = 0


@dataclass(frozen=True)
class UsageQuery:
    """A usage report: from ``start`` (inclusive) to ``end`` (exclusive), UTC hours
    ``YYYY-MM-DDTHH`` (``bucket`` ``hour``) or days ``YYYY-MM-DD`` (``day``), grouped by one
    dimension (``plan``, ``model``, ``channel``, ``tool`` or ``user``), with the ``top``
    spenders of the range's days."""

    start: str
    end: str
    bucket: str
    group_by: str
    top: int


@dataclass(frozen=True)
class UsageRow:
    """One bucket of one group's spending."""

    bucket: str
    group: str
    spend: Spend


@dataclass(frozen=True)
class UsageReport:
    """What :class:`UsageQuery` asked: the series, the totals and the top spenders (user
    id, spend) of the days the range covers."""

    rows: list[UsageRow]
    total: Spend
    spenders: list[tuple[str, Spend]]


@dataclass(frozen=True)
class OutboxHealth:
    """A channel's durable queues: inbox messages not answered, outbox replies not delivered
    (and the oldest one's creation, epoch s), replies that failed for good."""

    channel: str
    inbox_pending: int
    outbox_pending: int
    oldest_pending: float | None
    failed: int


@dataclass(frozen=True)
class FailingWebhook:
    """An endpoint whose deliveries are failing: retrying ones (``retrying``), those that
    failed for good since ``Health``'s cutoff (``failed``) and the latest attempt's status
    and error."""

    webhook_id: str
    user_id: str
    url: str
    retrying: int
    failed: int
    last_status: int | None
    last_error: str | None


@dataclass(frozen=True)
class Health:
    """What an operator watches: the channels' queues, failing webhook endpoints and the
    scheduled jobs by state."""

    channels: list[OutboxHealth]
    webhooks: list[FailingWebhook]
    jobs: dict[str, int]
