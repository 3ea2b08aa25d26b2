"""Where a media container may start, and the suffixes worth a probe: one list, shared by the
container kinds' declared signatures (:mod:`..kinds.video`) and detection (:mod:`.detect`).

Standard library only, so that registering the kinds loads no media module of weight.
"""

from __future__ import annotations

#: ISO BMFF box types seen at offset 4 of an MP4/MOV.
CONTAINER_BRANDS = (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot")
#: Where a container may start: ISO BMFF boxes at offset 4, EBML, RIFF (AVI), Ogg, MPEG-PS, FLV,
#: an ID3 tag, an MPEG-TS sync byte.
CONTAINER_SIGNATURES = (
    *((4, brand) for brand in CONTAINER_BRANDS),
    *((0, magic) for magic in (b"\x1a\x45\xdf\xa3", b"RIFF", b"OggS", b"\x00\x00\x01\xba")),
    *((0, magic) for magic in (b"FLV", b"ID3", b"\x47")),
)
#: The media suffixes worth a probe whatever the file starts with.
CONTAINER_SUFFIXES = frozenset(
    {
        ".mp4", ".m4v", ".m4a", ".mov", ".mkv", ".webm", ".avi", ".ts", ".mts", ".m2ts",
        ".mpg", ".mpeg", ".ogg", ".ogv", ".oga", ".opus", ".flv", ".mp3", ".aac", ".3gp",
    }
)  # fmt: skip
