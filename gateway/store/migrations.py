"""Append-only schema migrations. Never edit a shipped entry: add a new one at the end."""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: accounts, threads and the memory layers
    """
    CREATE TABLE users (
        user_id         TEXT PRIMARY KEY,
        plan            TEXT NOT NULL,
        credits         INTEGER NOT NULL,
        browser_minutes INTEGER NOT NULL,
        created_at      TEXT NOT NULL
    );
    CREATE TABLE api_tokens (
        token_hash TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        created_at TEXT NOT NULL
    );
    CREATE INDEX api_tokens_user ON api_tokens(user_id);
    CREATE TABLE threads (
        id              INTEGER PRIMARY KEY,
        session_key     TEXT NOT NULL UNIQUE,
        user_id         TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        thread_id       TEXT NOT NULL,
        channel         TEXT NOT NULL,
        summary         TEXT NOT NULL DEFAULT '',
        summary_tokens  INTEGER NOT NULL DEFAULT 0,
        summary_version INTEGER NOT NULL DEFAULT 0,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        UNIQUE (user_id, thread_id)
    );
    CREATE INDEX threads_user_updated ON threads(user_id, updated_at);
    CREATE TABLE pinned (
        thread   INTEGER NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
        key      TEXT NOT NULL,
        value    TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (thread, key)
    ) WITHOUT ROWID;
    CREATE TABLE messages (
        id      INTEGER PRIMARY KEY,
        thread  INTEGER NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
        role    TEXT NOT NULL,
        content TEXT NOT NULL,
        tokens  INTEGER NOT NULL
    );
    CREATE INDEX messages_thread ON messages(thread, id);
    CREATE TABLE display_messages (
        id         INTEGER PRIMARY KEY,
        thread     INTEGER NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
        role       TEXT NOT NULL,
        content    TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX display_messages_thread ON display_messages(thread, id);
    CREATE TABLE specialists (
        user_id      TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        name         TEXT NOT NULL,
        instructions TEXT NOT NULL,
        updated_at   TEXT NOT NULL,
        PRIMARY KEY (user_id, name)
    ) WITHOUT ROWID;
    CREATE TABLE browser_credentials (
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        site       TEXT NOT NULL,
        secret     BLOB NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (user_id, site)
    ) WITHOUT ROWID;
    CREATE TABLE ledger (
        id                INTEGER PRIMARY KEY,
        user_id           TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        thread_key        TEXT,
        kind              TEXT NOT NULL,
        model             TEXT NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        credits           INTEGER NOT NULL,
        created_at        TEXT NOT NULL
    );
    CREATE INDEX ledger_user ON ledger(user_id, id);
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # 2: inbound messages already answered, so that a redelivery is never answered twice
    """
    CREATE TABLE inbound_seen (
        channel    TEXT NOT NULL,
        message_id TEXT NOT NULL,
        seen_at    TEXT NOT NULL,
        PRIMARY KEY (channel, message_id)
    ) WITHOUT ROWID;
    CREATE INDEX inbound_seen_at ON inbound_seen(seen_at);
    """,
    # 3: billing periods (monthly grants) and browser minutes in the ledger
    """
    ALTER TABLE users ADD COLUMN period TEXT NOT NULL DEFAULT '';
    UPDATE users SET period = substr(created_at, 1, 7);
    ALTER TABLE ledger ADD COLUMN minutes INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX threads_updated ON threads(updated_at);
    """,
    # 4: browser minutes an account held before they were in the ledger become an opening row
    """
    INSERT INTO ledger (user_id, thread_key, kind, model, prompt_tokens, completion_tokens,
                        credits, minutes, created_at)
    SELECT u.user_id, NULL, 'grant', '', 0, 0, 0,
           -(u.browser_minutes + COALESCE((SELECT sum(l.minutes) FROM ledger l
                                           WHERE l.user_id = u.user_id), 0)),
           u.created_at
    FROM users u
    WHERE u.browser_minutes + COALESCE((SELECT sum(l.minutes) FROM ledger l
                                        WHERE l.user_id = u.user_id), 0) != 0;
    """,
    # 5: one index less to update on every turn; retention scans threads by owner instead
    """
    DROP INDEX IF EXISTS threads_updated;
    """,
    # 6: a durable inbox (a channel message is committed before its platform hears "OK") and
    # outbox (a reply waits until its platform accepted it; delivered rows are deleted, failed
    # ones kept for the record); they replace inbound_seen.
    """
    CREATE TABLE inbox (
        id           INTEGER PRIMARY KEY,
        channel      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        conversation TEXT NOT NULL,
        state        TEXT NOT NULL,
        address      TEXT NOT NULL,
        max_chars    INTEGER NOT NULL,
        payload      BLOB,
        received_at  TEXT NOT NULL,
        UNIQUE (channel, message_id)
    );
    CREATE INDEX inbox_pending ON inbox(id) WHERE state = 'pending';
    CREATE INDEX inbox_received ON inbox(received_at);
    INSERT INTO inbox (channel, message_id, conversation, state, address, max_chars, payload,
                       received_at)
    SELECT channel, message_id, '', 'done', '{}', 0, NULL, seen_at FROM inbound_seen;
    DROP TABLE inbound_seen;
    CREATE TABLE outbox (
        id           INTEGER PRIMARY KEY,
        channel      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        conversation TEXT NOT NULL,
        address      TEXT NOT NULL,
        text         TEXT NOT NULL,
        max_chars    INTEGER NOT NULL,
        state        TEXT NOT NULL,
        chunks_sent  INTEGER NOT NULL DEFAULT 0,
        attempts     INTEGER NOT NULL DEFAULT 0,
        next_attempt REAL NOT NULL,
        created      REAL NOT NULL,
        last_error   TEXT,
        updated_at   TEXT NOT NULL,
        UNIQUE (channel, message_id)
    );
    """,
    # 7: dashboard sign-in: cookie sessions (only their hashes) and single-use login links
    """
    CREATE TABLE web_sessions (
        session_hash TEXT PRIMARY KEY,
        user_id      TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        csrf         TEXT NOT NULL,
        expires      REAL NOT NULL,
        created_at   TEXT NOT NULL
    );
    CREATE INDEX web_sessions_user ON web_sessions(user_id);
    CREATE TABLE login_links (
        code_hash  TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        expires    REAL NOT NULL,
        created_at TEXT NOT NULL
    );
    """,
    # 8: outbound webhooks: the endpoints (secrets sealed) and their durable outbox, written in
    # the transaction of the change an event reports; delivered and failed rows stay, for the
    # delivery log, until the inbox's pruning.
    """
    CREATE TABLE webhooks (
        id         TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        url        TEXT NOT NULL,
        events     TEXT NOT NULL,
        secret     BLOB NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX webhooks_user ON webhooks(user_id);
    CREATE TABLE webhook_deliveries (
        id           INTEGER PRIMARY KEY,
        message_id   TEXT NOT NULL,  -- random (96 bits): never looked up, not indexed
        webhook      TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
        user_id      TEXT NOT NULL,
        event        TEXT NOT NULL,
        body         TEXT NOT NULL,
        state        TEXT NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        last_status  INTEGER,
        next_attempt REAL NOT NULL,
        created      REAL NOT NULL,
        last_error   TEXT,
        taken_by     TEXT
    );
    CREATE INDEX webhook_deliveries_user ON webhook_deliveries(user_id, id);
    CREATE INDEX webhook_deliveries_pending ON webhook_deliveries(id) WHERE state = 'pending';
    """,
)
