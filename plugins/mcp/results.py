"""An MCP tool result as what the model reads: text, and pictures.

Text content as it is; a resource as its URI and its text (a binary one by its URI, type and
size); a picture by its type and size, the picture itself going with the text (a vision model
is shown it: see :class:`gateway.tools.ToolOutput`); a sound by its type and size; a
structured result with no content as JSON. A server's error result starts with ``error:``.
A result longer than the limit (in UTF-8 bytes) is cut, with a note that says so.
"""

from __future__ import annotations

import base64
import binascii
import json

from mcp import types

from gateway import PICTURE_TYPES, Image, ToolOutput


def _size(data: str) -> int:
    """The decoded size of base64 ``data`` (its length if it is not base64)."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)


def _resource(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    kind = resource.mime_type or "binary"
    return f"[resource {resource.uri}: {kind}, {_size(resource.blob)} bytes, not shown]"


def _picture(block: types.ImageContent, number: int) -> Image | None:
    """The picture of ``block`` when it is one a vision model takes and its data is base64."""
    if block.mime_type not in PICTURE_TYPES:
        return None
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return Image(block.mime_type, data, f"picture-{number}.{PICTURE_TYPES[block.mime_type]}")


def _part(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        return _resource(block.resource)
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}: {block.name}]"
    if isinstance(block, types.ImageContent) and _picture(block, 0) is not None:
        return f"[image {block.mime_type}, {_size(block.data)} bytes]"
    if isinstance(block, types.ImageContent | types.AudioContent):
        return f"[{block.type} {block.mime_type}, {_size(block.data)} bytes, not shown]"
    return f"[{getattr(block, 'type', 'content')} not shown]"


def as_output(result: types.CallToolResult, max_bytes: int) -> ToolOutput:
    """The text of ``result``, cut to ``max_bytes`` (UTF-8) with a note, and its pictures."""
    parts = [_part(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(parts)
    if result.is_error:
        text = f"error: {text or 'the tool failed'}"
    images = [block for block in result.content if isinstance(block, types.ImageContent)]
    pictures = (_picture(block, number) for number, block in enumerate(images, 1))
    return ToolOutput(trimmed(text, max_bytes),
                      tuple(picture for picture in pictures if picture is not None))


def trimmed(text: str, max_bytes: int) -> str:
    """``text`` cut to ``max_bytes`` of UTF-8 (at a character), with a note, if longer."""
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return text
    kept = encoded[:max_bytes].decode(errors="ignore")
    return (f"{kept}\n[the result was cut: {len(encoded):,} bytes, only the first "
            f"{max_bytes:,} are shown]")
