"""The documentation against the code: README.md and docs/*.md must say what the code does.

Each test fails when the docs drift: a setting, command, hook, route, package or page the code
has and the docs lack (or the other way round), a wrong signature or default, a broken link.
What is compared is always read from the code (the settings' declarations, the argument
parser, the hook specifications, the API's operations, the package tree), never written here.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest

from gateway import hookspecs
from gateway.api.operations import OPERATIONS
from gateway.cli.main import build_parser
from gateway.config.options import Declared, declared
from gateway.config.settings import OPTIONS
from gateway.plugins.manager import ENTRY_POINT_GROUP, declared_settings, make_plugin_manager

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
GATEWAY = ROOT / "gateway"


# --- reading Markdown ---------------------------------------------------------------------------
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """``text`` with its fenced code blocks blanked (a ``#`` comment in one is not a heading);
    lines and offsets stay where they were."""
    return FENCE.sub(lambda match: re.sub(r"[^\n]", " ", match.group(0)), text)


def sections(text: str, level: int) -> dict[str, str]:
    """Each heading of ``level`` (2: ``##``) and the text up to the next heading of that level
    or above."""
    found: dict[str, str] = {}
    headings = [m for m in HEADING.finditer(prose(text)) if len(m.group(1)) <= level]
    for index, match in enumerate(headings):
        if len(match.group(1)) != level:
            continue
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        found[match.group(2)] = text[match.end():end]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text in lower case, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets ``-1``, ``-2`` ...)."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(prose(path.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a pipe inside a cell)."""
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [part.strip().replace("\\|", "|") for part in parts]


def table_rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of every table row of ``text`` that is not a header or a rule."""
    lines = prose(text).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("|") or set(line.strip()) <= set("|-: "):
            continue
        following = lines[number] if number < len(lines) else ""
        if following.strip().startswith("|") and set(following.strip()) <= set("|-: "):
            continue  # the header row
        yield number, cells(line)


def code_spans(text: str) -> list[str]:
    """The contents of the inline code spans of ``text``."""
    return [match.group(2).strip() for match in INLINE_CODE.finditer(text)]


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- settings -----------------------------------------------------------------------------------
CONFIGURATION = DOCS / "configuration.md"
SECTION_HEADING = re.compile(r"^#{2,6}\s+`?\[([a-z0-9_.]+)\]`?\s*$")


def built_in_plugin_settings() -> list[Declared]:
    """The settings of the plugins that ship with the gateway (the ``cloudybot``
    distribution's entry points), as ``declared_settings`` finds them; an installed
    third-party plugin (the example) documents its own."""
    pm = make_plugin_manager(load_entry_points=False)
    for entry_point in distribution("cloudybot").entry_points.select(group=ENTRY_POINT_GROUP):
        pm.register(entry_point.load(), name=entry_point.name)
    return [item for group in declared_settings(pm)
            for item in declared(group.schema, group.name)]


SETTINGS = [*OPTIONS, *built_in_plugin_settings()]


@dataclass(frozen=True)
class SettingRow:
    """One row of a settings table of docs/configuration.md."""

    line: int
    section: str
    key: str
    variables: tuple[str, ...]
    default: str


def setting_rows() -> list[SettingRow]:
    """The rows of the tables under a ``[section]`` heading of docs/configuration.md."""
    rows = []
    section = ""
    lines = prose(read(CONFIGURATION)).splitlines()
    rows_by_line = dict(table_rows(read(CONFIGURATION)))
    for number, line in enumerate(lines, 1):
        heading = SECTION_HEADING.match(line)
        if heading:
            section = heading.group(1)
        elif HEADING.match(line):
            section = ""  # a heading that names no TOML table ends the settings
        elif number in rows_by_line and section:
            row = rows_by_line[number]
            assert len(row) == 4, f"configuration.md:{number}: key | variable | default | meaning"
            key = code_spans(row[0])
            assert len(key) == 1, f"configuration.md:{number}: one `key` in the first cell"
            rows.append(SettingRow(number, section, key[0], tuple(code_spans(row[1])), row[2]))
    return rows


def documented_setting(item: Declared) -> SettingRow:
    found = [row for row in setting_rows() if (row.section, row.key) == (item.section, item.key)]
    assert found, (f"docs/configuration.md has no row for [{item.section}] {item.key} "
                   f"({item.variable}) under a `[{item.section}]` heading")
    assert len(found) == 1, f"[{item.section}] {item.key} has {len(found)} rows"
    return found[0]


def setting_id(item: Declared) -> str:
    return f"{item.section}.{item.key}"


def test_settings_are_found() -> None:
    sections = {item.section for item in SETTINGS}
    assert {"storage", "llm", "plugins.openai", "plugins.telegram"} <= sections
    assert len(setting_rows()) >= len(SETTINGS) > 40


@pytest.mark.parametrize("item", SETTINGS, ids=setting_id)
def test_every_setting_is_in_the_configuration_page(item: Declared) -> None:
    row = documented_setting(item)
    assert set(row.variables) == set(item.env), (
        f"configuration.md:{row.line}: [{item.section}] {item.key} is read from "
        f"{', '.join(item.env)}, the page says {', '.join(row.variables) or 'nothing'}")


@pytest.mark.parametrize("item", SETTINGS, ids=setting_id)
def test_documented_defaults_are_the_codes(item: Declared) -> None:
    row = documented_setting(item)
    where = f"configuration.md:{row.line}: [{item.section}] {item.key}"
    if item.default in ("", ()):
        assert row.default.startswith("empty"), f"{where}: the default is empty"
        return
    shown = code_spans(row.default)
    assert shown, f"{where}: the default cell holds no `value`"
    assert item.parse(shown[0]) == item.default, (
        f"{where}: the page says {shown[0]!r}, the code's default is {item.default!r}")


def test_every_documented_setting_exists() -> None:
    known = {(item.section, item.key) for item in SETTINGS}
    unknown = [f"configuration.md:{row.line}: [{row.section}] {row.key}"
               for row in setting_rows() if (row.section, row.key) not in known]
    assert not unknown, "rows that name no setting: " + "; ".join(unknown)


# --- the CLI ------------------------------------------------------------------------------------
CLI = DOCS / "cli.md"
COMMON_OPTIONS = {"--config", "-h", "--help"}  # every command's, documented once


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser,
             path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command that runs (``users add``, ``plans``), with its parser."""
    children = subcommands(parser)
    if not children:
        return {path: parser}
    found = {}
    for name, child in children.items():
        found.update(commands(child, (*path, name)))
    return found


PARSER = build_parser()
COMMANDS = commands(PARSER)


@dataclass(frozen=True)
class CommandRow:
    """One documented command line of docs/cli.md: the command it names and the rest."""

    line: int
    usage: str
    path: tuple[str, ...]
    rest: tuple[str, ...]


def command_rows() -> list[CommandRow]:
    """Each table row of docs/cli.md whose first cell is a ``cloudybot ...`` command line."""
    rows = []
    for number, row in table_rows(read(CLI)):
        spans = code_spans(row[0])
        if not spans or not spans[0].startswith("cloudybot "):
            continue
        words = spans[0].split()[1:]
        parser, path = PARSER, ()
        while subcommands(parser) and words and words[0] in subcommands(parser):
            parser = subcommands(parser)[words[0]]
            path, words = (*path, words[0]), words[1:]
        if subcommands(parser):  # it stopped before a command that runs
            path = (*path, *words[:1], "?")
        rows.append(CommandRow(number, spans[0], path, tuple(words)))
    return rows


def documented_command(path: tuple[str, ...]) -> CommandRow:
    found = [row for row in command_rows() if row.path == path]
    assert found, f"docs/cli.md has no row for `cloudybot {' '.join(path)}`"
    assert len(found) == 1, f"`cloudybot {' '.join(path)}` has {len(found)} rows"
    return found[0]


def command_id(path: tuple[str, ...]) -> str:
    return " ".join(path)


def test_commands_are_found() -> None:
    assert {("serve",), ("users", "add"), ("sessions", "rotate")} <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=command_id)
def test_every_command_is_in_the_cli_page(path: tuple[str, ...]) -> None:
    documented_command(path)


def test_every_documented_command_exists() -> None:
    unknown = [f"cli.md:{row.line}: {row.usage}" for row in command_rows()
               if row.path not in COMMANDS]
    assert not unknown, "commands the parser does not have: " + "; ".join(unknown)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=command_id)
def test_documented_arguments_are_the_parsers(path: tuple[str, ...]) -> None:
    """The row names each option of its command and as many arguments as it takes."""
    row = documented_command(path)
    parser = COMMANDS[path]
    where = f"cli.md:{row.line}: `{row.usage}`"
    options = {flag: action for action in parser._actions for flag in action.option_strings}
    words = " ".join(row.rest)
    for action in parser._actions:
        flags = [flag for flag in action.option_strings if flag not in COMMON_OPTIONS]
        if flags:
            assert any(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", words)
                       for flag in flags), f"{where} does not mention {' / '.join(flags)}"
    mentioned = re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", words)
    for flag in mentioned:
        assert flag in options, f"{where}: {flag} is not an option of the command"
    # Outside [optional parts], the words left are the positional arguments, in order.
    words_left = re.sub(r"\[[^\]]*\]", " ", words).split()
    positional: list[str] = []
    skip = False
    for word in words_left:
        if skip:
            skip = False
        elif word in options:
            skip = options[word].nargs != 0
        else:
            positional.append(word)
    wanted = [action for action in parser._actions
              if not action.option_strings and not isinstance(action, argparse._SubParsersAction)]
    assert len(positional) == len(wanted), (
        f"{where}: {len(positional)} argument(s) shown, the command takes "
        f"{', '.join(action.dest for action in wanted) or 'none'}")
    for word, action in zip(positional, wanted, strict=True):
        if action.choices:
            assert set(word.split("|")) <= set(action.choices), (  # bash|zsh|fish: each
                f"{where}: {word} is not one of {action.choices}")
        else:
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*", word), (
                f"{where}: {word!r} should be a placeholder such as {action.dest.upper()}")


