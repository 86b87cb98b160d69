"""The store: the gateway's one narrow, async interface to persistent state.

The turn logic talks only to :class:`Store`. ``SQLiteStore`` is the embedded backend;
``PostgresStore`` (several processes on one database) implements the same protocol;
:func:`gateway.store.backends.store_for` picks one from the configuration. The account rules
both apply (balances, credit holds, daily caps, the rate window, ``credits.low``) are written
once, in :mod:`gateway.store.policy`. The usage rollups an admin's report reads are kept
beside the ledger (:mod:`gateway.store.usage`), and admin acts go to an append-only audit log.

The events outbound webhooks report are written here too (:mod:`gateway.store.events`), in
the transaction of the change they report.

May import: ``gateway.base``, ``gateway.config``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.base.locks import Leadership, SharedLock
from gateway.store.records import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    ChannelMessage,
    Charge,
    Claim,
    Claimed,
    DailyAllowance,
    Delivery,
    DisplayMessage,
    DueDelivery,
    Earlier,
    ExpiredThread,
    FailingWebhook,
    Health,
    InboxEntry,
    Intake,
    Job,
    JobLease,
    JobOutcome,
    JobRequest,
    JobRun,
    LedgerEntry,
    NewMessage,
    OutboxHealth,
    SecretRecord,
    SessionState,
    SessionWrite,
    Spend,
    StoredMessage,
    SummaryCommit,
    Thread,
    ThreadHit,
    ThreadPage,
    ThreadRef,
    TurnCommit,
    TurnState,
    TurnWritten,
    UsageQuery,
    UsageReport,
    UsageRow,
    User,
    UserQuery,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
    WebSession,
)


class Store(Protocol):
    """Persistent state. Every method is one transaction."""

    #: Other processes may use the same database at once (PostgreSQL): they take over what a
    #: process that died left (``inbox_pending``, ``pending_deliveries``) while they run.
    shared: bool

    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None:
        """Release the connection."""

    # --- accounts -----------------------------------------------------------
    async def create_user(self, user_id: str, plan: str, credits: int,
                          browser_minutes: int, period: str = "") -> User:
        """Create an account whose balances (``period``'s) are one grant row; raise
        ``BadRequest`` if it exists."""

    async def ensure_user(self, user_id: str, plan: str, credits: int,
                          browser_minutes: int, period: str = "") -> tuple[User, bool]:
        """Return the account, creating it first if needed; the flag says it was created."""

    async def get_user(self, user_id: str) -> User | None:
        """The account, or None."""

    async def list_users(self, limit: int, after: str | None = None) -> list[User]:
        """Up to ``limit`` accounts by user id, from the first after ``after``."""

    async def user_counts(self, user_id: str) -> dict[str, int]:
        """How much an account holds: ``threads``, ``tokens``, ``sessions`` (dashboard
        sign-ins), ``specialists``, ``logins`` (saved credentials), ``webhooks``, ``jobs``."""

    async def revoke_access(self, user_id: str) -> int:
        """End every way in to the account (API tokens, dashboard sessions, sign-in links);
        how many there were."""

    async def delete_user(self, user_id: str) -> bool:
        """Remove the account and every row held about it (threads and all they hold, their
        inbox and outbox rows, ledger, specialists, logins, tokens, webhooks and their
        deliveries), leaving no byte of it in the store's files; False if no such user."""

    async def grant_credits(self, user_id: str, credits: int, audit: AuditEntry | None = None,
                            kind: str = "grant") -> User:
        """Add ``credits`` (a ledger row of ``kind``: ``grant``, or an admin's
        ``admin_grant``), appending ``audit`` to the audit log in the same transaction; raise
        ``NotFound`` if no account."""

    async def replace_token(self, user_id: str, token_hash: str) -> None:
        """Make ``token_hash`` the account's only API token."""

    async def user_for_token(self, token_hash: str) -> User | None:
        """The account owning this token hash, or None."""

    async def access_epoch(self) -> int:
        """A number that changes whenever an API token stops working (revoked, replaced, its
        account deleted), whichever process did it: a token cache compares it before it
        trusts what it holds, so it is asked on every authentication and must be cheap.
        SQLite reads a counter that the revoking transaction bumps; PostgreSQL answers from
        memory, which every process's ``LISTEN`` updates when such a transaction commits,
        and which a read of that counter every ``CLOUDYBOT_LEADER_RETRY_SECONDS`` corrects
        if a notification was lost."""

    # --- billing ------------------------------------------------------------------------
    async def roll_period(self, user_id: str, expected: str, period: str, credits: int,
                          minutes: int) -> User:
        """Start ``period`` if the user is still in ``expected``: top the balances up to
        ``credits``/``minutes`` (a ``monthly_grant`` row). Idempotent across processes."""

    async def set_plan(self, user_id: str, plan: str, credits: int, minutes: int) -> User:
        """Move the user to ``plan``, topping the balances up to its amounts at once."""

    async def charge_minutes(self, user_id: str, thread_key: str | None, minutes: int,
                             what: str = "browser") -> User:
        """Take metered browser minutes (a ledger row of kind ``what``)."""

    async def take_minutes(self, user_id: str, thread_key: str | None, minutes: int) -> int:
        """Take up to ``minutes`` browser minutes, never more than the balance holds (one
        ``browser`` ledger row, none when nothing is left): how many were taken. Atomic, so
        concurrent browser sessions of one user never take the balance below zero."""

    async def ledger_page(self, user_id: str, limit: int, before: int | None
                          ) -> tuple[list[LedgerEntry], int | None]:
        """Up to ``limit`` ledger rows older than ``before``, newest first, and the cursor."""

    async def ledger_totals(self, user_id: str, since: str) -> dict[str, Charge]:
        """Per-kind sums of the user's ledger rows from ``since`` (ISO time) on; each Charge's
        ``model`` field holds the row count."""

    async def ledger_daily(self, user_id: str, since: str) -> list[tuple[str, str, int, int]]:
        """What the user spent per UTC day and kind from ``since`` on, grants left out:
        (``YYYY-MM-DD``, kind, credits, browser minutes), oldest day first."""

    async def expired_threads(self, cutoffs: dict[str, str]) -> list[ExpiredThread]:
        """Threads not updated since their owner's plan cutoff (``{plan: ISO time}``)."""

    async def prune_inbound(self, before: str) -> int:
        """Forget answered inbox messages and failed deliveries older than ``before``; return
        how many."""

    # --- threads and pinned memory -----------------------------------------
    async def get_thread(self, session_key: str) -> Thread | None:
        """The thread with this session key, or None."""

    async def list_threads(self, user_id: str, limit: int = 50,
                           before: tuple[str, int] | None = None,
                           ) -> tuple[list[Thread], tuple[str, int] | None]:
        """A page of the user's threads, most recently updated first, and the cursor of the
        next page (None on the last). Threads read here and by ``get_thread`` carry their
        ``title``."""

    async def set_title(self, session_key: str, title: str | None) -> bool:
        """Name the thread, or with None let its first message's title be its title again
        (neither moves it in the list); False if no thread."""

    async def search_threads(self, user_id: str, terms: Sequence[str], limit: int,
                             before: tuple[str, int] | None = None,
                             ) -> tuple[list[ThreadHit], tuple[str, int] | None]:
        """A page of the user's threads whose title (the one the user set) or one of whose
        display messages holds a word starting with each of ``terms`` (words as
        :mod:`gateway.base.search_text` says), in the order and with the cursor of
        ``list_threads``; each hit with its newest matching message. From a full-text
        index, never a scan of the messages; a deleted thread is gone from it at once."""

    async def get_pinned(self, ref: ThreadRef) -> dict[str, str]:
        """The thread's pinned keys (empty if no thread)."""

    async def put_pinned(self, ref: ThreadRef, key: str, value: str,
                         max_keys: int) -> dict[str, str]:
        """Upsert one pinned key, creating the thread if needed; return all keys."""

    async def delete_pinned(self, ref: ThreadRef, key: str | None) -> dict[str, str]:
        """Delete one pinned key, or all when ``key`` is None; return what remains."""

    async def clear_thread(self, session_key: str,
                           events: Sequence[WebhookEvent] = ()) -> bool:
        """Empty summary and messages (pinned and display stay), queueing ``events`` for the
        owner's webhooks in the same transaction; False if no thread."""

    async def delete_thread(self, session_key: str,
                            events: Sequence[WebhookEvent] = ()) -> bool:
        """Remove the thread and all it holds, queueing ``events`` for the owner's webhooks
        in the same transaction; False if no thread."""

    async def display_page(self, session_key: str, limit: int,
                           before: int | None) -> ThreadPage:
        """Up to ``limit`` display messages older than ``before``, oldest first."""

    async def rolling_memory(self, session_key: str) -> tuple[Thread | None, list[StoredMessage]]:
        """The thread and its rolling ``messages``, oldest first, from one snapshot."""

    # --- turns ---------------------------------------------------------------
    async def load_turn(self, ref: ThreadRef, user_id: str, specialist: str | None,
                        claim: Claim | None = None) -> TurnState:
        """Everything a turn reads, in one call.

        ``user_id`` is who is billed (in a group chat not always the owner). Raise ``NotFound``
        if there is no such account. The thread is read by ``ref``'s session key whoever owns
        it (``TurnState.thread.ref`` says): whether the caller may use it is the agent's rule.
        A shared store (PostgreSQL, see :func:`gateway.billing.quotas_for`) applies ``claim``
        with the read and reports it in ``TurnState.claimed``; others are never given one.
        """

    async def commit_turn(self, commit: TurnCommit) -> TurnWritten:
        """Write a turn (messages, display, ledger, balance); return the new message ids."""

    async def record_charges(self, user_id: str, thread_key: str, charges: list[Charge],
                             hold: str | None = None) -> None:
        """Ledger rows (and balance) for calls whose turn was not stored, releasing the
        turn's credit ``hold`` (shared quotas) in the same transaction."""

    async def commit_summary(self, commit: SummaryCommit) -> bool:
        """Apply a summary if the thread is still at the expected version; False otherwise."""

    # --- durable inbox and outbox ---------------------------------------------------
    async def inbox_add(self, entry: InboxEntry, answered: bool = False) -> Intake | None:
        """Commit a channel message to the inbox (``answered``: as already answered, only to
        recognise a redelivery); None if it is there already. (SQLite: never behind others.)"""

    async def inbox_take_earlier(self, entry: InboxEntry) -> Earlier:
        """Take the pending messages of ``entry``'s conversation that arrived before it (by
        ``entry.id``) and no live process is answering, oldest first; count those another
        live process is still answering."""

    async def inbox_pending(self) -> list[InboxEntry]:
        """The unanswered inbox messages no live process is answering, in arrival order:
        from now on this process's to answer. (SQLite: all of them, asked once at start.)"""

    async def answer_inbox(self, channel: str, message_id: str, reply: str,
                           trace: str | None = None) -> bool:
        """Mark the message answered and queue ``reply`` in the outbox (its row keeping the
        ``trace`` context of what wrote it), in one transaction; False if it was not
        pending."""

    async def queue_message(self, entry: InboxEntry, text: str) -> bool:
        """Put a message that answers no inbound one (a plugin's own) in the outbox (with
        ``entry.trace``), recorded under ``entry``'s channel and id so that it is queued once;
        False if that id was taken already."""

    async def drop_inbox(self, channel: str, message_id: str) -> None:
        """Mark a pending message done without a reply."""

    async def pending_deliveries(self) -> list[Delivery]:
        """The replies waiting for their platform that no live process is delivering, oldest
        first: from now on this process's to deliver. (SQLite: all of them, at start.)"""

    async def deliveries(self, conversation: str | None = None,
                         limit: int = 100) -> list[Delivery]:
        """Pending and failed replies, newest first (one conversation's when given)."""

    async def delivery_progress(self, channel: str, message_id: str, chunks_sent: int) -> None:
        """Record that the first ``chunks_sent`` chunks of a reply arrived."""

    async def delivery_retry(self, channel: str, message_id: str, attempts: int,
                             next_attempt: float, error: str) -> None:
        """Record a failed attempt and when to try again."""

    async def delivery_finished(self, channel: str, message_id: str,
                                error: str | None = None) -> None:
        """Delivered (forgotten), or failed for good with ``error`` (kept for the record)."""

    # --- specialists and credentials ------------------------------------------
    async def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per channel with any: messages in the inbox not answered yet, and replies in the
        outbox not delivered yet."""

    async def get_specialist(self, user_id: str, name: str) -> str | None:
        """The instructions of the user's specialist, or None."""

    async def list_specialists(self, user_id: str) -> dict[str, str]:
        """All the user's specialists, by name."""

    async def put_specialist(self, user_id: str, name: str, instructions: str) -> None:
        """Create or replace a specialist."""

    async def delete_specialist(self, user_id: str, name: str) -> bool:
        """Delete a specialist; False if there was none."""

    async def put_credential(self, user_id: str, site: str, blob: bytes) -> list[SecretRecord]:
        """Create or replace a saved browser credential; return all the user's."""

    async def list_credentials(self, user_id: str) -> list[SecretRecord]:
        """All the user's saved browser credentials (encrypted)."""

    async def delete_credential(self, user_id: str, site: str) -> list[SecretRecord]:
        """Forget one saved credential; return what remains."""

    # --- dashboard sign-in --------------------------------------------------------
    async def create_web_session(self, session_hash: str, user_id: str, csrf: str,
                                 expires: float) -> None:
        """Record a signed-in session (its id only as a hash) until ``expires`` (epoch s)."""

    async def web_session(self, session_hash: str) -> WebSession | None:
        """The account and CSRF token of a session that has not expired, or None."""

    async def delete_web_session(self, session_hash: str) -> None:
        """End a session (sign-out)."""

    async def create_login_link(self, code_hash: str, user_id: str, expires: float) -> None:
        """Record a single-use sign-in code (only its hash) valid until ``expires``."""

    async def use_login_link(self, code_hash: str) -> str | None:
        """Spend a sign-in code: the account it signs in, if it was valid; never again."""

    async def ledger(self, user_id: str) -> list[Charge]:
        """The user's ledger rows, oldest first."""

    # --- several processes ------------------------------------------------------------
    # --- outbound webhooks ---------------------------------------------------------------
    #: Told of the deliveries each commit queued, once it is committed (the gateway's
    #: dispatcher sends them; a store shared by several processes gives each process its own).
    webhooks_queued: Callable[[list[WebhookDelivery]], None]

    async def create_webhook(self, webhook: Webhook) -> None:
        """Register an endpoint."""

    async def list_webhooks(self, user_id: str) -> list[Webhook]:
        """The user's endpoints, oldest first."""

    async def get_webhook(self, webhook_id: str) -> Webhook | None:
        """An endpoint by id, or None."""

    async def delete_webhook(self, user_id: str, webhook_id: str) -> bool:
        """Remove the user's endpoint and its deliveries; False if the user has none such."""

    async def emit(self, user_id: str, events: Sequence[WebhookEvent],
                   only: str | None = None) -> int:
        """Queue ``events`` for the user's subscribed endpoints (``only``: for that one
        endpoint, subscribed or not), a change of its own; how many deliveries."""

    async def webhook_deliveries(self, user_id: str, webhook_id: str,
                                 limit: int) -> list[WebhookDelivery]:
        """The user's endpoint's delivery log, newest first."""

    async def webhook_pending(self) -> list[DueDelivery]:
        """The pending deliveries this process is to send: all of them with one process;
        with several, those of processes that died too (taken over); by when they are due."""

    async def webhook_delivery(self, delivery_id: int) -> WebhookDelivery | None:
        """One delivery, body included; None if it is gone (its endpoint was deleted)."""

    async def webhook_attempts(self, attempts: list[WebhookAttempt]) -> None:
        """Record attempts' outcomes, in order, in one transaction: ``delivered``, ``failed``
        for good, or still ``pending`` until their ``next_attempt``."""

    # --- scheduled jobs (gateway.jobs) ---------------------------------------------------
    async def create_job(self, job: Job, max_jobs: int) -> Job | None:
        """Store a new job (with the address of its conversation's latest channel message
        when ``job.address`` is empty); None if its owner has ``max_jobs`` jobs that are not
        done."""

    async def list_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs, oldest first."""

    async def get_job(self, job_id: str) -> Job | None:
        """A job by id, or None."""

    async def set_job_state(self, user_id: str, job_id: str, state: str,
                            next_run: float | None) -> Job | None:
        """Pause (``paused``) or resume (``active``, due at ``next_run``) the user's job that
        is not done; the job as it is now, or None."""

    async def delete_job(self, user_id: str, job_id: str) -> bool:
        """Remove the user's job and its record; False if the user has none such."""

    async def job_runs(self, job_id: str, limit: int) -> list[JobRun]:
        """The job's recorded runs and misses, latest due first."""

    async def next_job_wake(self) -> float | None:
        """When the earliest active job is due, or its claim's lease ends (epoch s); None
        when there is no active job. One indexed read: the scheduler sleeps until then."""

    async def claim_jobs(self, now: float, lease_seconds: float,
                         limit: int) -> list[JobLease]:
        """Claim up to ``limit`` runs due by ``now`` (earliest first), each leased until
        ``now + lease_seconds``, in one transaction; a run another process is claiming is
        skipped (PostgreSQL: ``FOR UPDATE SKIP LOCKED``), one whose lease ended is taken."""

    async def finish_job(self, outcome: JobOutcome) -> bool:
        """End a claimed run that writes no turn (a skipped one): record it and its misses
        and move the job on, in one transaction; False if the claim was lost meanwhile
        (nothing written). A run that posts goes through :meth:`commit_turn`
        (``TurnCommit.job``), which does the same in the turn's transaction and raises
        ``Conflict`` instead."""

    async def time_zone(self, user_id: str) -> str | None:
        """The user's time zone (an IANA name), None if not set."""

    async def set_time_zone(self, user_id: str, zone: str) -> bool:
        """Set the user's time zone; False if no such user."""

    # --- administration (gateway.accounts.admin) ------------------------------------------
    async def find_users(self, query: UserQuery) -> list[User]:
        """A page of accounts by user id: those whose id holds ``query.search`` (any case),
        on its plan, blocked or not, admins or not, as it asks."""

    async def set_flag(self, user_id: str, flag: str, on: bool, audit: AuditEntry) -> User:
        """Set the account's ``admin`` or ``blocked`` flag and append ``audit``, in one
        transaction that also moves the access epoch (token caches forget the account at
        once); raise ``NotFound`` if no account."""

    async def set_daily_credits(self, user_id: str, credits: int | None,
                                audit: AuditEntry) -> User:
        """Give the account a daily credit cap of its own (None: its plan's again; 0: none)
        and append ``audit``, in one transaction; raise ``NotFound`` if no account."""

    async def append_audit(self, entry: AuditEntry) -> None:
        """Append ``entry`` to the audit log. The log is append-only: no method changes or
        removes a row of it (and the schema refuses to)."""

    async def audit_log(self, query: AuditQuery) -> list[AuditRecord]:
        """Audit rows, newest first: before ``query.before``, from ``query.since`` on, of its
        actor and action if given."""

    async def usage_report(self, query: UsageQuery) -> UsageReport:
        """Spending per bucket of one dimension, the range's totals and its top spenders,
        from the usage rollups (:mod:`gateway.store.usage`), never a scan of the ledger."""

    async def compact_usage(self, start: str, end: str) -> int:
        """Fold the ``usage_hours`` rows of the hours from ``start`` to ``end`` (hour keys,
        ``end`` exclusive) into one row per hour, dimension and value; how many rows were
        folded. PostgreSQL spreads the hour being written over shards (so that concurrent
        commits seldom wait for each other), which nothing writes once the hour is over.
        SQLite keeps one row already: it folds the ledger rows booked since its last fold
        instead (:mod:`~gateway.store.sqlite_rollups`), and says how many ledger ids that
        moved over."""

    async def health(self, since: float) -> Health:
        """The channels' inbox and outbox queues, the webhook endpoints failing (deliveries
        being retried, or failed for good since ``since``, epoch s) and the scheduled jobs by
        state."""

    async def lock_thread(self, session_key: str) -> SharedLock | None:
        """Hold the thread's turn lock where other processes see it (None: this store has
        no other processes to tell, as SQLite)."""

    async def try_lead(self, role: str) -> Leadership | None:
        """Become the one process playing ``role`` (long polling a platform, say), if no
        live process plays it now; None if one does. Leadership dies with its process."""


__all__ = [
    "AuditEntry",
    "AuditQuery",
    "AuditRecord",
    "ChannelMessage",
    "Charge",
    "Claim",
    "Claimed",
    "DailyAllowance",
    "Delivery",
    "DisplayMessage",
    "DueDelivery",
    "Earlier",
    "ExpiredThread",
    "FailingWebhook",
    "Health",
    "InboxEntry",
    "Intake",
    "Job",
    "JobLease",
    "JobOutcome",
    "JobRequest",
    "JobRun",
    "LedgerEntry",
    "NewMessage",
    "OutboxHealth",
    "SecretRecord",
    "SessionState",
    "SessionWrite",
    "Spend",
    "Store",
    "StoredMessage",
    "SummaryCommit",
    "Thread",
    "ThreadHit",
    "ThreadPage",
    "ThreadRef",
    "TurnCommit",
    "TurnState",
    "TurnWritten",
    "UsageQuery",
    "UsageReport",
    "UsageRow",
    "User",
    "UserQuery",
    "WebSession",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEvent",
]
