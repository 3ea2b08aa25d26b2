"""An installed plugin costs a repository's plain tests nothing (issue #16 item 4).

Timing is the benchmark's job (``benchmarks/bench_idle.py``); here the mechanism is checked: a
test that uses none of the plugin's markers or fixtures gets no fixture of ours, no stash entry
and no attribute on its reports, while a marked test nearby still gets all of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_plain_tests_get_nothing_of_ours(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import json, pytest

        SEEN = []

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_logreport(report):
            ours = sorted(k for k in vars(report) if k.startswith("lossless"))
            SEEN.append({"test": report.nodeid.split("::")[-1], "when": report.when,
                         "attributes": ours})

        def pytest_sessionfinish(session):
            with open("seen.json", "w") as out:
                json.dump(SEEN, out)
        """
    )
    pytester.makepyfile(
        test_mixed="""
        import pytest

        from pytest_lossless.plugin.devices import ALLOCATION_KEY
        from pytest_lossless.plugin.outcomes import ROWS_KEY
        from pytest_lossless.plugin.evidence import RECEIPT_KEY

        def test_plain(request):
            assert request.fixturenames == ["request"], request.fixturenames
            for key in (ALLOCATION_KEY, ROWS_KEY, RECEIPT_KEY):
                assert key not in request.node.stash

        @pytest.mark.parametrize("n", range(3))
        def test_plain_parametrized(n):
            pass

        @pytest.mark.npu
        def test_marked(request):
            assert "devices" in request.fixturenames
        """
    )
    result = pytester.runpytest("--lossless-backend=cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    seen = json.loads((pytester.path / "seen.json").read_text())
    plain = [s for s in seen if s["test"].startswith("test_plain")]
    marked = [s for s in seen if s["test"] == "test_marked"]
    assert len(plain) == 12
    assert all(s["attributes"] == [] for s in plain), plain
    assert marked
    assert all("lossless_gate" in s["attributes"] for s in marked), marked


def test_a_plain_session_loads_no_domain_module(tmp_path: Path) -> None:
    """Loading the plugin for a session of plain tests imports none of numpy, the media, the
    judges, the comparers or the receipts: the import is what every plain session pays."""
    (tmp_path / "test_plain.py").write_text("def test_one():\n    pass\n")
    probe = (
        "import sys, pytest\n"
        "code = pytest.main(['-q', '-p', 'no:cacheprovider', sys.argv[1]])\n"
        "heavy = sorted(m for m in sys.modules if m == 'numpy' or m.startswith(("
        "'pytest_lossless.media', 'pytest_lossless.judge', "
        "'pytest_lossless.kinds', 'pytest_lossless.gates.lossy', "
        "'pytest_lossless.evidence.receipts', 'pytest_lossless.evidence.export_index', "
        "'pytest_lossless.evidence.verify', 'pytest_lossless.report.html')))\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
        | {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
    # Our plugin modules are imported by pytest in order, each before any other needs it.
    assert "PytestAssertRewriteWarning" not in done.stdout, done.stdout


def test_where_bytecode_is_not_written_none_of_ours_is_rewritten(tmp_path: Path) -> None:
    """pytest marks a plugin's whole distribution for assertion rewriting, and its rewriting
    importer compiles from source on every run under ``PYTHONDONTWRITEBYTECODE=1``; our
    modules (no test assertions in them) are left to Python's importer (#21)."""
    (tmp_path / "test_plain.py").write_text("def test_one():\n    pass\n")
    probe = (
        "import sys, pytest\n"
        "from _pytest.assertion.rewrite import AssertionRewritingHook as Hook\n"
        "code = pytest.main(['-q', '-p', 'no:cacheprovider', sys.argv[1]])\n"
        "names = sorted(m for m in sys.modules if m.startswith(('pytest_lossless', 'test_')))\n"
        "print('REWRITTEN', [m for m in names if isinstance(sys.modules[m].__loader__, Hook)])\n"
        "print('LOADED', names)\n"
        "sys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "CI")}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env | {"PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("REWRITTEN "))
    rewritten = json.loads(line.split(" ", 1)[1].replace("'", '"'))
    loaded = next(x for x in done.stdout.splitlines() if x.startswith("LOADED "))
    assert "pytest_lossless.plugin.golden" in loaded  # the adapter was loaded ...
    assert "test_plain" in rewritten  # ... and the checker sees rewriting
    # The package and the entry point itself are imported by pytest before they can say so
    # (where pytest marked them at all: an editable install lists no module for it to mark).
    ours = [m for m in rewritten if m.startswith("pytest_lossless")]
    assert set(ours) <= {"pytest_lossless", "pytest_lossless.plugin"}, rewritten
