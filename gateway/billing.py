"""What an LLM call costs in AI credits."""

from __future__ import annotations

import math

from .config import Settings
from .store import Charge


def charge_for(settings: Settings, kind: str, model: str, prompt_tokens: int,
               completion_tokens: int) -> Charge:
    """The ledger entry of one call: whole credits, rounded up, at the model's price.

    ``model`` is what the provider says it ran; if that has no price (``gpt-4o-2024-08-06``),
    the configured model's price applies, then the default.
    """
    price = settings.price_for(model, settings.llm_model)
    cost = (prompt_tokens * price.prompt + completion_tokens * price.completion) / 1000
    return Charge(kind, model, prompt_tokens, completion_tokens, math.ceil(cost - 1e-9))
