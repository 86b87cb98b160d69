"""The browser plugin's settings (``[plugins.browser]``, ``CLOUDYBOT_BROWSER_*``), and whether
the browser can run here at all."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from gateway import options, setting

DEFAULT_EXECUTABLE = Path("/usr/bin/chromium")
INSTALL_HINT = "pip install 'cloudybot[browser]'"


@dataclass(frozen=True)
class BrowserSettings:
    """How the agent's browser runs. (``CLOUDYBOT_BROWSER_VAULT`` is the core's: it decides
    what the prompt holds whatever plugins are loaded.)"""

    enabled: bool = setting(True, "offer the browser tool (when Playwright and Chromium are "
                            "installed)")
    executable: Path = setting(DEFAULT_EXECUTABLE, "the Chromium (or Chrome) executable "
                               "Playwright drives, headless; nothing is downloaded")
    allow_private: bool = setting(False, "let pages reach loopback, private, link-local and "
                                  "metadata addresses (refused by default: the gateway is a "
                                  "server)")
    max_contexts: int = setting(4, "browser sessions open at once in this process; past it the "
                                "tool tells the model to try later", parse=options.positive_int)
    idle_minutes: float = setting(5.0, "close a session's browser after this long unused",
                                  parse=options.positive_float)
    action_timeout_seconds: float = setting(15.0, "one browser action may take this long",
                                            parse=options.positive_float)
    read_max_chars: int = setting(6000, "most characters of page text one read returns",
                                  parse=options.positive_int)


def unavailable_reason(settings: BrowserSettings) -> str | None:
    """Why the browser cannot run here (Playwright not installed, no Chromium), or None."""
    try:
        importlib.import_module("playwright.async_api")
    except ImportError:
        return f"Playwright is not installed ({INSTALL_HINT})"
    executable = settings.executable
    if not (executable.is_file() and os.access(executable, os.X_OK)):
        return f"no Chromium at {executable} (apt-get install chromium)"
    return None
