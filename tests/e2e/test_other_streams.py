"""End to end: streams other than video and audio (subtitles, data, attachments) are recorded in
a container's ``decoded`` fingerprint, packet by packet, and compared by the gate (#21).

Real ffmpeg throughout: an MP4 of a video, an audio and a mov_text subtitle track (from a small
.srt), checked against its golden through real pytest runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pytest_lossless import kinds
from pytest_lossless.core.artifact import Artifact
from pytest_lossless.gates.gate import parse_gate
from pytest_lossless.kinds.video import compare_container
from pytest_lossless.media import container
from pytest_lossless.media.container import ContainerFingerprint
from tests.e2e.mediagen import FFMPEG

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SRT = (
    "1\n00:00:00,000 --> 00:00:00,400\nHello world\n\n"
    "2\n00:00:00,400 --> 00:00:00,800\nSecond line\n"
)


def make_clip(path: Path, subtitles: str | None = SRT, *, audio: bool = True) -> Path:
    """A short MP4: lossless H.264 video, an AAC track and (with ``subtitles``) mov_text."""
    inputs = ["-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:duration=1"]
    if audio:
        inputs += ["-f", "lavfi", "-i", "sine=duration=1"]
    if subtitles is not None:
        srt = path.with_suffix(".srt")
        srt.write_text(subtitles)
        inputs += ["-i", str(srt)]
    count = inputs.count("-i")
    maps = [arg for n in range(count) for arg in ("-map", str(n))]
    subprocess.run(
        [
            FFMPEG, "-y", "-v", "error", *inputs, *maps,
            "-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-threads", "1",
            "-c:a", "aac", "-c:s", "mov_text", "-bitexact", "-map_metadata", "-1", str(path),
        ],
        check=True,
    )  # fmt: skip
    return path


def _artifact(path: Path, fp: dict) -> Artifact:
    return Artifact(name="clip.mp4", kind="video", fingerprint=fp, path=path)


def _decoded(expected: Path, obtained: Path, efp: dict | None = None):
    efp = efp if efp is not None else kinds.fingerprint("video", expected)
    ofp = kinds.fingerprint("video", obtained)
    return compare_container(
        parse_gate("decoded"), _artifact(expected, efp), _artifact(obtained, ofp), "video"
    )


def test_fingerprint_records_the_subtitle_packets(tmp_path: Path, monkeypatch) -> None:
    """Index, type, codec, the packets (time and SHA-256 of each payload) and one SHA-256 of
    them all; the fast way and ffmpeg's general way agree field for field."""
    path = make_clip(tmp_path / "clip.mp4")
    fp = kinds.fingerprint("video", path)
    assert [s["type"] for s in fp["streams"]] == ["video", "audio"]
    assert fp["ignored_streams"] == []
    (other,) = fp["other_streams"]
    assert (other["index"], other["codec_type"], other["codec_name"]) == (2, "subtitle", "mov_text")
    assert other["packet_count"] == 2 == len(other["packets"])
    assert len(other["sha256"]) == 64
    assert len(other["extradata_sha256"]) == 64
    assert [p["pts"] for p in other["packets"]] == [0, 400000]
    with monkeypatch.context() as patch:
        patch.setattr(container, "_fast_fingerprint", lambda path, limits, **_: None)
        assert kinds.fingerprint("video", path) == fp
    # A file with no other stream has the fingerprint it always had: no new key.
    plain = kinds.fingerprint("video", make_clip(tmp_path / "plain.mp4", None))
    assert "other_streams" not in plain


def test_gate_fails_naming_a_changed_missing_or_added_subtitle_stream(tmp_path: Path) -> None:
    golden = make_clip(tmp_path / "golden.mp4")
    same = make_clip(tmp_path / "same.mp4")
    assert _decoded(golden, same).passed
    changed = make_clip(tmp_path / "changed.mp4", SRT.replace("Second", "Sekond"))
    result = _decoded(golden, changed)
    assert not result.passed
    text = result.message()
    assert "subtitle stream #2 (mov_text): packet 1" in text, text
    assert "payload differs" in text, text
    missing = _decoded(golden, make_clip(tmp_path / "none.mp4", None))
    assert not missing.passed
    assert "subtitle stream #2 (mov_text): present in expected only" in missing.message()
    added = _decoded(make_clip(tmp_path / "none2.mp4", None), golden)
    assert not added.passed
    assert "subtitle stream #2 (mov_text): present in obtained only" in added.message()


