"""``cloudybot new-plugin NAME [--kind channel|tool|provider]``: a plugin package whose generated
tests pass, named from one NAME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.base.errors import BadRequest
from gateway.cli.completion import bash_script
from gateway.cli.main import build_parser, main
from gateway.cli.scaffold import KINDS, PluginNames, plugin_names, write_plugin
from tests.helpers import assert_one_line_error, cli_env

# kind -> (its test file, how many tests it has, a setting the TOML file sets, one the
# environment sets)
KIND = {
    "channel": ("tests/test_relay_desk_channel.py", 7, "token", "callback_url"),
    "tool": ("tests/test_relay_desk_tool.py", 6, "max_chars", None),
    "provider": ("tests/test_relay_desk_provider.py", 5, "base_url", "timeout_seconds"),
}
# setting -> (as written in TOML, as `cloudybot plugins` shows it)
VALUES = {"token": ("'t0ken'", "(set, not shown)"),
          "callback_url": ("'https://relay.example/replies'", "https://relay.example/replies"),
          "max_chars": ("50", "50"),
          "base_url": ("'https://api.example/v1'", "https://api.example/v1"),
          "timeout_seconds": ("5", "5")}


def new_plugin(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "new-plugin", *args],
                          env=cli_env(tmp_path / "data"), capture_output=True, text=True,
                          timeout=60)


def installed(tmp_path: Path, folder: Path, names: PluginNames) -> dict[str, str]:
    """An environment in which the package is importable and its entry point discoverable,
    as ``pip install`` would leave it."""
    dist_info = tmp_path / "site" / f"{names.module}-0.1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {names.distribution}\nVersion: 0.1.0\n",
        encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(
        f"[cloudybot]\n{names.name} = {names.module}\n", encoding="utf-8")
    return {**cli_env(tmp_path / "data"),
            "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(folder)])}


def lint(folder: Path) -> None:
    """ruff with the generated pyproject's configuration."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=folder,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_passes_its_own_tests_and_lint(tmp_path: Path, kind: str) -> None:
    chosen = () if kind == "channel" else ("--kind", kind)  # a channel unless told
    result = new_plugin(tmp_path, "relay-desk", *chosen, "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "cloudybot-relay-desk"
    assert str(folder) in result.stdout and f"a {kind} plugin" in result.stdout
    test_file, count, _, _ = KIND[kind]
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "cloudybot_relay_desk/__init__.py", "pyproject.toml", test_file]
    source = (folder / "cloudybot_relay_desk" / "__init__.py").read_text(encoding="utf-8")
    assert "class RelayDeskSettings" in source and "from gateway." not in source
    pyproject = (folder / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "cloudybot-relay-desk"' in pyproject
    assert 'relay_desk = "cloudybot_relay_desk"' in pyproject

    env = installed(tmp_path, folder, plugin_names("relay-desk"))
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert f"{count} passed" in tests.stdout
    lint(folder)


@pytest.mark.parametrize("kind", KINDS)
def test_its_settings_are_read_from_the_file_and_the_environment(tmp_path: Path,
                                                                 kind: str) -> None:
    """Installed, the plugin's settings are ``[plugins.relay_desk]`` and
    ``CLOUDYBOT_RELAY_DESK_*``, as its README says (``cloudybot plugins`` shows them)."""
    assert new_plugin(tmp_path, "relay_desk", "--kind", kind, "--dir",
                      str(tmp_path)).returncode == 0
    folder = tmp_path / "cloudybot-relay-desk"
    _, _, in_file, in_env = KIND[kind]
    config = tmp_path / "cloudybot.toml"
    config.write_text(f"[plugins.relay_desk]\n{in_file} = {VALUES[in_file][0]}\n",
                      encoding="utf-8")
    env = installed(tmp_path, folder, plugin_names("relay_desk"))
    if in_env is not None:
        env[f"CLOUDYBOT_RELAY_DESK_{in_env.upper()}"] = VALUES[in_env][0].strip("'")
    listed = subprocess.run([sys.executable, "-m", "gateway.cli", "plugins", "--config",
                             str(config)], env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ours = [line.strip() for line in listed.stdout.split("\nrelay_desk ", 1)[1].splitlines()]
    assert ours[0].split() == ["cloudybot-relay-desk", "0.1.0", "cloudybot_relay_desk"]
    for key in {in_file, in_env} - {None}:
        variable = f"CLOUDYBOT_RELAY_DESK_{key.upper()}"
        shown = f"[plugins.relay_desk] {key} = {VALUES[key][1]}  ({variable})"
        assert any(line == shown or line.startswith(f"{shown}, default ") for line in ours)
    readme = (folder / "README.md").read_text(encoding="utf-8")
    for line in ours:
        if line.startswith("[plugins.relay_desk]"):
            assert line.split("  (", 1)[1].split(")", 1)[0] in readme, line


def test_a_name_gives_every_name() -> None:
    expected = PluginNames(name="acme_chat", distribution="cloudybot-acme-chat",
                           module="cloudybot_acme_chat", env="ACME_CHAT", title="AcmeChat")
    for given in ("acme-chat", "acme_chat", "cloudybot-acme-chat", "cloudybot_acme_chat"):
        assert plugin_names(given) == expected, given
    assert plugin_names("pigeon") == PluginNames("pigeon", "cloudybot-pigeon",
                                                 "cloudybot_pigeon", "PIGEON", "Pigeon")
    assert plugin_names("web-2-go").title == "Web2Go"


@pytest.mark.parametrize(("given", "says"), [
    ("AcmeChat", "got 'AcmeChat' (try 'acme-chat')"),
    ("Relay-Desk", "got 'Relay-Desk' (try 'relay-desk')"),
    ("acme chat", "(try 'acme-chat')"),
    ("acme--chat", "(try 'acme-chat')"),
    ("acme-", "(try 'acme')"),
    ("2acme", "got '2acme'"),
    ("acme.chat", "(try 'acme-chat')"),
    ("cloudybot-", "got 'cloudybot-'"),
    ("cloudybot", "'cloudybot' is the gateway's own name"),
    ("a" + "b" * 20, "at most 20 characters"),
    ("telegram", "a plugin named 'telegram' is already installed"),
    ("tools", "a plugin named 'tools' is already installed"),
    ("data", "CLOUDYBOT_DATA_*, and CLOUDYBOT_DATA_DIR is the gateway's"),
    ("llm", "CLOUDYBOT_LLM_*, and CLOUDYBOT_LLM_API_KEY is the gateway's"),
    ("plugins", "CLOUDYBOT_PLUGINS_DISABLED"),
])
def test_a_name_that_cannot_work_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            given: str, says: str) -> None:
    assert main(["new-plugin", given, "--dir", str(tmp_path)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cloudybot: ") and says in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_an_installed_plugin_spelled_with_a_dash_is_the_same_name(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="a plugin named 'acme-chat' is already installed"):
        write_plugin("acme_chat", tmp_path, plugins={"acme-chat"})
    assert write_plugin("acme_chat", tmp_path, plugins={"acme-chats"}).name == \
        "cloudybot-acme-chat"


def test_a_bad_name_or_an_existing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    line = assert_one_line_error(new_plugin(tmp_path, "AcmeChat", "--dir", str(tmp_path)), 1)
    assert "'AcmeChat'" in line and "'acme-chat'" in line
    (tmp_path / "cloudybot-taken-name").mkdir()
    for given in ("taken-name", "taken_name"):  # one package: the same folder
        line = assert_one_line_error(new_plugin(tmp_path, given, "--dir", str(tmp_path)), 1)
        assert "cloudybot-taken-name already exists" in line
    assert list((tmp_path / "cloudybot-taken-name").iterdir()) == []


def test_an_unknown_kind_is_a_usage_error(tmp_path: Path) -> None:
    result = new_plugin(tmp_path, "relay-desk", "--kind", "webhook", "--dir", str(tmp_path))
    assert result.returncode == 2
    assert "invalid choice: 'webhook'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "cloudybot-relay-desk").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_the_longest_name_still_writes_lint_clean_code(tmp_path: Path, kind: str) -> None:
    name = "a" + "b" * 19
    assert new_plugin(tmp_path, name, "--kind", kind, "--dir", str(tmp_path)).returncode == 0
    lint(tmp_path / f"cloudybot-{name}")
    assert new_plugin(tmp_path, name + "c", "--kind", kind,
                      "--dir", str(tmp_path)).returncode == 1


def test_completion_offers_the_kinds_option() -> None:
    script = bash_script(build_parser())
    line = next(line for line in script.splitlines() if line.strip().startswith("new-plugin)"))
    assert "--kind" in line and "--dir" in line
