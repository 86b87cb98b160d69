"""The machine's PostgreSQL for the tests: a fresh database per run (dropped after), and a fresh
schema per test inside it.

``CLOUDYBOT_TEST_DATABASE_URL`` names the server (default: this project's machines'
``postgresql://postgres@127.0.0.1:5432/postgres``). Where none answers, the tests that need it
skip with one line saying so, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.testing.postgres import DEFAULT_SERVER, admin, new_database_name, with_database


def _admin_now(url: str, statement: str) -> None:
    """:func:`~gateway.testing.postgres.admin` from sync code, even inside a running loop."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, admin(url, statement)).result()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database made for this test run on the machine's PostgreSQL; its URL."""
    server = os.environ.get("CLOUDYBOT_TEST_DATABASE_URL", DEFAULT_SERVER)
    name = new_database_name(f"cloudybot_test_{os.getpid()}")
    try:
        _admin_now(server, f'CREATE DATABASE "{name}"')
    except Exception as exc:  # any failure to reach it: skip, or fail in CI
        message = f"no PostgreSQL reachable at {server} ({type(exc).__name__}: {exc})"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI=true requires it")
        pytest.skip(message + "; PostgreSQL tests skipped")
    try:
        yield with_database(server, name)
    finally:
        _admin_now(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def postgres_url(postgres_database: str) -> Iterator[str]:
    """A URL whose connections see only a schema of this test's own (dropped after)."""
    schema = f"t_{secrets.token_hex(6)}"
    _admin_now(postgres_database, f"CREATE SCHEMA {schema}")
    try:
        yield f"{postgres_database}?search_path={schema}"
    finally:
        # What the test left connected (a gateway it never stopped, a killed child's backend
        # not yet gone) would hold locks the DROP waits for: end it first.
        _admin_now(postgres_database,
                   "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                   " WHERE datname = current_database() AND pid <> pg_backend_pid();"
                   f" DROP SCHEMA {schema} CASCADE")
