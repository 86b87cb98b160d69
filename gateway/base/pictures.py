"""Pictures for a vision model: the types the APIs take, and one picture as it travels (a
user's, a channel's photo, or a tool's)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

# The picture types vision models take, each with the file extension it is named with.
PICTURE_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif",
                 "image/webp": "webp"}


@dataclass(frozen=True)
class Image:
    """A picture for a model that reads images (``CLOUDYBOT_LLM_VISION``): a user's, a
    channel's photo, or what a tool returned."""

    mime: str
    data: bytes
    name: str

    def data_url(self) -> str:
        """The picture as a ``data:`` URL (how OpenAI-compatible APIs take image input)."""
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"
