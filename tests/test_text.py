"""Splitting replies: paragraph, then line, then word boundaries; code blocks closed and
reopened across chunks; every chunk within the limit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.base.text import split_text


def fences_balanced(chunk: str) -> bool:
    """No code block left open at the end (CommonMark: a closing fence has no info string)."""
    open_block = False
    for line in chunk.split("\n"):
        if not open_block and line.strip().startswith("```"):
            open_block = True
        elif open_block and line.strip() == "```":
            open_block = False
    return not open_block


def test_a_paragraph_break_wins_over_the_last_space() -> None:
    text = "intro " * 500 + "\n\n" + "Second paragraph " + "word " * 600
    first, second = split_text(text, 4096)
    assert first == ("intro " * 500).rstrip()
    assert second.startswith("Second paragraph word")


def test_a_line_break_wins_over_a_space_when_no_paragraph_fits() -> None:
    text = "one line of words " * 10 + "\n" + "next line " * 20
    first, second = split_text(text, 200)
    assert first == ("one line of words " * 10).rstrip()
    assert second.startswith("next line")


def test_words_are_kept_whole_when_no_line_break_fits() -> None:
    chunks = split_text("lorem ipsum " * 50, 64)
    assert all(len(chunk) <= 64 for chunk in chunks)
    assert all(word in ("lorem", "ipsum") for chunk in chunks for word in chunk.split())


def test_a_cut_in_the_first_half_is_avoided() -> None:
    text = "short\n\n" + "x" * 90
    chunks = split_text(text, 50)
    assert chunks[0] == "short\n\n" + "x" * 43  # a hard cut beats a 5-character chunk
    assert "".join(chunks) == text


def test_a_code_block_cut_by_a_split_is_closed_and_reopened_with_its_language() -> None:
    body = "\n".join(f"    value_{i} = compute({i})" for i in range(60))
    text = f"Here is the fix:\n\n```python\n{body}\n```\n\nThat is all."
    chunks = split_text(text, 500)
    assert len(chunks) > 2
    assert all(len(chunk) <= 500 for chunk in chunks)
    assert all(fences_balanced(chunk) for chunk in chunks)
    assert chunks[0].startswith("Here is the fix:\n\n```python\n")
    assert chunks[0].endswith("\n```")
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n    value_")  # indentation kept
        assert chunk.endswith("\n```")
    assert chunks[-1].endswith("```\n\nThat is all.")
    code_lines = [line for chunk in chunks for line in chunk.split("\n")
                  if line.startswith("    value_")]
    assert code_lines == body.split("\n")  # every line once, whole, in order


def test_a_block_closed_in_its_chunk_is_not_reopened() -> None:
    text = "```\ncode\n```\n\n" + "after " * 30
    chunks = split_text(text, 60)
    assert chunks[0].startswith("```\ncode\n```")
    assert not any(chunk.startswith("```") for chunk in chunks[1:])


def test_tiny_limits_still_make_progress() -> None:
    assert split_text("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]
    assert split_text("```\n" + "b" * 30, 5)  # no room for fences: plain cuts
    assert split_text("", 10) == [""]


markdownish = st.lists(st.one_of(
    st.text(alphabet="abc \n", min_size=1, max_size=80),
    st.just("\n```python\n"), st.just("\n```\n"), st.just("\n\n"),
    st.text(alphabet=" x", min_size=100, max_size=300)), max_size=20).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=markdownish, limit=st.integers(min_value=24, max_value=400))
def test_any_text_splits_within_the_limit_with_balanced_fences_and_nothing_lost(
        text: str, limit: int) -> None:
    chunks = split_text(text, limit)
    assert all(len(chunk) <= limit for chunk in chunks)
    assert all(fences_balanced(chunk) for chunk in chunks[:-1])
    if fences_balanced(text):
        assert fences_balanced(chunks[-1])
    def body(value: str) -> str:  # the text's own letters (fences are p-y-t-h-o-n and `)
        return "".join(ch for ch in value if ch in "abcx")

    assert body("".join(chunks)) == body(text)
