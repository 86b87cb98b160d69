"""``cloudybot plugins enable|disable NAME``: set ``[plugins.NAME] enabled`` in the config file.

There is no TOML writer here, and rewriting the whole file would lose the operator's comments
and layout: the edit is one line (the ``enabled`` line of the table, or a new one under its
header, or a new table at the end), and the result must parse to the same document with only
that key changed, or nothing is written.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from pathlib import Path

from gateway.base.errors import ConfigError, GatewayError
from gateway.config.settings import ENABLED_KEY

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_KEY_PART = re.compile(r"\s*(?:\"((?:[^\"\\]|\\.)*)\"|'([^']*)'|([A-Za-z0-9_-]+))\s*")
_HEADER = re.compile(r"\s*\[(?!\[)(?P<keys>[^\]]*)\]\s*(?:#.*)?")
_TABLE_START = re.compile(r"\s*\[\[?[^\[\]]*\]\]?\s*(?:#.*)?")
_ENABLED_KEY = re.compile(rf"\s*(?:{ENABLED_KEY}|\"{ENABLED_KEY}\"|'{ENABLED_KEY}')\s*=")
_ENABLED_LINE = re.compile(
    rf"(?P<head>\s*(?:{ENABLED_KEY}|\"{ENABLED_KEY}\"|'{ENABLED_KEY}')\s*=\s*)"
    r"(?:true|false|\"[^\"\\]*\"|'[^']*')(?P<tail>\s*(?:#.*)?)")


class CannotEdit(GatewayError):
    """The file cannot be edited safely by this command; it is left as it was."""


def _header_keys(line: str) -> tuple[str, ...] | None:
    """The dotted keys of a ``[table]`` header line (``[plugins."a.b"]`` is plugins, a.b);
    None for any other line."""
    match = _HEADER.fullmatch(line)
    if match is None:
        return None
    keys, text, at = [], match.group("keys"), 0
    while True:
        part = _KEY_PART.match(text, at)
        if part is None:
            return None
        keys.append(next(group for group in part.groups() if group is not None))
        at = part.end()
        if at == len(text):
            return tuple(keys)
        if text[at] != ".":
            return None
        at += 1


def _toml_key(name: str) -> str:
    """``name`` as a TOML key: bare when it can be, else a basic string."""
    if _BARE_KEY.fullmatch(name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_enabled(text: str, name: str, enabled: bool) -> str | None:
    """``text`` (a TOML document) with ``[plugins.NAME] enabled`` set, everything else as it
    was; None when the file already says so (no table means enabled). Raises
    :class:`CannotEdit` when the table is written in a form this edit does not touch (an
    inline table, dotted keys) or the result would differ in any other way."""
    document = tomllib.loads(text)
    plugins = document.get("plugins", {})
    table = plugins.get(name) if isinstance(plugins, dict) else None
    current = table.get(ENABLED_KEY) if isinstance(table, dict) else None
    if current is enabled or (enabled and current is None):
        return None
    newline = "\r\n" if "\r\n" in text else "\n"
    value = "true" if enabled else "false"
    lines = text.splitlines(keepends=True)
    header = next((index for index, line in enumerate(lines)
                   if _header_keys(line.rstrip("\r\n")) == ("plugins", name)), None)
    if header is None:
        if table is not None:
            raise CannotEdit(f"[plugins.{name}] is not written as a [plugins.{name}] table "
                             "(an inline table or dotted keys)")
        separator = "" if not text or text.endswith("\n") else newline
        blank = newline if text.strip() else ""
        edited = (f"{text}{separator}{blank}[plugins.{_toml_key(name)}]{newline}"
                  f"{ENABLED_KEY} = {value}{newline}")
    else:
        end = next((index for index in range(header + 1, len(lines))
                    if _TABLE_START.fullmatch(lines[index].rstrip("\r\n"))), len(lines))
        found = next((index for index in range(header + 1, end)
                      if _ENABLED_KEY.match(lines[index])), None)
        if found is None:
            if not lines[header].endswith("\n"):
                lines[header] += newline
            lines.insert(header + 1, f"{ENABLED_KEY} = {value}{newline}")
        else:
            body = lines[found].rstrip("\r\n")
            match = _ENABLED_LINE.fullmatch(body)
            if match is None:
                raise CannotEdit(f"[plugins.{name}] {ENABLED_KEY} is not a one-line value")
            lines[found] = (f"{match.group('head')}{value}{match.group('tail')}"
                            f"{lines[found][len(body):]}")
        edited = "".join(lines)
    expected = copy.deepcopy(document)
    expected.setdefault("plugins", {}).setdefault(name, {})[ENABLED_KEY] = enabled
    try:
        if tomllib.loads(edited) == expected:
            return edited
    except tomllib.TOMLDecodeError:
        pass
    raise CannotEdit(f"the edit of [plugins.{name}] would change more than {ENABLED_KEY}")


def switch_plugin(path: Path, name: str, enabled: bool) -> bool:
    """Set ``[plugins.NAME] enabled`` in the config file at ``path`` (made if missing),
    replacing the file in one step with its permissions kept; False when it already said
    so. :class:`ConfigError` for a file that is not TOML, :class:`CannotEdit` for one this
    edit cannot change safely (with what to write by hand)."""
    target = path.resolve()
    try:
        text = target.read_bytes().decode("utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    try:
        edited = set_enabled(text, name, enabled)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except CannotEdit as exc:
        raise CannotEdit(f"cannot edit {path} safely: {exc.message}; write "
                         f"`{ENABLED_KEY} = {str(enabled).lower()}` in its "
                         f"[plugins.{_toml_key(name)}] table by hand") from None
    if edited is None:
        return False
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("w", encoding="utf-8", newline="") as handle:
            handle.write(edited)
        if target.exists():
            os.chmod(temporary, target.stat().st_mode & 0o7777)
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise GatewayError(f"cannot write {path}: {exc.strerror or exc}") from None
    return True
