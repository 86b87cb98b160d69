"""Where a command's data lives, said as an absolute path: ``./data`` is relative to the folder
a command runs in, so a command run from another folder would otherwise work on a new, empty
database without a word, and its token would fail on the running gateway."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

from gateway.config.settings import Settings

NEW_DATABASE = "cloudybot: warning: no database in "  # how the warning begins


def where(settings: Settings) -> str:
    """The data as the start-up line and ``users add`` name it: the data folder's absolute
    path, or the PostgreSQL database (never its password) and the folder of its secret key."""
    folder = settings.data_dir.resolve()
    if not settings.database_url:
        return str(folder)
    parts = urlsplit(settings.database_url)
    database = f"{parts.hostname or 'localhost'}{f':{parts.port}' if parts.port else ''}" \
               f"{parts.path or '/'}"
    return f"PostgreSQL {database}, secret key in {folder}"


def warn_if_new(settings: Settings) -> None:
    """One line on stderr when a command is about to create the SQLite database (its data
    folder holds none yet): the folder, and how to point at the one a gateway runs on."""
    if settings.database_url or settings.database_path.exists():
        return
    print(f"{NEW_DATABASE}{settings.data_dir.resolve()} yet: creating a "
          "new, empty one (a gateway started elsewhere keeps its own; point at its data folder "
          "with CLOUDYBOT_DATA_DIR or --config FILE)", file=sys.stderr, flush=True)
