"""The dependency floors that pyproject.toml states are the ones CI installs and tests."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _floors() -> dict[str, str]:
    pins = {}
    for line in (ROOT / ".ci" / "floors.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_every_runtime_floor_is_the_version_ci_tests() -> None:
    assert tomllib is not None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = _floors()
    for requirement in project["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)", requirement.replace(" ", ""))
        assert match, f"{requirement!r}: state a floor (name>=version) that CI can install"
        name, version = match.group(1).lower(), match.group(2)
        pinned = floors.get(name)
        assert pinned is not None, f"{name} is not in .ci/floors.txt"
        assert pinned.split(".")[: len(version.split("."))] == version.split(".") or (
            pinned == version
        ), f"{name}: pyproject says >={version}, .ci/floors.txt tests {pinned}"
