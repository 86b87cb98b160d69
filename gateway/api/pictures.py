"""Pictures sent with ``POST /chat`` (``images``: ``data:`` URLs), checked and decoded for a
vision model, as a channel's photos are. They go to the model with the message and are never
stored: the message's stored text names them (``[picture]``)."""

from __future__ import annotations

import base64
import binascii
import re

from gateway.base.errors import BadRequest, PayloadTooLarge
from gateway.base.pictures import PICTURE_TYPES, Image
from gateway.config.settings import Settings

MAX_IMAGES = 4
DATA_URL = re.compile(r"data:(image/[a-z]+);base64,([A-Za-z0-9+/]*={0,2})")


def pictures(value: object, settings: Settings) -> tuple[Image, ...]:
    """The ``images`` field: at most :data:`MAX_IMAGES` base64 ``data:`` URLs of PNG, JPEG,
    GIF or WebP pictures, each at most ``llm_max_image_bytes`` (413); 400 otherwise, and when
    the model reads no pictures (``CLOUDYBOT_LLM_VISION`` off)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_IMAGES:
        raise BadRequest(f"images must be a list of at most {MAX_IMAGES} data: URLs",
                         code="invalid_images", param="images")
    if value and not settings.llm_vision:
        raise BadRequest("this gateway's model reads no pictures (CLOUDYBOT_LLM_VISION is off)",
                         code="images_not_accepted", param="images")
    return tuple(_picture(item, number, settings.llm_max_image_bytes)
                 for number, item in enumerate(value, 1))


def _picture(item: object, number: int, max_bytes: int) -> Image:
    """One ``data:`` URL as an :class:`Image`."""
    found = DATA_URL.fullmatch(item) if isinstance(item, str) else None
    if found is None or found.group(1) not in PICTURE_TYPES:
        raise BadRequest("each image must be a base64 data: URL of a PNG, JPEG, GIF or WebP "
                         "picture", code="invalid_images", param="images")
    if len(found.group(2)) * 3 // 4 > max_bytes + 2:
        raise PayloadTooLarge(f"a picture may be at most {max_bytes} bytes",
                              code="image_too_large", param="images")
    try:
        data = base64.b64decode(found.group(2), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("an image's base64 is malformed", code="invalid_images",
                         param="images") from None
    if not data or len(data) > max_bytes:
        raise PayloadTooLarge(f"a picture may be at most {max_bytes} bytes",
                              code="image_too_large", param="images")
    mime = found.group(1)
    return Image(mime, data, f"picture-{number}.{PICTURE_TYPES[mime]}")


def named(message: str, images: tuple[Image, ...]) -> str:
    """The message as stored: the pictures named before its text (they are not kept)."""
    if not images:
        return message
    label = "[picture]" if len(images) == 1 else f"[{len(images)} pictures]"
    return f"{label} {message}".strip()
