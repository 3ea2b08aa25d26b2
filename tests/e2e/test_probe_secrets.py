"""End to end, from outside (#20): a secret on pytest's own command line (an option a conftest
adds, a URL with a password) never reaches the manifest committed beside the goldens, nor the
``export.json`` a CI uploads; receipts already redacted it."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--api-key", default=None)
    parser.addoption("--db-url", default=None)
"""

PROJECT = """
import os
import numpy as np

def test_a(golden):
    golden.check("o.npy", np.arange(3) + int(os.environ.get("PROBE_SHIFT", "0")))
"""

KEY = "sk-probe-4f1d9a7c2e"
PASSWORD = "pw-probe-93b1c7"
SECRETS = ("--api-key=" + KEY, "--db-url", f"postgres://user:{PASSWORD}@db.example/x")


def test_secrets_in_pytest_argv_stay_out_of_goldens_and_exports(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_p=PROJECT)
    made = pytester.runpytest("-p", "no:cacheprovider", "--update-goldens", *SECRETS)
    made.assert_outcomes(passed=1)
    manifest = (pytester.path / "goldens/test_p/test_a/manifest.json").read_text()
    assert KEY not in manifest
    assert PASSWORD not in manifest
    command = json.loads(manifest)["artifacts"]["o.npy"]["provenance"]["command"]
    assert command[0] == "pytest"
    assert "--update-goldens" in command
    assert any(arg.startswith("--api-key=<redacted sha256:") for arg in command), command

    monkeypatch.setenv("PROBE_SHIFT", "1")
    failed = pytester.runpytest(
        "-p", "no:cacheprovider", "--lossless", "--lossless-export", "exp", *SECRETS
    )
    failed.assert_outcomes(failed=1)
    exported = (pytester.path / "exp/export.json").read_text()
    assert "--lossless-export" in exported
    assert KEY not in exported
    assert PASSWORD not in exported
    for path in (pytester.path / "lossless-receipts").rglob("*.json"):
        assert KEY not in path.read_text(), path
