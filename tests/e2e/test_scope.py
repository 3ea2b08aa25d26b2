"""End to end: ``golden.check(..., scope="device")`` picks the golden of the allocation's
environment class: a cpu-slot run and a run on a backend of another model name (a conftest
backend plugin) keep and choose different goldens."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy  # noqa: F401  (imported before in-process pytester runs: numpy cannot load twice)
import pytest

pytestmark = pytest.mark.slow

#: A backend of a plugin, named npu, whose devices are of a model no real host has.
CONFTEST = """
from pytest_lossless.devices import Device

class FakeNpu:
    name = "npu"
    emulated = False
    observes_usage = True

    def available(self):
        return True

    def discover(self):
        return [Device(id=str(i), name="Fake NPU 910Z", bus_id=f"0000:c{i}:00.0", backend="npu")
                for i in range(2)]

    def visibility_env(self, devices):
        return {"ASCEND_RT_VISIBLE_DEVICES": ",".join(d.id for d in devices)}

    def foreign_processes(self, devices):
        return []

    def runtime(self):
        return "CANN 9"

def pytest_lossless_backends():
    return [FakeNpu()]
"""

TESTS = """
import numpy as np
import pytest

@pytest.mark.npu
@pytest.mark.lossless
def test_scoped(golden, devices):
    # What a device computes is not what the cpu path computes: one golden each.
    value = 1.0 if devices.backend == "cpu" else 2.0
    golden.check("out.npy", np.full(4, value, dtype=np.float32), scope="device")
    golden.check("config.npy", np.arange(3))  # the default scope: one golden for all

@pytest.mark.lossless
def test_unallocated(golden):
    golden.check("x.npy", np.zeros(2), scope="device")
"""

CPU = f"cpu__cpu_slot__{platform.machine()}"
FAKE = "npu__Fake_NPU_910Z__CANN_9"


def _run(pytester: pytest.Pytester, locks: Path, backend: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(
        f"--lossless-backend={backend}", f"--lossless-lock-dir={locks}", "-k", "scoped", *args
    )


def test_a_cpu_slot_run_and_a_fake_identity_run_pick_different_goldens(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_scope=TESTS)
    locks = tmp_path / "locks"
    scoped = pytester.path / "goldens/test_scope/test_scoped@device"

    assert _run(pytester, locks, "cpu", "--update-goldens").ret == 0
    manifest = json.loads((scoped / CPU / "manifest.json").read_text())
    entry = manifest["artifacts"]["out.npy"]
    assert entry["scope"] == "device"
    assert entry["environment"] == {
        "backend": "cpu",
        "model": "cpu slot",
        "runtime": platform.machine(),
    }
    assert sorted(manifest["artifacts"]) == ["out.npy"]
    plain = json.loads((pytester.path / "goldens/test_scope/test_scoped/manifest.json").read_text())
    assert sorted(plain["artifacts"]) == ["config.npy"]
    assert "scope" not in plain["artifacts"]["config.npy"]

    # Another environment class with no golden of its own: says which, which exist, and how.
    result = _run(pytester, locks, "npu", "--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no golden 'out.npy' of scope 'device' for this environment, npu / Fake NPU 910Z / "
            "CANN 9, in *test_scoped@device/npu__Fake_NPU_910Z__CANN_9: goldens of scope "
            f"'device' exist for cpu / cpu slot / {platform.machine()}. Create it with "
            "--update-goldens on a npu / Fake NPU 910Z / CANN 9 machine*",
        ]
    )
    assert not (scoped / FAKE).exists()

    assert _run(pytester, locks, "npu", "--update-goldens").ret == 0
    fake = json.loads((scoped / FAKE / "manifest.json").read_text())["artifacts"]["out.npy"]
    assert fake["environment"]["model"] == "Fake NPU 910Z"
    assert fake["sha256"] != entry["sha256"]  # two goldens, one per class

    # Each run is judged by its own class's golden: both pass, though their outputs differ.
    assert _run(pytester, locks, "cpu", "--lossless").ret == 0
    assert _run(pytester, locks, "npu", "--lossless").ret == 0
    receipt = json.loads(
        max((pytester.path / "lossless-receipts").rglob("*test_scoped*.json")).read_text()
    )
    folders = {g["artifact"]: g["evidence"]["golden"]["folder"] for g in receipt["gates"]}
    assert folders["out.npy"].endswith(f"test_scoped@device/{FAKE}")
    assert folders["config.npy"].endswith("test_scope/test_scoped")
    # And a cpu-slot output judged against the fake class's golden would have failed.
    (scoped / CPU / "manifest.json").write_text((scoped / FAKE / "manifest.json").read_text())
    result = _run(pytester, locks, "cpu", "--lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ManifestError*Fake NPU 910Z*folder of scope 'device' for cpu*"])


def test_a_device_scoped_check_without_an_allocation_is_a_clear_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_scope=TESTS)
    result = pytester.runpytest("--update-goldens", "-k", "unallocated")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ConfigError: golden.check(scope='device')='test_scope.py::test_unallocated': a "
            "device-scoped golden is chosen by the test's device allocation, and this test holds "
            "none: mark it @pytest.mark.npu or @pytest.mark.gpu*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert not (pytester.path / "goldens").exists()


def test_a_golden_moved_to_the_device_scope_leaves_the_default_folder_under_update(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    test = """
import numpy as np
import pytest

@pytest.mark.npu
@pytest.mark.lossless
def test_moved(golden):
    golden.check("out.npy", np.arange(4), SCOPE)
"""
    locks = f"--lossless-lock-dir={tmp_path / 'locks'}"
    pytester.makepyfile(test_moved=test.replace("SCOPE", "scope=None"))
    assert pytester.runpytest("--update-goldens", "--lossless-backend=cpu", locks).ret == 0
    pytester.makepyfile(test_moved=test.replace("SCOPE", "scope='device'"))
    result = pytester.runpytest("--update-goldens", "--lossless-backend=cpu", locks)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*created: 1*", "*removed: 1*"])
    default = pytester.path / "goldens/test_moved/test_moved/manifest.json"
    assert json.loads(default.read_text())["artifacts"] == {}
    assert (pytester.path / f"goldens/test_moved/test_moved@device/{CPU}/manifest.json").is_file()
    assert pytester.runpytest("--lossless", "--lossless-backend=cpu", locks).ret == 0
