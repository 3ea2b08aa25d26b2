"""Request bodies for :meth:`Server.request`: JSON, a url-encoded form, raw bytes, or a
multipart form whose files are streamed from disk, each with its exact Content-Length.
"""

from __future__ import annotations

import json as jsonlib
import os
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import ConfigError

#: Bytes read at a time from an uploaded file or a response.
CHUNK = 1 << 16
_Content = str | os.PathLike[str] | bytes
#: One file of a multipart form: its path, or (filename, path or bytes[, content type]).
FilePart: TypeAlias = str | os.PathLike[str] | tuple[str, _Content] | tuple[str, _Content, str]


def encode_body(
    *,
    json: Any,
    files: Mapping[str, FilePart] | None,
    data: bytes | str | Mapping[str, str] | None,
) -> tuple[Iterable[bytes] | bytes | None, int, dict[str, str]]:
    """The request body (streamed for files), its length and its content headers."""
    if json is not None:
        if files is not None or data is not None:
            raise ConfigError("server.request", "json=", "give json, or files/data, not both")
        payload = jsonlib.dumps(json).encode()
        return (
            payload,
            len(payload),
            {"Content-Type": "application/json", "Content-Length": str(len(payload))},
        )
    if files is not None:
        boundary = f"lossless-{uuid.uuid4().hex}"
        parts: list[tuple[bytes, Path | bytes]] = []
        fields = data if isinstance(data, Mapping) else {}
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError("server.request", "data=", "with files=, data must be a mapping")
        for name, value in fields.items():
            head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            parts.append((head.encode(), str(value).encode()))
        for name, spec in files.items():
            ctype = "application/octet-stream"
            if isinstance(spec, tuple):
                filename, content, ctype = (*spec, ctype)[:3]
            else:
                filename, content = Path(spec).name, spec
            payload_obj: Path | bytes = content if isinstance(content, bytes) else Path(content)
            head = (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{filename}"\r\nContent-Type: {ctype}\r\n\r\n'
            )
            parts.append((head.encode(), payload_obj))
        closing = f"--{boundary}--\r\n".encode()
        total = len(closing)
        for head_bytes, part in parts:
            size = len(part) if isinstance(part, bytes) else part.stat().st_size
            total += len(head_bytes) + size + 2

        def stream() -> Iterator[bytes]:
            for head_bytes, part in parts:
                yield head_bytes
                if isinstance(part, bytes):
                    yield part
                else:
                    with open(part, "rb") as handle:
                        yield from iter(lambda: handle.read(CHUNK), b"")
                yield b"\r\n"
            yield closing

        return (
            stream(),
            total,
            {
                "Content-Type": f"multipart/form-data; boundary={boundary}",
                "Content-Length": str(total),
            },
        )
    if data is None:
        return None, 0, {"Content-Length": "0"}
    if isinstance(data, Mapping):
        encoded = urllib.parse.urlencode(dict(data)).encode()
        return (
            encoded,
            len(encoded),
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Content-Length": str(len(encoded)),
            },
        )
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return (
        raw,
        len(raw),
        {"Content-Type": "application/octet-stream", "Content-Length": str(len(raw))},
    )
