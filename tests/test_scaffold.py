"""``cloudybot new-plugin NAME``: a channel plugin package whose generated tests pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import assert_one_line_error, cli_env


def new_plugin(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "new-plugin", *args],
                          env=cli_env(tmp_path / "data"), capture_output=True, text=True,
                          timeout=60)


def announce_entry_point(site: Path, name: str) -> None:
    """What ``pip install`` of the package would leave: its entry point, discoverable."""
    dist_info = site / f"cloudybot_{name}-0.1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: cloudybot-{name}\nVersion: 0.1.0\n", encoding="utf-8")
    (dist_info / "entry_points.txt").write_text(
        f"[cloudybot]\n{name} = cloudybot_{name}\n", encoding="utf-8")


def test_the_generated_plugin_passes_its_own_tests_and_lint(tmp_path: Path) -> None:
    result = new_plugin(tmp_path, "relay_desk", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "cloudybot-relay-desk"
    assert str(folder) in result.stdout
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "cloudybot_relay_desk/__init__.py", "pyproject.toml",
        "tests/test_relay_desk_channel.py"]
    source = (folder / "cloudybot_relay_desk" / "__init__.py").read_text(encoding="utf-8")
    assert "class RelayDeskSettings" in source and "from gateway." not in source

    site = tmp_path / "site"
    announce_entry_point(site, "relay_desk")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(folder)])}
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]
    assert "7 passed" in tests.stdout
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", str(folder)],
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


def test_a_bad_name_or_an_existing_folder_is_a_one_line_error(tmp_path: Path) -> None:
    line = assert_one_line_error(new_plugin(tmp_path, "Relay-Desk", "--dir", str(tmp_path)), 1)
    assert "'Relay-Desk'" in line
    (tmp_path / "cloudybot-taken").mkdir()
    line = assert_one_line_error(new_plugin(tmp_path, "taken", "--dir", str(tmp_path)), 1)
    assert "already exists" in line


def test_the_longest_name_still_writes_lint_clean_code(tmp_path: Path) -> None:
    name = "a" + "b" * 19
    assert new_plugin(tmp_path, name, "--dir", str(tmp_path)).returncode == 0
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout
    assert new_plugin(tmp_path, name + "c", "--dir", str(tmp_path)).returncode == 1
