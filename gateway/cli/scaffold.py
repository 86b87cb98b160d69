"""``cloudybot new-plugin NAME``: a channel plugin package to start from, its tests passing.

The files come from ``gateway/templates/plugin`` (``string.Template``: ``$name``, ``${NAME}``,
``${Class}``, ``$module``); what they build on is only the ``gateway`` package's public surface
and its pytest kit.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from string import Template

from gateway.base.errors import BadRequest

PLUGIN_NAME = re.compile(r"[a-z][a-z0-9_]{0,19}")  # longer names would not fit a line
TEMPLATE = "templates/plugin"
FILES = {  # template -> path in the package
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "{module}/__init__.py",
    "tests/test_channel.py.tmpl": "tests/test_{name}_channel.py",
}


def write_plugin(name: str, parent: Path) -> Path:
    """Write the package ``cloudybot-NAME`` under ``parent``; return its folder. ``name`` is
    the channel's name (its session keys, ``[plugins.NAME]``, ``CLOUDYBOT_{NAME}_*``)."""
    if not PLUGIN_NAME.fullmatch(name):
        raise BadRequest(f"a plugin name is a lowercase letter, then up to 19 of a-z 0-9 _; "
                         f"got {name!r}", code="invalid_name")
    folder = parent / f"cloudybot-{name.replace('_', '-')}"
    if folder.exists():
        raise BadRequest(f"{folder} already exists", code="exists")
    module = f"cloudybot_{name}"
    values = {"name": name, "NAME": name.upper(), "module": module,
              "Class": "".join(part.capitalize() for part in name.split("_"))}
    source = resources.files("gateway").joinpath(TEMPLATE)
    for template, target in FILES.items():
        text = Template(source.joinpath(template).read_text(encoding="utf-8"))
        path = folder / target.format(module=module, name=name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.substitute(values), encoding="utf-8")
    return folder
