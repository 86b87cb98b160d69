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
# The end of the first wave (issue 33's reference): the turn path before the durable inbox,
# redaction and credit holds, whose cost the second wave's features are to be set against.
FIRST_WAVE = "b72cbfa"
SOURCES = ("gateway", "channels", "plugins")
# How the reference's CLI runs: as ``python -m gateway.cli``, but loading only the built-in
# plugins (the ``cloudybot`` distribution's entry points). A third-party plugin installed for
# today's gateway (the example channel) is written against today's kit and may not load in an
# older gateway; the reference is measured as it shipped.
BUILT_INS_ONLY = (
    "import importlib.metadata as m, runpy\n"
    "every = m.entry_points\n"
    "def built_in(**select):\n"
    "    found = every(**select)\n"
    "    if select.get('group') != 'cloudybot':\n"
    "        return found\n"
    "    return m.EntryPoints(e for e in found if e.dist is None or e.dist.name == 'cloudybot')\n"
    "m.entry_points = built_in\n"
    "runpy.run_module('gateway.cli', run_name='__main__', alter_sys=True)\n")


def cli(source: Path | None) -> list[str]:
    """The arguments that run the ``cloudybot`` CLI with ``python``: today's, or the reference
    in ``source`` (run there, with only its built-in plugins)."""
    return ["-m", "gateway.cli"] if source is None else ["-c", BUILT_INS_ONLY]


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
