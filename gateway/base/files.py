"""Files at rest: the gateway's directories are 0700, its data files (and the exports it
writes) 0600.

Modes are set explicitly, not left to the umask, and tightened on every start, so a data dir
made by an older version (0755 directories, a 0644 database) is fixed without a migration.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except FileNotFoundError:
        pass
    except OSError as exc:  # not ours (a shared mount): say so, keep running
        log.warning("cannot set mode %o on %s: %s", mode, path, exc.strerror or exc)


def private_dir(path: Path) -> Path:
    """Make ``path`` (and any missing parent) a directory of mode 0700; return it."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)
    _tighten(path, DIR_MODE)
    return path


def private_file(path: Path, *, create: bool = False) -> None:
    """Give ``path`` mode 0600 if it exists (or create it empty when ``create``)."""
    if create:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
    _tighten(path, FILE_MODE)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` as the whole of ``path``, a file of mode 0600: a new file is created
    with that mode, an existing one gets it before it is emptied, so no other user can ever
    read a byte of ``data`` (whatever the umask)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    with open(fd, "wb") as file:
        os.fchmod(fd, FILE_MODE)
        file.truncate()
        file.write(data)
