"""The settings resolver: precedence, parsing, and errors that name their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_lossless.errors import ConfigError
from pytest_lossless.settings import (
    OPTIONS,
    marker_device_count,
    parse_device_list,
    resolve,
)


def _resolve(cli=None, ini=None, env=None, root=Path("/repo")):
    return resolve(cli or {}, ini or {}, env or {}, rootdir=root)


def test_defaults_are_sane():
    settings = _resolve()
    assert settings.lossless is False
    assert settings.backend == "auto"
    assert settings.goldens == Path("/repo/goldens")
    assert settings.control_runs == 2
    assert settings.repeat_producers is False  # compare mode runs a producer once (#25)
    assert settings.lock_timeout == 600.0
    assert settings.devices is None
    assert settings.sources["backend"] == "default"


def test_cli_beats_env_beats_ini():
    ini = {"backend": "cuda", "lock_timeout": "30"}
    env = {"PYTEST_LOSSLESS_BACKEND": "npu"}
    assert _resolve(ini=ini).backend == "cuda"
    assert _resolve(ini=ini, env=env).backend == "npu"
    settings = _resolve(cli={"backend": "cpu"}, ini=ini, env=env)
    assert settings.backend == "cpu"
    assert settings.sources["backend"] == "--lossless-backend"
    assert settings.lock_timeout == 30.0
    assert settings.sources["lock_timeout"] == "ini lossless_lock_timeout"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0,1,2", ("0", "1", "2")),
        ("0-3", ("0", "1", "2", "3")),
        ("GPU-a, GPU-b", ("GPU-a", "GPU-b")),
        ("4 5", ("4", "5")),
    ],
)
def test_device_lists(text, expected):
    assert parse_device_list(text) == expected


@pytest.mark.parametrize("text", ["0,0", "3-1"])
def test_bad_device_lists(text):
    with pytest.raises(ValueError):
        parse_device_list(text)


def test_bad_value_names_its_source():
    with pytest.raises(ConfigError) as info:
        _resolve(ini={"control_runs": "1"})
    assert "ini lossless_control_runs" in str(info.value)
    assert "at least 2" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _resolve(env={"PYTEST_LOSSLESS_LOCK_TIMEOUT": "soon"})
    assert "environment PYTEST_LOSSLESS_LOCK_TIMEOUT" in str(info.value)


@pytest.mark.parametrize(
    ("text", "size"), [("1MiB", 1 << 20), ("512KiB", 512 << 10), ("100", 100), ("2M", 2 << 20)]
)
def test_sizes(text, size):
    assert _resolve(ini={"digest_above": text}).digest_above == size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("2.5s", 2.5), ("10m", 600.0), ("1h", 3600.0), ("250ms", 0.25)],
)
def test_durations(text, seconds):
    assert _resolve(cli={"lock_timeout": text}).lock_timeout == seconds


def test_every_option_has_a_prefixed_ini_key():
    assert all(spec.ini.startswith("lossless_") for spec in OPTIONS)


def test_marker_device_count():
    assert marker_device_count((), {}, "npu") == 1
    assert marker_device_count((), {"devices": 4}, "npu") == 4
    assert marker_device_count((2,), {}, "gpu") == 2
    for bad in ({"devices": 0}, {"devices": "2"}, {"devices": True}, {"count": 2}):
        with pytest.raises(ConfigError) as info:
            marker_device_count((), bad, "npu")
        assert "marker npu" in str(info.value)


def test_extra_determinism_knobs():
    settings = _resolve(ini={"determinism_env": "MY_SEED, OTHER"})
    assert settings.determinism_knobs[-2:] == ("MY_SEED", "OTHER")
    assert "CUBLAS_WORKSPACE_CONFIG" in settings.determinism_knobs


def test_a_huge_device_range_is_refused_at_once():
    with pytest.raises(ValueError, match="more than 4096"):
        parse_device_list("0-99999999")


def test_a_broken_range_is_not_taken_for_a_device_id():
    with pytest.raises(ValueError, match="looks like a range"):
        parse_device_list("0-x")
    assert parse_device_list("GPU-1a2b-3c4d") == ("GPU-1a2b-3c4d",)


def test_repeat_producers_is_a_flag_and_an_ini_setting():
    assert _resolve(cli={"repeat_producers": True}).repeat_producers is True
    assert _resolve(ini={"repeat_producers": "true"}).repeat_producers is True
    with pytest.raises(ConfigError) as info:
        _resolve(ini={"repeat_producers": "twice"})
    assert "ini lossless_repeat_producers" in str(info.value)


def test_boolean_ini_keys_are_typed_bool_in_help(pytester: pytest.Pytester) -> None:
    """--help says "(bool)" for a boolean ini key, not "(string)"; the value still resolves."""
    result = pytester.runpytest("--help")
    lines = [" ".join(line.split()) for line in result.outlines]
    assert any(line.startswith("lossless_enabled (bool):") for line in lines)
    assert any(line.startswith("lossless_no_canary (bool):") for line in lines)
    assert any(line.startswith("lossless_goldens (string):") for line in lines)
    assert not any(line.startswith("lossless_enabled (string)") for line in lines)


def test_a_boolean_ini_key_resolves_and_a_bad_one_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_x="""
def test_on(pytestconfig):
    from pytest_lossless.plugin.config import settings
    assert settings(pytestconfig).no_canary is True
"""
    )
    pytester.makeini("[pytest]\nlossless_no_canary = yes\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\nlossless_no_canary = maybe\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stderr.fnmatch_lines(["*pytest-lossless: ini lossless_no_canary:*expected a boolean*"])
