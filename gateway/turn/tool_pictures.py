"""Pictures a tool returned (:class:`gateway.tools.ToolOutput`), for a vision model: which of
them it is shown, the note its result gets, and the message that shows them.

The OpenAI chat format takes pictures only in user messages, so they follow the round's tool
results in one user message that says they are the tools' and not the user's (Anthropic's
conversion merges it into the turn holding the results). It is sent, never kept: the session
file holds the results' text, which says how many pictures there were.
"""

from __future__ import annotations

from typing import Any

from gateway.base.pictures import PICTURE_TYPES, Image
from gateway.config.settings import Settings
from gateway.tools import ToolCall

SHOWN_INTRO = "The pictures the tool results above returned (from the tools, not the user):"


def tool_pictures(pictures: tuple[Image, ...], settings: Settings) -> tuple[Image, ...]:
    """The pictures of one result the model is shown: none without a vision model
    (``CLOUDYBOT_LLM_VISION``); otherwise those of a type the APIs take (PNG, JPEG, GIF,
    WebP) holding 1 to ``llm_max_image_bytes`` bytes."""
    if not settings.llm_vision:
        return ()
    return tuple(picture for picture in pictures if picture.mime in PICTURE_TYPES
                 and 0 < len(picture.data) <= settings.llm_max_image_bytes)


def pictures_note(returned: int, shown: int, vision: bool) -> str:
    """What a result's text says of its pictures ("" without any)."""
    if not returned:
        return ""
    plural = returned > 1
    if shown == returned:
        return f"\n[{returned} picture{'s' if plural else ''}: shown in the next message]"
    why = ("too large, or not PNG, JPEG, GIF or WebP" if vision
           else "this model reads no pictures")
    if shown == 0:
        return (f"\n[the {returned} pictures were not shown: {why}]" if plural
                else f"\n[the picture was not shown: {why}]")
    return f"\n[{returned - shown} of {returned} pictures not shown: {why}]"


def pictures_message(pictures: list[tuple[ToolCall, Image]]) -> dict[str, Any]:
    """One user message showing ``pictures``, each after the name and id of its call."""
    content: list[dict[str, Any]] = [{"type": "text", "text": SHOWN_INTRO}]
    for call, picture in pictures:
        content.append({"type": "text", "text": f"{call.name} ({call.id}):"})
        content.append({"type": "image_url", "image_url": {"url": picture.data_url()}})
    return {"role": "user", "content": content}
