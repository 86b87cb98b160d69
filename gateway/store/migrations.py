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
    # 9: a counter of API tokens that stopped working (revoked, replaced, their account
    # deleted: the trigger counts every way, cascades included), in the transaction that ends
    # them; a running gateway reads it before it trusts its token cache
    """
    CREATE TABLE access_revocations (
        id      INTEGER PRIMARY KEY CHECK (id = 1),
        revoked INTEGER NOT NULL
    );
    INSERT INTO access_revocations VALUES (1, 0);
    CREATE TRIGGER api_token_revoked AFTER DELETE ON api_tokens BEGIN
        UPDATE access_revocations SET revoked = revoked + 1;
    END;
    """,
    # 10: thread titles a user sets (NULL: the first message's, made when read) and full-text
    # indexes of the display transcript and of the titles (gateway.base.search_text: words are
    # runs of letters and digits, lower-cased, accents kept), kept in step by triggers, which
    # foreign-key cascades (a thread, an account deleted) fire too
    """
    ALTER TABLE threads ADD COLUMN title TEXT;
    CREATE VIRTUAL TABLE display_search USING fts5(
        content, content = 'display_messages', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 0');
    INSERT INTO display_search (display_search) VALUES ('rebuild');
    CREATE TRIGGER display_search_insert AFTER INSERT ON display_messages BEGIN
        INSERT INTO display_search (rowid, content) VALUES (new.id, new.content);
    END;
    CREATE TRIGGER display_search_delete AFTER DELETE ON display_messages BEGIN
        INSERT INTO display_search (display_search, rowid, content)
        VALUES ('delete', old.id, old.content);
    END;
    CREATE VIRTUAL TABLE title_search USING fts5(
        title, content = 'threads', content_rowid = 'id',
        tokenize = 'unicode61 remove_diacritics 0');
    CREATE TRIGGER title_search_update AFTER UPDATE OF title ON threads BEGIN
        INSERT INTO title_search (title_search, rowid, title)
        SELECT 'delete', old.id, old.title WHERE old.title IS NOT NULL;
        INSERT INTO title_search (rowid, title)
        SELECT new.id, new.title WHERE new.title IS NOT NULL;
    END;
    CREATE TRIGGER title_search_delete AFTER DELETE ON threads WHEN old.title IS NOT NULL BEGIN
        INSERT INTO title_search (title_search, rowid, title)
        VALUES ('delete', old.id, old.title);
    END;
    """,
    # 11: scheduled jobs (gateway.jobs): one row per job, claimed for a run with a lease
    # (lease_token until lease_until; wake_at is when the scheduler next looks at it: its due
    # time, or its lease's end), and the record of every run and miss, one per due time
    """
    ALTER TABLE users ADD COLUMN time_zone TEXT;
    CREATE TABLE jobs (
        id          TEXT PRIMARY KEY,
        user_id     TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        session_key TEXT NOT NULL,
        thread_id   TEXT NOT NULL,
        channel     TEXT NOT NULL,
        address     TEXT NOT NULL,
        max_chars   INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        spec        TEXT NOT NULL,
        time_zone   TEXT NOT NULL,
        action      TEXT NOT NULL,
        text        TEXT NOT NULL,
        misfire     TEXT NOT NULL,
        state       TEXT NOT NULL,
        next_run    REAL,
        wake_at     REAL,
        lease_token TEXT,
        lease_until REAL NOT NULL DEFAULT 0,
        claims      INTEGER NOT NULL DEFAULT 0,
        runs        INTEGER NOT NULL DEFAULT 0,
        misses      INTEGER NOT NULL DEFAULT 0,
        last_run    REAL,
        last_status TEXT,
        created_at  TEXT NOT NULL
    );
    CREATE INDEX jobs_user ON jobs(user_id, created_at);
    CREATE INDEX jobs_wake ON jobs(wake_at) WHERE state = 'active';
    CREATE TABLE job_runs (
        id     INTEGER PRIMARY KEY,
        job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        due    REAL NOT NULL,
        status TEXT NOT NULL,
        detail TEXT NOT NULL,
        at     REAL NOT NULL,
        UNIQUE (job_id, due)
    );
    """,
    # 12: the W3C trace context of a channel message's intake and of a reply's turn, kept
    # with their rows: a turn or a send taken up after a restart links to it
    # (gateway.observe; NULL with tracing off)
    """
    ALTER TABLE inbox ADD COLUMN trace TEXT;
    ALTER TABLE outbox ADD COLUMN trace TEXT;
    """,
    # 13: administration (gateway.accounts.admin) and budgets: admin and blocked accounts, a
    # daily credit cap of the account's own (NULL: its plan's), what it spent on its last
    # day of spending and when; the audit log, append-only (its triggers refuse any change);
    # the usage rollups of gateway.store.usage, filled from the ledger as it stands; and the
    # failed webhook deliveries by endpoint, for the health report
    """
    ALTER TABLE users ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE users ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE users ADD COLUMN daily_credits INTEGER;
    ALTER TABLE users ADD COLUMN spent_day TEXT NOT NULL DEFAULT '';
    ALTER TABLE users ADD COLUMN spent_today INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE users ADD COLUMN active_at TEXT;
    UPDATE users SET
        active_at = (SELECT max(l.created_at) FROM ledger l WHERE l.user_id = users.user_id
                     AND l.kind NOT IN ('grant', 'monthly_grant', 'plan_grant')),
        spent_day = strftime('%Y-%m-%d', 'now'),
        spent_today = (SELECT coalesce(sum(l.credits), 0) FROM ledger l
                       WHERE l.user_id = users.user_id AND l.credits > 0
                       AND l.created_at >= strftime('%Y-%m-%d', 'now'));
    CREATE TABLE audit_log (
        id      INTEGER PRIMARY KEY,
        at      TEXT NOT NULL,
        actor   TEXT NOT NULL,
        action  TEXT NOT NULL,
        target  TEXT,
        details TEXT NOT NULL,
        source  TEXT NOT NULL
    );
    CREATE INDEX audit_log_actor ON audit_log(actor, id);
    CREATE INDEX audit_log_action ON audit_log(action, id);
    CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END;
    CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN
        SELECT RAISE(ABORT, 'the audit log is append-only');
    END;
    CREATE TABLE usage_hours (
        dim               TEXT NOT NULL,
        hour              TEXT NOT NULL,
        value             TEXT NOT NULL,
        calls             INTEGER NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        credits           INTEGER NOT NULL,
        minutes           INTEGER NOT NULL,
        PRIMARY KEY (dim, hour, value)
    ) WITHOUT ROWID;
    CREATE TABLE usage_days (
        month             TEXT NOT NULL,
        user_id           TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        day               TEXT NOT NULL,
        calls             INTEGER NOT NULL,
        prompt_tokens     INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        credits           INTEGER NOT NULL,
        minutes           INTEGER NOT NULL,
        PRIMARY KEY (month, user_id, day)
    ) WITHOUT ROWID;
    CREATE INDEX usage_days_user ON usage_days(user_id);
    CREATE TEMP VIEW spent AS
        SELECT l.user_id, u.plan, l.model, coalesce(t.channel, '') AS channel,
               CASE WHEN l.kind = 'browser' THEN 'browser' ELSE '' END AS tool,
               l.created_at, l.model <> '' AS call, l.prompt_tokens, l.completion_tokens,
               l.credits, l.minutes
        FROM ledger l JOIN users u USING (user_id)
        LEFT JOIN threads t ON t.session_key = l.thread_key
        WHERE l.kind NOT IN ('grant', 'monthly_grant', 'plan_grant');
    INSERT INTO usage_hours
    SELECT 'plan', substr(created_at, 1, 13), plan, sum(call), sum(prompt_tokens),
           sum(completion_tokens), sum(credits), sum(minutes) FROM spent GROUP BY 2, 3
    UNION ALL
    SELECT 'model', substr(created_at, 1, 13), model, sum(call), sum(prompt_tokens),
           sum(completion_tokens), sum(credits), sum(minutes) FROM spent GROUP BY 2, 3
    UNION ALL
    SELECT 'channel', substr(created_at, 1, 13), channel, sum(call), sum(prompt_tokens),
           sum(completion_tokens), sum(credits), sum(minutes) FROM spent GROUP BY 2, 3
    UNION ALL
    SELECT 'tool', substr(created_at, 1, 13), tool, sum(call), sum(prompt_tokens),
           sum(completion_tokens), sum(credits), sum(minutes) FROM spent GROUP BY 2, 3;
    INSERT INTO usage_days
    SELECT substr(created_at, 1, 7), user_id, substr(created_at, 1, 10), sum(call),
           sum(prompt_tokens), sum(completion_tokens), sum(credits), sum(minutes)
    FROM spent GROUP BY user_id, substr(created_at, 1, 10);
    DROP VIEW spent;
    CREATE INDEX webhook_deliveries_failed ON webhook_deliveries(webhook) WHERE state = 'failed';
    """,
    # 14: display messages are indexed for search in batches, not one transaction at a time
    # (an FTS5 insert writes a segment per transaction: ~30-50 µs a turn, against ~2 µs in a
    # batch): a new message is queued in display_search_pending, and
    # SQLiteStore.index_search moves the queue into display_search before a search and
    # whenever it grows; a message deleted while queued only leaves the queue (an FTS5
    # 'delete' of a row it never indexed would corrupt it)
    """
    CREATE TABLE display_search_pending (id INTEGER PRIMARY KEY);
    DROP TRIGGER display_search_insert;
    DROP TRIGGER display_search_delete;
    CREATE TRIGGER display_search_insert AFTER INSERT ON display_messages BEGIN
        INSERT INTO display_search_pending (id) VALUES (new.id);
    END;
    CREATE TRIGGER display_search_delete AFTER DELETE ON display_messages BEGIN
        INSERT INTO display_search (display_search, rowid, content)
        SELECT 'delete', old.id, old.content
        WHERE NOT EXISTS (SELECT 1 FROM display_search_pending WHERE id = old.id);
        DELETE FROM display_search_pending WHERE id = old.id;
    END;
    """,
    # 15: the usage rollups are folded from the ledger in batches (gateway.store.sqlite_rollups),
    # no longer in each booking's transaction: a ledger row of usage names what they group by
    # (the account's plan when booked, the thread's channel, the tool; plan NULL: not usage,
    # or booked before, and folded then); usage_folded holds the newest ledger id folded
    """
    ALTER TABLE ledger ADD COLUMN plan TEXT;
    ALTER TABLE ledger ADD COLUMN channel TEXT;
    ALTER TABLE ledger ADD COLUMN tool TEXT;
    CREATE TABLE usage_folded (through INTEGER NOT NULL);
    INSERT INTO usage_folded SELECT coalesce(max(id), 0) FROM ledger;
    """,
    # 16: what is indexed for search is every display message up to a watermark
    # (display_search_indexed.through), not a queue a trigger fills: a turn's commit no longer
    # runs a trigger per message. SQLiteStore.index_search indexes the messages past it. A
    # deleted message leaves the index only if it was at or under it (an FTS5 'delete' of a
    # row it never indexed would corrupt it); deleting the newest messages lowers the watermark
    # to the newest one left, since SQLite gives their ids to the next messages. The watermark
    # never passes the newest id, so only a deleted newest message can be at or over it.
    """
    INSERT INTO display_search (rowid, content)
        SELECT d.id, d.content FROM display_search_pending p JOIN display_messages d USING (id);
    DROP TRIGGER display_search_insert;
    DROP TRIGGER display_search_delete;
    DROP TABLE display_search_pending;
    CREATE TABLE display_search_indexed (through INTEGER NOT NULL);
    INSERT INTO display_search_indexed SELECT coalesce(max(id), 0) FROM display_messages;
    CREATE TRIGGER display_search_delete AFTER DELETE ON display_messages BEGIN
        INSERT INTO display_search (display_search, rowid, content)
            SELECT 'delete', old.id, old.content FROM display_search_indexed
            WHERE old.id <= through;
        UPDATE display_search_indexed
            SET through = min(through, (SELECT coalesce(max(id), 0) FROM display_messages))
            WHERE old.id >= through;
    END;
    """,
)
