"""jsonio.dumps: the same JSON values as the standard library, always valid UTF-8."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.base import jsonio

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text())
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(), inner, max_size=4), max_leaves=30)


@given(JSON)
def test_reads_back_as_the_same_value(value: Any) -> None:
    written = jsonio.dumps(value)
    assert json.loads(written.decode("utf-8")) == value


def test_compact_and_not_ascii_escaped_like_the_session_files_were() -> None:
    value = {"role": "user", "content": "Grüße, 世界 \"quoted\"\n", "n": [1, 2.5, None, True]}
    assert jsonio.dumps(value) == json.dumps(
        value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def test_a_lone_surrogate_or_a_huge_int_falls_back_to_escapes() -> None:
    value = {"text": "broken \ud800 half", "big": 10**30}
    written = jsonio.dumps(value)
    assert b"\\ud800" in written
    assert json.loads(written.decode("utf-8")) == value
