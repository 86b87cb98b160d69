"""``cloudybot new-plugin NAME [--kind channel|tool|provider]``: a plugin package to start from,
its tests passing.

The files come from ``gateway/templates/plugin``: ``pyproject.toml.tmpl`` for every kind, the
rest from the kind's folder (``string.Template``: ``$name``, ``${NAME}``, ``${Class}``,
``$module``, ``$distribution``). What they build on is only the ``gateway`` package's public
surface and its pytest kit.

One NAME gives every name the package needs (:func:`plugin_names`): ``acme-chat`` and
``acme_chat`` both write the distribution ``cloudybot-acme-chat`` (dashes, as Python packages
are named) with the module ``cloudybot_acme_chat``; inside the gateway the plugin is
``acme_chat`` (entry point, channel/tool/provider name, ``[plugins.acme_chat]``,
``CLOUDYBOT_ACME_CHAT_*``): one spelling wherever a dash would not do or would make two names
read as one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from gateway.base.errors import BadRequest

KINDS = ("channel", "tool", "provider")
MAX_NAME_CHARS = 20  # longer names would not fit a line of the generated code
WORDS = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
PREFIX = re.compile(r"cloudybot[-_]")  # `new-plugin cloudybot-acme` means `new-plugin acme`
TEMPLATE = "templates/plugin"
FILES = {  # template (in the kind's folder unless said) -> path in the package
    "../pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "{module}/__init__.py",
    "tests/test_plugin.py.tmpl": "tests/test_{name}_{kind}.py",
}
PACKAGE = {  # kind -> (what the pyproject says it is, its dependencies)
    "channel": ("A CloudyBot channel plugin", ["cloudybot", "aiohttp>=3.13"]),
    "tool": ("A CloudyBot tool plugin", ["cloudybot"]),
    "provider": ("A CloudyBot LLM provider plugin", ["cloudybot", "aiohttp>=3.13"]),
}
RULE = (f"a plugin name is a lowercase letter, then a-z 0-9, words joined by - or _, at most "
        f"{MAX_NAME_CHARS} characters")


@dataclass(frozen=True)
class PluginNames:
    """Every name a plugin package derives from the NAME given to ``new-plugin``."""

    name: str  # the plugin: entry point, channel/tool/provider, [plugins.NAME] (acme_chat)
    distribution: str  # what pip installs, and the folder written (cloudybot-acme-chat)
    module: str  # the Python package (cloudybot_acme_chat)
    env: str  # its settings' variables are CLOUDYBOT_{env}_{KEY} (ACME_CHAT)
    title: str  # its classes' prefix (AcmeChat)


def plugin_names(given: str) -> PluginNames:
    """The names of the package for ``given`` (``acme-chat``, ``acme_chat``, or either with a
    ``cloudybot-`` in front). Anything else is refused (400 ``invalid_name``) with the rule, and
    the spelling that would do when there is one (``AcmeChat``: try ``acme-chat``)."""
    bare = PREFIX.sub("", given, count=1)
    if bare == "cloudybot":
        raise BadRequest("'cloudybot' is the gateway's own name; choose another",
                         code="invalid_name")
    if not _valid(bare):
        raise BadRequest(f"{RULE}; got {given!r}{_suggestion(given)}", code="invalid_name")
    words = re.split(r"[-_]", bare)
    name = "_".join(words)
    return PluginNames(name=name, distribution="cloudybot-" + "-".join(words),
                       module=f"cloudybot_{name}", env=name.upper(),
                       title="".join(word.capitalize() for word in words))


def _valid(bare: str) -> bool:
    return bool(WORDS.fullmatch(bare)) and len(bare) <= MAX_NAME_CHARS and bare != "cloudybot"


def _suggestion(given: str) -> str:
    """`` (try 'acme-chat')`` when a plain rewrite of ``given`` is a valid name."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", given.strip())
    guess = PREFIX.sub("", re.sub(r"[^a-z0-9]+", "-", spaced.lower()).strip("-"), count=1)
    return f" (try {guess!r})" if guess != given and _valid(guess) else ""


def check_free(names: PluginNames, plugins: Collection[str] | Mapping[str, str],
               variables: Iterable[str]) -> None:
    """Refuse (400 ``name_taken``) a name the gateway already knows: an installed plugin's (its
    entry point, channel or ``[plugins.NAME]`` would be that plugin's), one a plugin registers
    (``plugins`` as a mapping: each name with what it is, e.g. the tool ``calculator``: two
    tools of one name stop the gateway's start), or one whose variables ``CLOUDYBOT_{NAME}_*``
    would mix with the gateway's own or another plugin's (``data``: ``CLOUDYBOT_DATA_DIR``)."""
    for plugin in plugins:  # `acme-chat` installed is `acme_chat` to a variable or a key
        if re.sub(r"[^a-z0-9]+", "_", plugin.lower()) != names.name:
            continue
        if isinstance(plugins, Mapping) and plugins[plugin]:
            raise BadRequest(f"{plugins[plugin]} already has that name; choose another name",
                             code="name_taken")
        raise BadRequest(f"a plugin named {plugin!r} is already installed (`cloudybot "
                         "plugins` lists it); choose another name", code="name_taken")
    prefix = f"CLOUDYBOT_{names.env}_"
    for variable in sorted(variables):
        if variable.startswith(prefix):
            raise BadRequest(f"the plugin {names.name!r} would read its settings from "
                             f"{prefix}*, and {variable} is the gateway's or another "
                             "plugin's; choose another name", code="name_taken")


def write_plugin(given: str, parent: Path, kind: str = "channel", *,
                 plugins: Collection[str] | Mapping[str, str] = (),
                 variables: Iterable[str] = ()) -> Path:
    """Write the ``kind`` plugin package named for ``given`` (see :func:`plugin_names`) under
    ``parent``; return its folder. ``plugins`` and ``variables``: the plugin names and the
    setting variables already in use (see :func:`check_free`)."""
    if kind not in KINDS:
        raise BadRequest(f"a plugin kind is one of {', '.join(KINDS)}; got {kind!r}",
                         code="invalid_kind")
    names = plugin_names(given)
    check_free(names, plugins, variables)
    folder = parent / names.distribution
    if folder.exists():
        raise BadRequest(f"{folder} already exists", code="exists")
    description, dependencies = PACKAGE[kind]
    values = {"name": names.name, "NAME": names.env, "module": names.module,
              "Class": names.title, "distribution": names.distribution, "kind": kind,
              "description": f"{description}: {names.name}.",
              "dependencies": ", ".join(f'"{dependency}"' for dependency in dependencies)}
    source = resources.files("gateway").joinpath(TEMPLATE)
    texts = {}  # every file first: a template that fails leaves nothing half written
    for template, target in FILES.items():
        where = source.joinpath(template[3:]) if template.startswith("../") \
            else source.joinpath(kind, template)
        path = folder / target.format(module=names.module, name=names.name, kind=kind)
        texts[path] = Template(where.read_text(encoding="utf-8")).substitute(values)
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder
