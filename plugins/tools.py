"""Built-in tools: ``current_time`` (time-zone aware) and ``calculator`` (arithmetic, no eval)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway import PluginHost, Tool, ToolContext, hookimpl

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e300

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "log": math.log, "log10": math.log10,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "floor": math.floor, "ceil": math.ceil,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its result is out of range."""


def _check(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError("only numbers are allowed")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("the result is out of range")
    return value


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        return _check(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_evaluate(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponents are limited to {MAX_EXPONENT}")
        try:
            return _check(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is out of range") from None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS and not node.keywords):
        arguments = [_evaluate(arg) for arg in node.args]
        try:
            return _check(_FUNCTIONS[node.func.id](*arguments))
        except (TypeError, ValueError, OverflowError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None
    raise CalculatorError(f"unsupported syntax: {type(node).__name__}")


def calculate(expression: str) -> int | float:
    """Evaluate arithmetic: numbers, + - * / // % **, parentheses, a few math functions."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expressions are limited to {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError("not a valid expression") from None
    return _evaluate(tree)


async def _calculator(arguments: dict[str, Any], context: ToolContext) -> str:
    expression = arguments.get("expression")
    if not isinstance(expression, str):
        return "error: 'expression' must be a string"
    try:
        result = calculate(expression)
    except CalculatorError as exc:
        return f"error: {exc}"
    return f"{expression} = {result}"


async def _current_time(arguments: dict[str, Any], context: ToolContext) -> dict[str, str]:
    name = arguments.get("timezone") or "UTC"
    if not isinstance(name, str):  # str() of a list or an object would be Python's repr
        return {"error": "the time zone must be a string, an IANA name like Europe/Paris"}
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "Europe" is a directory
        # The zone as the model sent it, never repr(): the redactor finds a saved password
        # in the very text the model wrote.
        return {"error": f'unknown time zone "{name}"; use an IANA name like Europe/Paris'}
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": name, "iso": now.isoformat(timespec="seconds"),
            "weekday": now.strftime("%A"), "utcOffset": now.strftime("%z")}


CALCULATOR = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression exactly, e.g. '(17.5 * 3) / 2 + sqrt(2)'.",
    parameters={"type": "object", "properties": {
        "expression": {"type": "string", "description": "the arithmetic expression"}},
        "required": ["expression"]},
    run=_calculator,
)
CURRENT_TIME = Tool(
    name="current_time",
    description="The current date and time in a time zone (IANA name, default UTC).",
    parameters={"type": "object", "properties": {
        "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris"}}},
    run=_current_time,
)


@hookimpl(trylast=True)
def register_tools(host: PluginHost) -> list[Tool]:
    """Register the built-in tools."""
    return [CURRENT_TIME, CALCULATOR]
