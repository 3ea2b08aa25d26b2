"""End to end: the HTML report of a real session, with real ffmpeg and libsndfile.

A suite whose goldens were written by ``--update-goldens`` is run again on perturbed media (one
pixel of one frame, one audio sample, one tensor element), beside a speed gate and a control that
is not repeatable; the report must show each of them, failures first, with pictures that lie in
the report folder.
"""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

from pytest_lossless.report.raster import Canvas
from tests.e2e.mediagen import FFMPEG, gray_frames, tone, write_video, write_wav

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SUITE = """
import itertools
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_video(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")

@pytest.mark.lossless
def test_audio(golden):
    golden.check("audio.wav", HERE / "audio.wav")

@pytest.mark.lossless
def test_tensor(golden):
    golden.check("latent.npy", np.load(HERE / "latent.npy", allow_pickle=False))

TIMES = itertools.count()

def arm(base):
    def run():
        return base * (1 + (next(TIMES) % 5) / 100)
    return run

@pytest.mark.lossless
def test_speed(speed_gate):
    speed_gate(arm(0.03), arm(0.01), target=0.30, workload="5s", seed=1)

RUNS = itertools.count()

def flaky():
    out = {"latent.npy": np.arange(12, dtype=np.float32)}
    out["latent.npy"][3] += next(RUNS)
    return out

@pytest.mark.lossless
def test_racy_control(lossless):
    lossless.compare(flaky, flaky, runs=3, label="racy control")
"""

#: The pixel changed in the obtained clip: frame, row, column of the luma plane.
FRAME, ROW, COLUMN = 5, 10, 20