def test_top_level_options_are_in_the_cli_page() -> None:
    text = read(CLI)
    for action in PARSER._actions:
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                assert f"{flag}" in text, f"docs/cli.md does not mention `cloudybot {flag}`"


# --- hooks --------------------------------------------------------------------------------------
HOOKS = DOCS / "hooks.md"
SPECS: dict[str, Callable[..., Any]] = {
    name: value for name, value in vars(hookspecs).items()
    if callable(value) and hasattr(value, f"{hookspecs.PROJECT}_spec")}


def hook_sections() -> dict[str, str]:
    return {title.strip("`"): body for title, body in sections(read(HOOKS), 2).items()}


def normalized(written: Any) -> str:
    """A hookspec's annotation (text, under ``from __future__ import annotations``) as
    ``ast.unparse`` spells it; "" for none."""
    if written is inspect.Parameter.empty:
        return ""
    return ast.unparse(ast.parse(str(written), mode="eval").body)


def annotation(node: ast.expr | None) -> str:
    return "" if node is None else ast.unparse(node)


def test_hooks_are_found() -> None:
    assert {"plugin_settings", "register_channels", "reply_sent"} <= set(SPECS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_hook_has_a_section_with_its_signature(name: str) -> None:
    body = hook_sections().get(name)
    assert body is not None, f"docs/hooks.md has no `## {name}` section"
    defs = [node for node in ast.walk(ast.parse("\n".join(
        block for block in re.findall(r"```python\n(.*?)```", body, re.S))))
        if isinstance(node, ast.FunctionDef) and node.name == name]
    assert len(defs) == 1, f"docs/hooks.md `## {name}`: one ```python block with `def {name}(...)`"
    shown = defs[0]
    spec = inspect.signature(SPECS[name])
    names = [arg.arg for arg in shown.args.args]
    assert names == list(spec.parameters), (
        f"docs/hooks.md shows {name}({', '.join(names)}), the hookspec is "
        f"{name}({', '.join(spec.parameters)})")
    for arg, parameter in zip(shown.args.args, spec.parameters.values(), strict=True):
        assert annotation(arg.annotation) == normalized(parameter.annotation), (
            f"docs/hooks.md: {name}'s {arg.arg} is {parameter.annotation} in the hookspec")
    assert annotation(shown.returns) == normalized(spec.return_annotation), (
        f"docs/hooks.md: {name} returns {spec.return_annotation} in the hookspec")


def test_every_hook_section_is_a_hook() -> None:
    unknown = sorted(set(hook_sections()) - set(SPECS))
    assert not unknown, f"docs/hooks.md documents hooks that do not exist: {unknown}"


# --- the HTTP API -------------------------------------------------------------------------------
API_PAGES = (DOCS / "http-api.md", DOCS / "dashboard.md")
ROUTE = re.compile(r"^((?:GET|POST|PUT|PATCH|DELETE)(?:/(?:GET|POST|PUT|PATCH|DELETE))*) (/\S*)$")
OWNED = ("/api/", "/v1/", "/chat", "/auth/")  # what OPERATIONS declare (channels add the rest)


def route_key(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path.split("?")[0])


def documented_routes() -> dict[tuple[str, str], str]:
    """(method, path) of the first cell of every route table row of the API pages."""
    found = {}
    for page in API_PAGES:
        for number, row in table_rows(read(page)):
            for span in code_spans(row[0]):
                match = ROUTE.match(span)
                if match:
                    for method in match.group(1).split("/"):
                        found[method, route_key(match.group(2))] = f"{page.name}:{number}"
    return found


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_every_route_is_documented(operation: Any) -> None:
    assert (operation.method, route_key(operation.path)) in documented_routes(), (
        f"neither docs/http-api.md nor docs/dashboard.md has a row for "
        f"`{operation.method} {operation.path}`")


def test_every_documented_route_exists() -> None:
    declared_routes = {(op.method, route_key(op.path)) for op in OPERATIONS}
    unknown = [f"{where}: {method} {path}" for (method, path), where in documented_routes().items()
               if path.startswith(OWNED) and (method, path) not in declared_routes]
    assert not unknown, "routes the API does not have: " + "; ".join(unknown)


# --- the README ---------------------------------------------------------------------------------
def readme_section(title: str) -> str:
    found = sections(read(README), 2)
    assert title in found, f"README.md has no `## {title}` section"
    return found[title]


def map_paths() -> list[str]:
    """The path each item of the README's architecture map starts with."""
    return re.findall(r"^- `([^`]+)`", readme_section("Architecture"), re.M)


PACKAGES = sorted(
    [f"gateway/{path.parent.name}/" for path in GATEWAY.glob("*/__init__.py")]
    + [f"gateway/{path.name}" for path in GATEWAY.glob("*.py")])


def test_packages_are_found() -> None:
    assert {"gateway/base/", "gateway/cli/", "gateway/__init__.py", "gateway/app.py"} <= set(
        PACKAGES)


@pytest.mark.parametrize("path", PACKAGES)
def test_every_package_and_module_is_in_the_readme_map(path: str) -> None:
    assert path in map_paths(), f"README.md's architecture map has no line for `{path}`"


def test_every_path_in_the_readme_map_exists() -> None:
    named = map_paths() + [span for span in code_spans(readme_section("Architecture"))
                           if "/" in span and re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", span)]
    assert len(map_paths()) >= len(PACKAGES)
    missing = sorted({path for path in named if not (ROOT / path).exists()})
    assert not missing, f"README.md's architecture map names paths that do not exist: {missing}"


ARCHITECTURE = DOCS / "architecture.md"
MODULES = sorted(
    ["gateway/__init__.py"]
    + [path.relative_to(ROOT).as_posix() for path in GATEWAY.rglob("*.py")
       if path.name != "__init__.py"])


def module_paths() -> list[str]:
    """The path each list item of docs/architecture.md starts with."""
    return re.findall(r"^- `([^`]+)`", read(ARCHITECTURE), re.M)


@pytest.mark.parametrize("path", MODULES)
def test_every_module_is_in_the_architecture_page(path: str) -> None:
    assert path in module_paths(), f"docs/architecture.md has no line for `{path}`"


def test_every_path_in_the_architecture_page_exists() -> None:
    named = module_paths() + [span for span in code_spans(prose(read(ARCHITECTURE)))
                              if "/" in span and re.fullmatch(r"[\w.-]+(/[\w.-]+)*/?", span)]
    assert len(module_paths()) >= len(MODULES)
    missing = sorted({path for path in named if not (ROOT / path).exists()})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_quick_start_commands_come_first() -> None:
    """A newcomer's two commands, verbatim, in the README's first code block."""
    text = read(README)
    assert next(iter(sections(text, 2))) == "Quick start"
    first_block = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert first_block is not None
    lines = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    commands_shown = [line for line in lines if line]
    assert commands_shown[:2] == ["python3 dev.py serve", "python3 dev.py test"]


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / target.split("#")[0]).resolve()
              for target in LINK.findall(INLINE_CODE.sub("", readme_section("Documentation")))}
    missing = [page.name for page in PAGES if page.resolve() not in linked]
    assert not missing, f"README.md's Documentation section does not link {missing}"


def test_readme_stays_short() -> None:
    """The README is the front page: reference belongs in docs/."""
    lines = len(read(README).splitlines())
    assert lines <= 300, f"README.md has {lines} lines: move reference material to docs/"


# --- links --------------------------------------------------------------------------------------
def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (code blocks and code spans left out)."""
    text = INLINE_CODE.sub("code", prose(read(path)))
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I)]


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_every_relative_link_resolves(path: Path) -> None:
    assert PAGES, "docs/ has no pages"
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no such heading in {resolved.name})")
    assert not broken, f"{path.relative_to(ROOT)}: broken links: {broken}"
