"""The gateway as it was at an earlier commit, run side by side with today's (``--against``).

CPU per turn in µs depends on the machine: the same commit measured 1,000 µs at x8 on one of
this project's VMs and 2,200 µs on another. A ratio to an earlier gateway, measured in the same
interleaved rounds on the same cores, does not: it is how the headline's goals are judged.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

# The turn path before the work of issue 17 (whose goals are cuts from this commit's cost):
# the access log on, aiohttp's client to the provider, every write on the worker thread.
REFERENCE = "ef8cc5c"
SOURCES = ("gateway", "channels", "plugins")


def extract(revision: str, into: Path) -> Path | None:
    """The ``gateway``, ``channels`` and ``plugins`` packages of ``revision``, written under
    ``into`` (run with it first on ``sys.path``); None, said on stderr, when this is not a git
    checkout that has the commit."""
    root = Path(__file__).resolve().parent.parent
    try:
        archive = subprocess.run(["git", "archive", "--format=tar", revision, *SOURCES],
                                 cwd=root, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", b"") or str(exc).encode()
        print(f"bench: no reference gateway at {revision}: "
              f"{detail.decode(errors='replace').strip()}", file=sys.stderr)
        return None
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into