def test_old_golden_without_other_streams_still_compares_with_a_note(tmp_path: Path) -> None:
    """A fingerprint made before other streams were recorded (they are only named in
    ``ignored_streams``): the video and audio are compared, the note says what was not."""
    golden = make_clip(tmp_path / "golden.mp4")
    old = ContainerFingerprint.from_json(kinds.fingerprint("video", golden)).legacy().to_json()
    assert "other_streams" not in old
    assert old["ignored_streams"] == ["#2 subtitle mov_text"]
    changed = make_clip(tmp_path / "changed.mp4", SRT.replace("Second", "Sekond"))
    result = _decoded(golden, changed, efp=old)
    assert result.passed, result.message()
    assert any(
        "not recorded" in note and "#2 subtitle mov_text" in note for note in result.notes
    ), result.notes


GOLDEN_TEST = """
from pathlib import Path
import pytest

@pytest.mark.lossless
def test_clip(golden):
    golden.check("clip.mp4", Path(__file__).parent / "clip.mp4")
"""


def test_golden_check_fails_on_one_changed_subtitle_word(pytester: pytest.Pytester) -> None:
    root = pytester.path
    make_clip(root / "clip.mp4")
    pytester.makepyfile(test_clip=GOLDEN_TEST)
    assert pytester.runpytest("--update-goldens").ret == 0
    manifest = json.loads((root / "goldens/test_clip/test_clip/manifest.json").read_text())
    (other,) = manifest["artifacts"]["clip.mp4"]["fingerprint"]["other_streams"]
    assert other["codec_type"] == "subtitle"
    pytester.runpytest("--lossless").assert_outcomes(passed=1)
    make_clip(root / "clip.mp4", SRT.replace("world", "wurld"))
    result = pytester.runpytest("--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*subtitle stream #2 (mov_text)*packet 0*payload differs*"])


def test_golden_written_before_other_streams_were_recorded_still_checks(
    pytester: pytest.Pytester,
) -> None:
    """A manifest whose fingerprint predates ``other_streams`` (the stored file re-fingerprinted
    matches it in its earlier form): no integrity error; video and audio are compared, and the
    verdict's note names the subtitle stream that was not."""
    from dataclasses import replace

    from pytest_lossless.core.digests import canonical_sha256
    from pytest_lossless.goldens.manifest import ManifestEntry, entry_sha256

    root = pytester.path
    make_clip(root / "clip.mp4")
    pytester.makepyfile(test_clip=GOLDEN_TEST)
    assert pytester.runpytest("--update-goldens").ret == 0
    where = root / "goldens/test_clip/test_clip/manifest.json"
    document = json.loads(where.read_text())
    data = document["artifacts"]["clip.mp4"]
    old = ContainerFingerprint.from_json(data["fingerprint"]).legacy().to_json()
    entry = replace(
        ManifestEntry.read("clip.mp4", data, where),
        fingerprint=old,
        fingerprint_sha256=canonical_sha256(old),
    )
    document["artifacts"]["clip.mp4"] = {**entry.to_json(), "entry_sha256": entry_sha256(entry)}
    where.write_text(json.dumps(document, indent=2))
    make_clip(root / "clip.mp4", SRT.replace("world", "wurld"))
    result = pytester.runpytest("--lossless", "-rA")
    result.assert_outcomes(passed=1)
    receipts = [p.read_text() for p in (root / "lossless-receipts").rglob("*.json")]
    assert any("not recorded" in text and "#2 subtitle mov_text" in text for text in receipts)
    # A fingerprint edited in any other way is still refused.
    document["artifacts"]["clip.mp4"]["fingerprint"]["ignored_streams"] = []
    broken = replace(entry, fingerprint={**old, "ignored_streams": []})
    broken = replace(broken, fingerprint_sha256=canonical_sha256(broken.fingerprint))
    document["artifacts"]["clip.mp4"] = {**broken.to_json(), "entry_sha256": entry_sha256(broken)}
    where.write_text(json.dumps(document, indent=2))
    refused = pytester.runpytest("--lossless")
    assert refused.ret != 0
    refused.stdout.fnmatch_lines(["*does not match the stored file*"])


def test_framehash_extradata_line_is_parsed() -> None:
    """ffmpeg's ``#extradata N, size, hash`` header (captured): kept as the stream's extradata."""
    from pytest_lossless.media.probe import parse_framehash

    text = (
        "#format: frame checksums\n#version: 2\n#hash: SHA256\n"
        "#extradata 2,                              68, c6dd99\n"
        "#tb 2: 1/1000000\n#media_type 2: subtitle\n#codec_id 2: mov_text\n"
        "2,          0,          0,   500000,       13, bdee71\n"
    )
    parsed = parse_framehash(text)[2]
    assert parsed.header["extradata"] == "c6dd99"
    assert parsed.header["media_type"] == "subtitle"
    assert parsed.lines == [(0, 500000, 13, "bdee71")]
