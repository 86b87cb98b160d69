"""The shape of the ``gateway`` package, held to what its docstrings say: no import circles, each
part imports only what its ``May import:`` line allows, and no function takes more than five
parameters (one object carries what travels together: a ``Turn``, a ``Place``, ``Limits``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = ROOT / "gateway"
MAX_PARAMETERS = 5


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(GATEWAY.rglob("*.py"))}
PACKAGES = sorted(path.parent.name for path in GATEWAY.glob("*/__init__.py"))


def imported_modules(path: Path) -> Iterator[str]:
    """Every gateway module ``path`` imports, at run time or for type checking alike."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and (node.module == "gateway" or node.module.startswith("gateway.")):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in MODULES else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("gateway"))


def part_of(module: str) -> str:
    """The part a module belongs to: its subpackage, or itself for a top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in PACKAGES else module


GRAPH = {module: {target for target in imported_modules(path)
                  if target in MODULES and target != module}
         for module, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (its modules in order), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (found := walk(target)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := walk(node)):
            return found
    return []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_of_gateway_imports_itself_back() -> None:
    assert find_cycle(GRAPH) == []


def test_no_part_of_gateway_imports_itself_back() -> None:
    parts: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        if module == "gateway":
            continue  # the public names: it re-exports every part
        parts.setdefault(part_of(module), set()).update(
            part_of(target) for target in targets if part_of(target) != part_of(module)
            and target != "gateway")
    assert find_cycle(parts) == []


def allowed(package: str) -> set[str] | None:
    """What the package's docstring allows it to import (None: every part)."""
    path = GATEWAY / package / "__init__.py"
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert "May import:" in docstring, f"gateway/{package} does not say what it may import"
    rule = docstring.split("May import:", 1)[1].split(";")[0]
    if rule.strip().startswith("every part"):
        return None
    return set(re.findall(r"``(gateway(?:\.\w+)?)``", rule))


@pytest.mark.parametrize("package", PACKAGES)
def test_each_part_imports_only_what_its_docstring_allows(package: str) -> None:
    permitted = allowed(package)
    if permitted is None:
        return
    found = {part_of(target): module for module, targets in GRAPH.items()
             if part_of(module) == f"gateway.{package}"
             for target in targets if part_of(target) != f"gateway.{package}"}
    unexpected = {part: module for part, module in found.items() if part not in permitted}
    assert unexpected == {}, f"gateway/{package} imports what its docstring does not allow"


def test_the_docstring_rule_is_read() -> None:
    assert allowed("base") == set()
    assert allowed("billing") == {"gateway.base", "gateway.config", "gateway.store"}
    assert allowed("cli") is None


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = node.args
    names = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    names += [f"*{a.arg}" for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def test_no_function_in_gateway_takes_more_than_five_parameters() -> None:
    crowded = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and len(parameters(node)) > MAX_PARAMETERS:
                crowded.append(f"{module}:{node.lineno} {node.name}({', '.join(parameters(node))})")
    assert crowded == []
