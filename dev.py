#!/usr/bin/env python3
"""Self-installing entry point: needs only Python 3.11+ on the machine.

    python3 dev.py serve [cloudybot serve options]   # install into .venv, run the gateway
    python3 dev.py test  [pytest options]            # install with test extras, ruff, mypy,
                                                     # pytest on SQLite, then again on
                                                     # PostgreSQL, the example plugins' tests
                                                     # and a quick benchmark run (reports only)
    python3 dev.py screenshot                        # docs/dashboard.png, the README's picture

The dashboard's browser tests need Chromium at /usr/bin/chromium, the completion tests zsh and
fish: ``test`` installs those Debian packages when they are missing and this runs as root (as
CI does); otherwise those tests skip, saying so.

The second pytest run sets ``CLOUDYBOT_TEST_BACKEND=postgresql``: every test of a gateway runs
again with its store on the machine's PostgreSQL (``CLOUDYBOT_TEST_DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/postgres``), in a database made for the run and dropped
after; the tests that never open a store are not run twice. Where no PostgreSQL answers, those
tests skip saying so (under ``CI=true`` they fail instead).

The virtual environment lives in ``.venv`` and is reinstalled only when ``pyproject.toml``
changes (a stamp file records the hash it was installed from).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"


def _install(extras: str) -> None:
    """Create .venv and install the project (editable) unless already current."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = VENV / f".installed-{extras or 'base'}-{digest}"
    if stamp.exists() or (not extras and (VENV / f".installed-test-{digest}").exists()):
        return  # (the test extras hold everything the base install does)
    if not PYTHON.exists():
        print("dev.py: creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    target = f".[{extras}]" if extras else "."
    print(f"dev.py: installing {target} into .venv", flush=True)
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-e", target],
        cwd=ROOT, check=True,
    )
    for old in VENV.glob(f".installed-{extras or 'base'}-*"):
        old.unlink()
    stamp.touch()


def _install_example(folder: Path) -> None:
    """Install an example plugin package (editable) unless already current."""
    digest = hashlib.sha256((folder / "pyproject.toml").read_bytes()).hexdigest()[:16]
    stamp = VENV / f".example-{folder.name}-{digest}"
    if stamp.exists():
        return
    print(f"dev.py: installing example {folder.name}", flush=True)
    subprocess.run([str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-e", str(folder)], cwd=ROOT, check=True)
    stamp.touch()


# Debian packages some tests need, by the program each installs: Chromium for the browser and
# dashboard tests, zsh and fish for the shell-completion tests.
TEST_PACKAGES = {"chromium": Path("/usr/bin/chromium"), "zsh": Path("/usr/bin/zsh"),
                 "fish": Path("/usr/bin/fish")}


def _ensure_test_packages() -> None:
    """Install the Debian packages the tests need that are missing, when we may (as root with
    apt-get, as CI runs); otherwise their tests skip, saying so."""
    missing = [name for name, program in TEST_PACKAGES.items() if not program.exists()]
    if not missing or not hasattr(os, "geteuid") or os.geteuid() != 0 \
            or not Path("/usr/bin/apt-get").exists():
        return
    print(f"dev.py: installing Debian's {', '.join(missing)} for the tests", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def _run(argv: list[str]) -> int:
    return _run_in(ROOT, argv)


def _run_in(folder: Path, argv: list[str], env: dict[str, str] | None = None) -> int:
    return subprocess.run(argv, cwd=folder, env={**os.environ, **(env or {})}).returncode


# pytest options that choose which tests run, and options that take a value (a value is not a
# test path).
_SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise",
              "--ignore", "--ignore-glob")
_WITH_VALUE = {"-k", "-m", "-p", "-o", "-c", "-W", "--deselect", "--ignore", "--ignore-glob",
               "--rootdir", "--basetemp", "--junitxml", "--maxfail", "--durations", "--tb"}


def _selects_tests(args: list[str]) -> bool:
    """Whether pytest ``args`` run only some of the tests (paths, node ids, -k, -m, ...)
    rather than options such as ``-q`` or ``-x`` over the whole suite."""
    value_next = False
    for arg in args:
        if value_next:
            value_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in _SELECTING or (arg[:2] in ("-k", "-m") and len(arg) > 2):
            return True
        if arg in _WITH_VALUE:
            value_next = True
        elif not arg.startswith("-"):
            return True  # a path or a node id
    return False


def main(args: list[str]) -> int:
    if sys.version_info < (3, 11):
        print("dev.py: Python 3.11 or newer is required", file=sys.stderr)
        return 2
    command, rest = (args[0], args[1:]) if args else ("", [])
    if command == "serve":
        _install("")
        # The gateway takes this very process: signals (SIGTERM from a supervisor or a
        # container runtime) reach it, not a parent that would leave it running.
        os.execv(BIN / "cloudybot", ["cloudybot", "serve", *rest])
    if command == "screenshot":
        _install("test")
        _ensure_test_packages()
        return _run([str(PYTHON), str(ROOT / "docs" / "screenshot.py"), *rest])
    if command == "test":
        _install("test")
        _ensure_test_packages()
        examples = sorted(p.parent for p in (ROOT / "examples").glob("*/pyproject.toml"))
        for example in examples:
            _install_example(example)
        lint = _run([str(BIN / "ruff"), "check", "gateway", "channels", "plugins", "tests",
                     "examples", "bench"])
        types = _run([str(BIN / "mypy"), "gateway", "channels", "plugins"])
        tests = _run([str(PYTHON), "-m", "pytest", *rest])
        print("dev.py: the suite again, its stores on PostgreSQL", flush=True)
        on_postgres = _run_in(ROOT, [str(PYTHON), "-m", "pytest", *rest],
                              {"CLOUDYBOT_TEST_BACKEND": "postgresql"})
        everything = not _selects_tests(rest)
        if not everything:
            print("dev.py: only some tests were asked for: the example plugins' suites and the "
                  "quick benchmark are skipped (python3 dev.py test runs everything)",
                  flush=True)
        # Third-party plugins' own suites, run the way their authors would.
        example_tests = [_run_in(example, [str(PYTHON), "-m", "pytest", "-q"])
                         for example in examples] if everything else []
        # The benchmark's smoke run: it reports figures and fails only if it cannot run.
        bench = _run([str(PYTHON), "-m", "bench", "--quick"]) if everything else 0
        return (lint or types or tests or on_postgres
                or next((rc for rc in example_tests if rc), 0) or bench)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
