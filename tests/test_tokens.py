"""Token counting: offline cl100k, the cookbook's chat formula, special tokens as plain text."""

from __future__ import annotations

import pytest

from gateway.base.errors import ConfigError
from gateway.base.tokens import TokenCounter, load_encoding

# The OpenAI cookbook's example ("How to count tokens with tiktoken"): 129 prompt tokens.
COOKBOOK_MESSAGES = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that "
     "translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user",
     "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant",
     "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user",
     "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
     "for increased leverage."},
    {"role": "system", "name": "example_assistant",
     "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean "
     "for the client deliverable."},
]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.for_encoding("cl100k_base")


def test_cl100k_loads_offline_and_matches_the_cookbook(counter: TokenCounter) -> None:
    assert counter.name == "cl100k_base"
    assert counter.messages(COOKBOOK_MESSAGES) == 129


def test_special_tokens_in_user_text_are_ordinary_text(counter: TokenCounter) -> None:
    text = "before <|endoftext|> after <|im_start|>"
    assert counter.count(text) == len(counter.encoding.encode_ordinary(text))
    assert counter.count(text) > 3


def test_repeated_texts_are_counted_once(counter: TokenCounter) -> None:
    text = "a message that is counted once " * 20
    misses = counter.misses
    first = counter.count(text)
    assert counter.count(text) == first
    assert counter.misses == misses + 1


def test_unknown_encoding_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no_such_encoding"):
        load_encoding("no_such_encoding")
