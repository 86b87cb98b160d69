"""Whether a SQLite data folder is in use: every process with its store open holds a shared
``flock`` on ``cloudybot.lock`` beside the database, and ``cloudybot migrate`` takes it
exclusively while it copies. The kernel drops a lock when its process dies, so a gateway that
crashed never leaves the folder marked as in use (a pid file would)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gateway.base.files import FILE_MODE

LOCK_NAME = "cloudybot.lock"


class FolderLock:
    """A held lock of a data folder; :meth:`release` (or the process ending) gives it up."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops its flock
            self._fd = None


def try_lock(folder: Path, *, exclusive: bool) -> FolderLock | None:
    """Take ``folder``'s lock without waiting, shared (a store open on the folder) or
    exclusive (a migration copying it); None when it is held the other way."""
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return FolderLock(fd)