class _Page(HTMLParser):
    """Every link and picture of the page, the verdicts of the table's rows in order, ids,
    figure captions, and anything that would run a script."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.verdicts: list[str] = []
        self.captions: list[str] = []
        self.scripts: list[str] = []
        self._stack: list[str] = []
        self._in_table = False
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" or any(name.startswith("on") for name, _ in attrs):
            self.scripts.append(tag)
        for name in ("href", "src"):
            if values.get(name) is not None:
                self.links.append(str(values[name]))
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "table" and "verdicts" in (values.get("class") or ""):
            self._in_table = True
        if self._in_table and tag == "span" and "verdict" in (values.get("class") or ""):
            self._cell = []
        if tag == "figcaption":
            self._caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_table = False
        if tag == "span" and self._cell is not None:
            self.verdicts.append("".join(self._cell))
            self._cell = None
        if tag == "figcaption" and self._caption is not None:
            self.captions.append("".join(self._caption))
            self._caption = None

    def handle_data(self, data: str) -> None:
        for part in (self._cell, self._caption):
            if part is not None:
                part.append(data)


def _read_png(path: Path) -> np.ndarray:
    """Decode a PNG with ffmpeg (a decoder that is not ours) into (height, width, 3) pixels."""
    probe = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True)
    width, height = map(int, re.search(rb", (\d+)x(\d+)", probe.stderr).groups())
    raw = subprocess.run(
        [FFMPEG, "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True,
        check=True,
    ).stdout
    return np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3)


@pytest.fixture
def perturbed(pytester: pytest.Pytester) -> pytest.Pytester:
    """Goldens written from clean media, then the media perturbed in one place each."""
    return perturb_suite(pytester)


def perturb_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """:data:`SUITE` with goldens written from clean media, then the clip, the track and the
    latent each changed in one place (frame FRAME at ROW, COLUMN; sample 700; element [3, 4])."""
    root = pytester.path
    frames = gray_frames()
    write_video(root / "clip.mp4", frames)
    samples = tone()
    write_wav(root / "audio.wav", samples)
    latent = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    np.save(root / "latent.npy", latent)
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest("--update-goldens").assert_outcomes(passed=3, skipped=2)
    frames[FRAME][ROW * 64 + COLUMN] += 9
    write_video(root / "clip.mp4", frames)
    samples[700] += 5
    write_wav(root / "audio.wav", samples)
    latent[3, 4] = np.nextafter(latent[3, 4], np.float32(2))
    np.save(root / "latent.npy", latent)
    return pytester


def _report(result: pytest.RunResult, root: Path) -> Path:
    """The report the summary names (relative to the rootdir)."""
    found = re.findall(r"pytest-lossless report: (\S+index\.html)", result.stdout.str())
    assert found, result.stdout.str()
    return root / found[-1]


def _check_report(index: Path) -> _Page:
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    folder = index.parent.resolve()
    assert not page.scripts
    for link in page.links:
        parts = urlsplit(link)
        assert not parts.scheme, link
        assert not parts.netloc, link
        assert not link.startswith("/"), link
        if not parts.path:
            assert parts.fragment in page.ids, link
            continue
        target = (index.parent / unquote(parts.path)).resolve()
        assert target.is_file(), link
        assert target.is_relative_to(folder), link
    return page


def test_report_shows_every_failure_first_with_its_picture(perturbed):
    result = perturbed.runpytest("--lossless")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed"), outcomes.get("inconclusive")) == (
        3,
        1,
        1,
    ), outcomes
    index = _report(result, perturbed.path)
    assert index.parent.name == "report"
    assert index.parent.parent.parent.name == "lossless-receipts"  # in the session's folder
    assert (index.parent.parent / "INDEX.json").is_file()
    page = _check_report(index)
    assert page.verdicts == ["FAIL", "FAIL", "FAIL", "INCONCLUSIVE", "PASS"]
    pictures = [link for link in page.links if link.endswith(".png")]
    # The frame is a picture; the audio window, the tensor histogram, the speed plot and the
    # tensor that varied between control runs are charts, inline SVG with real text (#22:
    # they were PNGs drawn with a bitmap font).
    assert any(re.search(rf"frame{FRAME}\.png$", link) for link in pictures), page.links
    assert index.read_text(encoding="utf-8").count('<svg xmlns="http://www.w3.org/2000/svg"') >= 4
    frame = [c for c in page.captions if c.startswith(f"frame {FRAME}, pts")]
    assert len(frame) == 1, page.captions
    assert "1 pixel of 3072 differ in RGB" in frame[0]
    audio = [c for c in page.captions if "first differing sample 700 (channel 0" in c]
    assert audio, page.captions
    assert any(
        "over the 1 differing element of" in c and "1 unit in the last place" in c
        for c in page.captions
    ), page.captions
    assert any("the dashed red line the target (ratio <= 0.700)" in c for c in page.captions)
    text = index.read_text(encoding="utf-8")
    assert "Which runs differed, and where" in text
    assert "control#1 vs control#2" in text


def test_the_video_picture_shows_the_frame_index(perturbed):
    index = _report(perturbed.runpytest("--lossless", "-k", "video"), perturbed.path)
    page = _check_report(index)
    src = next(link for link in page.links if re.search(rf"frame{FRAME}\.png$", link))
    pixels = _read_png(index.parent / src)
    # pts in the stream's own time base, 1/12288 at 24 fps in MP4 (#20: exact, not frames)
    caption = f"frame {FRAME}, pts {FRAME * 512} = {FRAME / 24:.6f} s"
    label = Canvas(pixels.shape[1], pixels.shape[0])
    label.text(8, 8, caption)
    ink = (label.pixels != 255).any(axis=2)
    region = ink[:20, : 8 + len(caption) * 8]
    assert region.any()
    drawn = (pixels[:20, : 8 + len(caption) * 8] < 128).all(axis=2)
    assert np.array_equal(drawn, region)
    # The difference panel (the third) is lit where the pixel changed, and only there.
    width = (pixels.shape[1] - 4 * 8) // 3
    scale = width // 64
    panel = pixels[8 + 2 * 16 :, 8 + 2 * (width + 8) : 8 + 2 * (width + 8) + width]
    lit = (panel[: 48 * scale, :, 0] >= 128) & (panel[: 48 * scale, :, 1] >= 128)
    rows, cols = np.nonzero(lit)
    assert rows.min() // scale == ROW
    assert cols.min() // scale == COLUMN
    assert rows.max() // scale == ROW
    assert cols.max() // scale == COLUMN


def test_workers_rows_reach_the_report(perturbed):
    result = perturbed.runpytest("--lossless", "-n", "2", "-p", "xdist")
    index = _report(result, perturbed.path)
    page = _check_report(index)
    assert page.verdicts == ["FAIL", "FAIL", "FAIL", "INCONCLUSIVE", "PASS"]
    assert any(c.startswith(f"frame {FRAME}, pts") for c in page.captions)


SECRETS = """
import sys

