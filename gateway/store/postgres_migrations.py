"""Append-only schema migrations for PostgreSQL. Never edit a shipped entry: add one at the end.

The first entry is the SQLite schema as it stands after all of its migrations (PostgreSQL
arrived later, so it has no history to replay). Columns keep SQLite's types in spirit:
timestamps are ISO-8601 UTC text, so that both stores order and compare them alike and a
migration copies them as they are.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: everything the SQLite store holds
    """
    CREATE TABLE users (
        user_id         TEXT PRIMARY KEY,
        plan            TEXT NOT NULL,
        credits         BIGINT NOT NULL,
        browser_minutes BIGINT NOT NULL,
        created_at      TEXT NOT NULL,
        period          TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE api_tokens (
        token_hash TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        created_at TEXT NOT NULL
    );
    CREATE INDEX api_tokens_user ON api_tokens(user_id);
    CREATE TABLE threads (
        id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        session_key     TEXT NOT NULL UNIQUE,
        user_id         TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        thread_id       TEXT NOT NULL,
        channel         TEXT NOT NULL,
        summary         TEXT NOT NULL DEFAULT '',
        summary_tokens  BIGINT NOT NULL DEFAULT 0,
        summary_version BIGINT NOT NULL DEFAULT 0,
        created_at      TEXT NOT NULL,
        updated_at      TEXT NOT NULL,
        UNIQUE (user_id, thread_id)
    );
    CREATE INDEX threads_user_updated ON threads(user_id, updated_at, id);
    CREATE TABLE pinned (
        thread     BIGINT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (thread, key)
    );
    CREATE TABLE messages (
        id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        thread  BIGINT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
        role    TEXT NOT NULL,
        content TEXT NOT NULL,
        tokens  BIGINT NOT NULL
    );
    CREATE INDEX messages_thread ON messages(thread, id);
    CREATE TABLE display_messages (
        id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        thread     BIGINT NOT NULL REFERENCES threads(id) ON DELETE CASCADE,
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
    );
    CREATE TABLE browser_credentials (
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        site       TEXT NOT NULL,
        secret     BYTEA NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (user_id, site)
    );
    CREATE TABLE ledger (
        id                BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        user_id           TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        thread_key        TEXT,
        kind              TEXT NOT NULL,
        model             TEXT NOT NULL,
        prompt_tokens     BIGINT NOT NULL,
        completion_tokens BIGINT NOT NULL,
        credits           BIGINT NOT NULL,
        minutes           BIGINT NOT NULL DEFAULT 0,
        created_at        TEXT NOT NULL
    );
    CREATE INDEX ledger_user ON ledger(user_id, id);
    CREATE TABLE inbox (
        id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        channel      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        conversation TEXT NOT NULL,
        state        TEXT NOT NULL,
        address      TEXT NOT NULL,
        max_chars    BIGINT NOT NULL,
        payload      BYTEA,
        received_at  TEXT NOT NULL,
        UNIQUE (channel, message_id)
    );
    CREATE INDEX inbox_pending ON inbox(id) WHERE state = 'pending';
    CREATE INDEX inbox_received ON inbox(received_at);
    CREATE TABLE outbox (
        id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        channel      TEXT NOT NULL,
        message_id   TEXT NOT NULL,
        conversation TEXT NOT NULL,
        address      TEXT NOT NULL,
        text         TEXT NOT NULL,
        max_chars    BIGINT NOT NULL,
        state        TEXT NOT NULL,
        chunks_sent  BIGINT NOT NULL DEFAULT 0,
        attempts     BIGINT NOT NULL DEFAULT 0,
        next_attempt DOUBLE PRECISION NOT NULL,
        created      DOUBLE PRECISION NOT NULL,
        last_error   TEXT,
        updated_at   TEXT NOT NULL,
        UNIQUE (channel, message_id)
    );
    CREATE TABLE web_sessions (
        session_hash TEXT PRIMARY KEY,
        user_id      TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        csrf         TEXT NOT NULL,
        expires      DOUBLE PRECISION NOT NULL,
        created_at   TEXT NOT NULL
    );
    CREATE INDEX web_sessions_user ON web_sessions(user_id);
    CREATE TABLE login_links (
        code_hash  TEXT PRIMARY KEY,
        user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
        expires    DOUBLE PRECISION NOT NULL,
        created_at TEXT NOT NULL
    );
    """,
)
