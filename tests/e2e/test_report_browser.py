"""The HTML report of a failing suite, opened in a real browser: headless Chromium.

The suite of ``test_html_report`` (a perturbed frame, audio sample and tensor element, a speed
gate and a control that is not repeatable) is run with ``--lossless``; its report is opened with
``--dump-dom``. The shipped page runs no script (its Content-Security-Policy forbids them), so a
copy of the folder gets a small probe script, allowed by its hash and nothing else, that writes
into the page what the browser loaded: every picture's size, the stylesheet, and every error.

Skipped, with the reason, where no Chromium is installed (Debian: ``chromium`` or
``chromium-headless-shell``; ``.ci/run`` installs one where it can). ``PYTEST_LOSSLESS_CHROMIUM``
names the browser to use.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.e2e.test_html_report import perturb_suite

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

#: Browser names tried on PATH, in order, when PYTEST_LOSSLESS_CHROMIUM is not set.
BROWSERS = (
    "chromium",
    "chromium-browser",
    "chromium-headless-shell",
    "google-chrome",
    "google-chrome-stable",
    "headless_shell",
)
ENV = "PYTEST_LOSSLESS_CHROMIUM"

#: Written into the copy of the page only. After ``load``, it records each picture (src,
#: complete, natural and drawn size), whether the stylesheet applied, and every error: script
#: errors, resources that failed to load (error events, captured), console.error and
#: console.warn calls, and Content-Security-Policy violations.
PROBE = """
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    var t = e.target;
    errors.push(t && t !== window ? "failed to load " + (t.src || t.href || t.tagName)
                                  : "error: " + e.message);
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    errors.push("unhandled rejection: " + e.reason);
  });
  document.addEventListener("securitypolicyviolation", function (e) {
    errors.push("policy violation: " + e.violatedDirective + " " + e.blockedURI);
  });
  ["error", "warn"].forEach(function (level) {
    var original = console[level];
    console[level] = function () {
      errors.push("console." + level + ": " + Array.prototype.join.call(arguments, " "));
      return original.apply(console, arguments);
    };
  });
  window.addEventListener("load", function () {
    var images = Array.prototype.map.call(document.images, function (img) {
      var box = img.getBoundingClientRect();
      return {src: img.getAttribute("src"), complete: img.complete,
              naturalWidth: img.naturalWidth, naturalHeight: img.naturalHeight,
              shownWidth: box.width, shownHeight: box.height};
    });
    var body = getComputedStyle(document.body);
    var pre = document.createElement("pre");
    pre.id = "lossless-probe";
    pre.textContent = JSON.stringify({images: images, errors: errors,
                                      maxWidth: body.maxWidth, ready: document.readyState});
    document.body.appendChild(pre);
  });
})();
"""


def find_chromium() -> str | None:
    """The browser to use: PYTEST_LOSSLESS_CHROMIUM (a path or a name on PATH), else the
    first of :data:`BROWSERS` on PATH."""
    named = os.environ.get(ENV)
    if named:
        found = shutil.which(named)
        if found is None:
            pytest.fail(f"{ENV}={named!r} is neither an executable nor a name on PATH")
        return found
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture
def chromium() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip(
            f"no headless Chromium: none of {', '.join(BROWSERS)} is on PATH and {ENV} is "
            "not set (Debian: apt-get install chromium-headless-shell, or chromium)"
        )
    return found


def dump_dom(browser: str, page: Path, profile: Path) -> tuple[str, str]:
    """Open ``page`` headless and return (the DOM after load, the browser's stderr)."""
    headless = "--headless" if "headless" in Path(browser).name else "--headless=new"
    command = [
        browser,
        headless,
        "--disable-gpu",
        "--no-sandbox",  # tests run as root, here and in CI
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--allow-file-access-from-files",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        "--enable-logging=stderr",
        "--v=0",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{command}\n{done.stderr[-4000:]}"
    return done.stdout, done.stderr


def console_lines(stderr: str) -> list[str]:
    """The browser log's lines about the page: console messages and uncaught errors."""
    return [
        line
        for line in stderr.splitlines()
        if ":CONSOLE" in line or "Uncaught" in line or "Refused to" in line
    ]


def with_probe(index: Path) -> Path:
    """A copy of the report folder whose page runs :data:`PROBE`: the script is added at the
    top of <head>, and the page's policy allows that script by its hash, nothing more."""
    copy = index.parent.parent / "report-probed"
    shutil.copytree(index.parent, copy)
    text = (copy / index.name).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(PROBE.encode("utf-8")).digest()).decode("ascii")
    assert text.count("script-src 'none'") == 1, "the page's policy no longer forbids scripts"
    text = text.replace("script-src 'none'", f"script-src 'sha256-{digest}'")
    head = '<meta charset="utf-8">'
    assert text.count(head) == 1
    text = text.replace(head, f"{head}<script>{PROBE}</script>")
    probed = copy / index.name
    probed.write_text(text, encoding="utf-8")
    return probed


def probe_result(dom: str) -> dict:
    found = re.search(r'<pre id="lossless-probe">(.*?)</pre>', dom, re.S)
    assert found, f"the probe wrote nothing: did its script run?\n{dom[:2000]}"
    return json.loads(html.unescape(found.group(1)))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    assert data[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


class _Sources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script" or any(name.startswith("on") for name, _ in attrs):
            self.scripts += 1
        if tag == "img":
            self.images.append(str(dict(attrs).get("src")))


@pytest.fixture
def failing_report(pytester: pytest.Pytester) -> Path:
    """The report of a suite with a failing frame, audio window and tensor, a speed gate and
    an INCONCLUSIVE (the suite of test_html_report, perturbed the same way)."""
    root = perturb_suite(pytester).path
    result = pytester.runpytest("--lossless")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("inconclusive")) == (3, 1), outcomes
    found = re.findall(r"pytest-lossless report: (\S+index\.html)", result.stdout.str())
    assert found, result.stdout.str()
    return root / found[-1]


def test_every_picture_of_a_failing_report_loads_in_chromium(failing_report, chromium, tmp_path):
    index = failing_report
    original = index.read_text(encoding="utf-8")
    # The shipped page runs nothing, and every picture is a relative path to a file in it.
    sources = _Sources()
    sources.feed(original)
    assert sources.scripts == 0
    # Frames are PNG pictures; charts (waveforms, histograms, speed blocks) are inline SVG with
    # real text since #22, so the pictures to load are the frames' and the charts are counted.
    assert len(sources.images) >= 1, sources.images
    assert original.count("<svg") >= 3, "the charts are not drawn inline"
    folder = index.parent.resolve()
    for src in sources.images:
        parts = urlsplit(src)
        assert not parts.scheme, src
        assert not parts.netloc, src
        assert not src.startswith("/"), src
        target = (index.parent / unquote(parts.path)).resolve()
        assert target.is_file(), src
        assert target.is_relative_to(folder), src

    # The page as shipped: the browser loads it without a console message or an error.
    dom, stderr = dump_dom(chromium, index, tmp_path / "profile-plain")
    assert "pytest-lossless report" in dom
    assert console_lines(stderr) == [], stderr[-4000:]

    # The probed copy: every picture loaded, at its PNG's size, and shown with a size.
    probed = with_probe(index)
    dom, stderr = dump_dom(chromium, probed, tmp_path / "profile-probed")
    result = probe_result(dom)
    assert result["errors"] == [], result["errors"]
    assert console_lines(stderr) == [], stderr[-4000:]
    assert result["maxWidth"] == "1400px", "the stylesheet did not apply"
    assert [image["src"] for image in result["images"]] == sources.images
    for image in result["images"]:
        width, height = png_size(probed.parent / unquote(image["src"]))
        assert image["complete"], image
        assert (image["naturalWidth"], image["naturalHeight"]) == (width, height), image
        assert min(width, height) > 0, image
        assert min(image["shownWidth"], image["shownHeight"]) > 0, image
    # The shipped report is untouched: the probe lives in the copy only.
    assert index.read_text(encoding="utf-8") == original
    assert "<script" not in original


def test_the_probe_sees_a_broken_picture(chromium, tmp_path):
    """The checks above can fail: a missing and an empty picture, and a script that the
    page's policy blocks, are each caught."""
    folder = tmp_path / "report"
    (folder / "pictures").mkdir(parents=True)
    (folder / "pictures" / "empty.png").write_bytes(b"")
    (folder / "index.html").write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="script-src \'none\'">'
        '<title>t</title></head><body><img src="pictures/empty.png">'
        '<img src="pictures/missing.png"><script>document.title = "ran"</script></body></html>',
        encoding="utf-8",
    )
    probed = with_probe(folder / "index.html")
    dom, stderr = dump_dom(chromium, probed, tmp_path / "profile")
    result = probe_result(dom)
    assert [i["naturalWidth"] for i in result["images"]] == [0, 0]
    assert len([e for e in result["errors"] if e.startswith("failed to load")]) == 2
    assert [e for e in result["errors"] if e.startswith("policy violation: script-src")]
    assert "<title>ran</title>" not in dom
    assert console_lines(stderr), stderr[-4000:]