import pytest

OUT = {"out.txt": "{out}/out.txt"}
SECRET = "hunter2-report"

def run(model_run, text):
    code = f"import sys, pathlib; pathlib.Path(sys.argv[1]).write_text({text!r})"
    argv = [sys.executable, "-c", code, "{out}/out.txt", f"--api-key={SECRET}", "--token", SECRET]
    return lambda: model_run(argv, outputs=OUT, env={"HF_TOKEN": SECRET})

@pytest.mark.lossless
def test_compare(model_run, lossless):
    lossless.compare(run(model_run, "a"), run(model_run, "b"), label="candidate with secrets")
"""


def test_no_secret_reaches_the_report(pytester):
    pytester.makepyfile(test_secrets=SECRETS)
    index = _report(pytester.runpytest("--lossless"), pytester.path)
    _check_report(index)
    text = "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for p in index.parent.rglob("*")
        if p.suffix in (".html", ".txt", ".css")
    )
    assert "candidate with secrets" in text
    assert "The control is repeatable, but the candidate differs from it" in text
    assert "hunter2-report" not in text


DIGEST_ONLY = """
from pathlib import Path

import pytest

HERE = Path(__file__).parent

@pytest.mark.lossless
def test_video(golden):
    golden.check("clip.mp4", HERE / "clip.mp4")
"""


@pytest.fixture
def digest_only(pytester: pytest.Pytester) -> pytest.Pytester:
    """A clip whose golden is kept as digests only (--lossless-digest-above 1), written with a
    content store, then one pixel of it changed."""
    frames = gray_frames()
    write_video(pytester.path / "clip.mp4", frames)
    pytester.makepyfile(test_digest=DIGEST_ONLY)
    pytester.makeini("[pytest]\nlossless_digest_above = 1\n")
    pytester.runpytest("--update-goldens", "--lossless-store", "store").assert_outcomes(passed=1)
    frames[FRAME][ROW * 64 + COLUMN] += 9
    write_video(pytester.path / "clip.mp4", frames)
    return pytester


def test_the_store_keeps_digest_only_goldens_whole(digest_only):
    import json

    manifest = next((digest_only.path / "goldens").rglob("manifest.json"))
    entry = json.loads(manifest.read_text())["artifacts"]["clip.mp4"]
    assert entry["stored"] == "digest"
    assert not (manifest.parent / "clip.mp4").exists()
    kept = digest_only.path / "store" / "sha256" / entry["sha256"][:2] / entry["sha256"][2:]
    assert kept.is_file()


def test_the_report_draws_a_digest_only_golden_from_the_store(digest_only):
    result = digest_only.runpytest("--lossless", "--lossless-store", "store")
    result.assert_outcomes(failed=1)
    page = _check_report(_report(result, digest_only.path))
    frame = [c for c in page.captions if c.startswith(f"frame {FRAME}, pts")]
    assert frame, page.captions
    assert "1 pixel of 3072 differ in RGB" in frame[0], page.captions


def test_without_a_store_the_report_says_the_golden_pixels_were_not_kept(digest_only):
    result = digest_only.runpytest("--lossless")
    index = _report(result, digest_only.path)
    _check_report(index)
    assert "the golden pixels were not kept (no lossless_store)" in index.read_text()


def test_a_damaged_file_in_the_store_is_refused_and_named(digest_only):
    kept = next(p for p in (digest_only.path / "store").rglob("*") if p.is_file())
    kept.chmod(0o644)
    kept.write_bytes(b"not the clip")
    index = _report(
        digest_only.runpytest("--lossless", "--lossless-store", "store"), digest_only.path
    )
    text = index.read_text()
    assert "the stored golden is refused" in text
    assert kept.name in text
