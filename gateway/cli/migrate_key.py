"""The secret key ``cloudybot migrate`` carries: what the SQLite deployment sealed (saved logins,
webhook secrets, channel messages waiting in the inbox) must open on PostgreSQL too, where the
rows arrive as they are, sealed.

The key stays out of the database (a key kept beside what it seals protects nothing): the
PostgreSQL deployment reads it as the SQLite one did, from ``CLOUDYBOT_SECRET_KEY`` or from
``secret.key`` in its data folder. The configuration ``migrate`` runs with (``--config``, the
environment) names that deployment's key: set, it is used; else its data folder's key file;
else the SQLite folder's ``secret.key`` is copied there once the rows are in. Before any row
is copied, the key is tried on one sealed row of each kind: one it does not open stops the
migration, saying which key would.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from gateway.accounts.secrets import KEY_FILE_NAME, SecretBox, derived_key, read_key
from gateway.base.errors import GatewayError
from gateway.base.files import FILE_MODE, private_dir
from gateway.kit.inbound import SEALED_AS
from gateway.webhooks.dispatcher import seal_context

# One sealed row of each kind, with what it was sealed for.
SAMPLES = (
    ("saved login", "SELECT secret, user_id FROM browser_credentials LIMIT 1", lambda u: u),
    ("webhook secret", "SELECT secret, user_id FROM webhooks LIMIT 1", seal_context),
    ("inbox message", "SELECT payload, '' FROM inbox WHERE payload IS NOT NULL LIMIT 1",
     lambda _: SEALED_AS),
)


@dataclass(frozen=True)
class TargetKey:
    """The key the PostgreSQL deployment will open secrets with, and where it comes from."""

    key: bytes | None  # None: there is none yet (a new one would be made at its first start)
    named: str  # how the messages name it
    copy: tuple[Path, Path] | None = None  # the SQLite folder's key file, and where it goes


def target_key(source: Path, configured: str, data_dir: Path) -> TargetKey:
    """The PostgreSQL deployment's key: ``configured`` (its ``CLOUDYBOT_SECRET_KEY``), else
    the key file in its ``data_dir``, else the SQLite folder's key file, to be copied there."""
    theirs, ours = data_dir / KEY_FILE_NAME, source / KEY_FILE_NAME
    if configured:
        return TargetKey(derived_key(configured), "CLOUDYBOT_SECRET_KEY")
    if theirs.is_file():
        return TargetKey(read_key(theirs), str(theirs.resolve()))
    if ours.is_file():
        return TargetKey(read_key(ours), str(ours.resolve()), (ours, theirs))
    return TargetKey(None, f"a new key (there is no {ours.resolve()})")


def check_key(target: TargetKey, source: Path, rows: sqlite3.Connection) -> None:
    """Refuse (before anything is copied) when ``target``'s key does not open what the SQLite
    deployment sealed, saying which key would."""
    box = SecretBox(target.key) if target.key is not None else None
    for kind, query, context in SAMPLES:
        row = rows.execute(query).fetchone()
        if row is None or (box is not None and box.open(bytes(row[0]), context(row[1]))):
            continue
        ours = source / KEY_FILE_NAME
        if ours.is_file():
            how = (f"its key is {ours.resolve()}: unset CLOUDYBOT_SECRET_KEY and remove any "
                   "secret.key from the PostgreSQL deployment's data folder, and migrate copies "
                   "it there")
        else:
            how = ("it was sealed with the CLOUDYBOT_SECRET_KEY the SQLite deployment ran "
                   "with: set the same for migrate and for the PostgreSQL gateways")
        raise GatewayError(f"a {kind} of {source} does not open with {target.named}, the key "
                           f"the PostgreSQL deployment would use; {how}. Nothing was copied")


def carry_key(target: TargetKey) -> str | None:
    """Copy the SQLite folder's key file into the PostgreSQL deployment's data folder (mode
    0600, never over a file there); what was done, or None when nothing needed doing."""
    if target.copy is None:
        return None
    ours, theirs = target.copy
    private_dir(theirs.parent)
    fd = os.open(theirs, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(ours.read_bytes())
    return (f"copied the secret key {ours.resolve()} to {theirs.resolve()}: start the "
            "PostgreSQL gateways with that data folder")
