"""Probe 12 (#20): hostile or broken artifacts on every path that reads one.

Each reader must end in bounded time with an :class:`~pytest_lossless.errors.ArtifactError`
that names the file (and, for a bomb, the limit), never hang, never a traceback. The files are
made here: special files by hand, bombs by writing their headers byte by byte.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Run in a child process, so that a reader that hangs (a FIFO opened for reading waits for a
#: writer forever, /dev/zero never ends) fails the test instead of stalling the suite.
_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pytest_lossless.errors import ArtifactError
    from pytest_lossless.kinds.registry import KindRegistry

    registry = KindRegistry()
    path, kind = Path(sys.argv[1]), sys.argv[2]
    try:
        if kind == "detect":
            registry.artifact("out", path)
        else:
            registry.fingerprint(kind, path)
    except ArtifactError as exc:
        print("REFUSED", exc)
    else:
        print("READ")
    """
)


def _read_in_child(path: Path, kind: str, timeout: float = 20.0) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_LOSSLESS_FFMPEG_TIMEOUT": "10"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), kind],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {path} as {kind} did not end within {timeout:g} s: a hang")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _special(tmp_path: Path, what: str, suffix: str) -> Path:
    path = tmp_path / f"out{suffix}"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "link-to-fifo":
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    else:  # a link to a device that never ends
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("what", ["fifo", "link-to-fifo", "link-to-dev-zero"])
@pytest.mark.parametrize(
    ("kind", "suffix"),
    [
        ("detect", ".mp4"),
        ("video", ".mp4"),
        ("audio", ".wav"),
        ("tensor", ".npy"),
        ("image", ".png"),
        ("bytes", ".bin"),
    ],
)
def test_a_special_file_is_refused_at_once_by_every_kind(
    tmp_path: Path, what: str, kind: str, suffix: str
) -> None:
    """An export under review (accept), a model's output, a stored golden: a FIFO or a device
    where a file should be is named, never read (a FIFO blocked the reader forever, /dev/zero
    was hashed forever)."""
    path = _special(tmp_path, what, suffix)
    out = _read_in_child(path, kind)
    assert out.startswith("REFUSED"), out
    assert str(path) in out, out
    assert "not a regular file" in out, out


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def _png(width: int, height: int) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"\0" * 1024))
        + _png_chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("size", [(30000, 30000), (0x7FFFFFFF, 0x7FFFFFFF), (12000, 12000)])
def test_an_image_declaring_a_huge_frame_names_the_frame_size_limit(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """A PNG's header is read by the decoder, not the demuxer, so the declared-size check sees
    no size; ffmpeg refuses the frame, and the error must say it was the limit (beyond
    ~16000x16000 ffmpeg says "Picture size ... is invalid", not "max pixel count")."""
    from pytest_lossless.kinds.registry import KindRegistry
    from pytest_lossless.media.limits import DecodeLimitExceeded

    path = tmp_path / "bomb.png"
    path.write_bytes(_png(*size))
    with pytest.raises(DecodeLimitExceeded) as caught:
        KindRegistry().fingerprint("image", path)
    text = str(caught.value)
    assert str(path) in text, text
    assert f"{size[0]}x{size[1]}" in text, text
    assert "the frame-size limit, 8192x8192" in text, text
    assert caught.value.unit == "pixels"
    assert caught.value.declared == size[0] * size[1]


def test_a_raw_video_declaring_a_huge_frame_names_the_frame_size_limit(tmp_path: Path) -> None:
    """A YUV4MPEG header of 100000x100000: ffmpeg cannot even open it; the error is the limit."""
    from pytest_lossless.kinds.registry import KindRegistry
    from pytest_lossless.media.limits import DecodeLimitExceeded

    path = tmp_path / "huge.y4m"
    path.write_bytes(b"YUV4MPEG2 W100000 H100000 F25:1 Ip A1:1 C420jpeg\nFRAME\n" + bytes(1000))
    with pytest.raises(DecodeLimitExceeded, match="100000x100000") as caught:
        KindRegistry().fingerprint("video", path)
    assert "the frame-size limit, 8192x8192" in str(caught.value)


@pytest.mark.parametrize(
    "listing",
    [
        "ffconcat version 1.0\nfile 'seg.mp4'\n",
        "#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\nseg.mp4\n#EXT-X-ENDLIST\n",
    ],
    ids=["concat", "hls"],
)
def test_a_playlist_is_refused_naming_that_it_refers_to_other_files(
    tmp_path: Path, listing: str
) -> None:
    """An artifact that only lists other files (a concat list, an HLS playlist) decodes to what
    those files hold: its fingerprint would not be of the artifact. Refused, naming why, or an
    error naming the file; never a fingerprint."""
    from pytest_lossless.errors import ArtifactError
    from pytest_lossless.kinds.registry import KindRegistry
    from tests.e2e.mediagen import gray_frames, write_video

    write_video(tmp_path / "seg.mp4", gray_frames(4))
    listed = tmp_path / "clip.mp4"
    listed.write_text(listing)
    with pytest.raises(ArtifactError) as caught:
        KindRegistry().fingerprint("video", listed)
    assert "clip.mp4" in str(caught.value)
    if listing.startswith("ffconcat"):  # opened as a concat list: refused for what it is
        assert "refers to other files" in str(caught.value)


def test_a_file_named_like_a_protocol_is_read_as_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative artifact path ``concat:a.mp4|b.mp4`` is the file of that name, not ffmpeg's
    concat protocol over two other files: inputs are given as ``file:`` (its bytes are not
    media here, so the read fails naming it; the other files are never fingerprinted)."""
    from pytest_lossless.errors import ArtifactError
    from pytest_lossless.kinds.registry import KindRegistry
    from tests.e2e.mediagen import gray_frames, write_video

    for name in ("a.mp4", "b.mp4"):
        write_video(tmp_path / name, gray_frames(4))
    named = tmp_path / "concat:a.mp4|b.mp4"
    named.write_bytes(b"\x00\x00\x00\x18ftypisom" + b"not media" * 10)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArtifactError) as caught:
        KindRegistry().fingerprint("video", Path("concat:a.mp4|b.mp4"))
    assert "concat:a.mp4|b.mp4" in str(caught.value)
