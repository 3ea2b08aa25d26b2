"""The light modules load no numpy when imported (#19).

import-linter checks the imports written in the light modules (pyproject's contract); its one
ignored edge, ``core.artifact -> numpy`` (``materialize`` writes an array a test handed over
with numpy, imported inside that call for a value that is not a path), is checked here at run
time instead: importing the value types loads none of numpy, nor does a path handed over.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LIGHT = (
    "pytest_lossless.core.artifact",
    "pytest_lossless.core.digests",
    "pytest_lossless.gates.gate",
    "pytest_lossless.hookspecs",
)


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"import json, sys\n{code}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_value_types_loads_no_numpy() -> None:
    imports = "\n".join(f"import {name}" for name in LIGHT)
    assert _loaded_after(f"{imports}\nfrom pytest_lossless.hookspecs import Artifact") == []


def test_materializing_a_path_loads_no_numpy_and_an_array_does(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"abc")
    plain = (
        "from pathlib import Path\n"
        "from pytest_lossless.core.artifact import materialize\n"
        f"folder = Path({str(tmp_path)!r})\n"
        "assert materialize(folder / 'a.bin', 'a.bin', folder) == folder / 'a.bin'\n"
    )
    assert _loaded_after(plain) == []
    array = plain + "import numpy as np\nmaterialize(np.arange(3), 'c', folder)\n"
    assert "numpy" in _loaded_after(array)
    assert (tmp_path / "c.npy").is_file()
