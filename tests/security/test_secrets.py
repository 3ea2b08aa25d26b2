"""Secrets stay out of what CI uploads (issue #11, Build item 6).

Values of argv options and environment overrides whose names look secret, and assignments of
secret-looking names in the dirty diff, are replaced by ``<redacted sha256:XXXXXXXXXXXX>``
(a truncated SHA-256 of the value, so two runs still compare) in receipts, the stored ``.diff``,
RunError messages, the terminal and JUnit; ``verify`` still agrees with the receipt.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_lossless.core.redact import Redactor, marker, parse_patterns, scrub
from pytest_lossless.errors import ConfigError, RunError
from pytest_lossless.evidence.receipts import Receipt, load_json
from pytest_lossless.evidence.verify import verify
from pytest_lossless.run import Launcher
from pytest_lossless.settings import resolve

SECRET = "hunter2"
MARK = f"<redacted sha256:{hashlib.sha256(SECRET.encode()).hexdigest()[:12]}>"


def _no_secret(text: str, secret: str = SECRET) -> None:
    assert secret not in text, f"{secret!r} leaked into:\n{text}"


# ---------------------------------------------------------------- the rules


def test_marker_is_a_truncated_sha256_of_the_value() -> None:
    assert marker(SECRET) == MARK
    assert marker(SECRET) == marker(SECRET)  # two runs compare
    assert marker("hunter3") != MARK


def test_argv_secret_options_in_both_forms() -> None:
    redactor = Redactor()
    argv = [
        "serve",
        "--api-key=hunter2",
        "--token",
        "tok-123456",
        "--password",
        "pw-123456",
        "--secret=s3cr3t-value",
        "--auth-token",
        "auth-123456",
        "--hf_token=hf-123456",
        "-H",
        "Authorization: Bearer bearer-123456",
        "--header",
        "X-Api-Key: xkey-123456",
        "api_key=hydra-123456",
        "https://user:url-123456@example.com/x",
    ]
    shown, found = redactor.argv(argv)
    for value in (
        "hunter2",
        "tok-123456",
        "pw-123456",
        "s3cr3t-value",
        "auth-123456",
        "hf-123456",
        "bearer-123456",
        "xkey-123456",
        "hydra-123456",
        "url-123456",
    ):
        _no_secret(" ".join(shown), value)
        assert any(value in hidden for hidden in found)
    assert shown[:4] == ["serve", f"--api-key={MARK}", "--token", marker("tok-123456")]
    assert shown[11] == f"Authorization: {marker('Bearer bearer-123456')}"
    assert shown[-1] == f"https://user:{marker('url-123456')}@example.com/x"


def test_argv_options_that_only_look_alike_are_kept() -> None:
    argv = [
        "--max-tokens",
        "128",
        "--tokenizer",
        "/models/tok",
        "--max-num-batched-tokens=4096",
        "--keyframe-interval",
        "5",
        "--no-auth",
        "--port",
        "8000",
        "--token",
        "--verbose",
        "--author",
        "me",
    ]
    shown, found = Redactor().argv(argv)
    assert shown == argv
    assert found == []


def test_env_names_that_look_secret_keep_their_names() -> None:
    env = {
        "OPENAI_API_KEY": "sk-123456",
        "HF_TOKEN": "hf-123456",
        "AWS_SECRET_ACCESS_KEY": "aws-123456",
        "DB_PASSWORD": "db-123456",
        "MYSQL_PASSWD": "my-123456",
        "GOOGLE_APPLICATION_CREDENTIALS": "/secret/creds.json",
        "PROXY_AUTH": "proxy-123456",
        "apiKey": "camel-123456",
        "GONE_TOKEN": None,
        "TOKENIZERS_PARALLELISM": "false",
        "CUDA_VISIBLE_DEVICES": "0",
        "PWD": "/work",
        "GIT_AUTHOR_NAME": "me",
        "DATABASE_URL": "postgres://app:dburl-123456@db/app",
    }
    shown, found = Redactor().env(env)
    assert list(shown) == list(env)  # names are never redacted
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"):
        assert shown[name] == marker(str(env[name]))
    for name in ("MYSQL_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "PROXY_AUTH", "apiKey"):
        assert shown[name] == marker(str(env[name]))
    assert shown["GONE_TOKEN"] is None
    for name in ("TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES", "PWD", "GIT_AUTHOR_NAME"):
        assert shown[name] == env[name]
    assert shown["DATABASE_URL"] == f"postgres://app:{marker('dburl-123456')}@db/app"
    assert "dburl-123456" in found


def test_ini_patterns_extend_the_rules() -> None:
    redactor = Redactor.with_patterns(parse_patterns("*_DSN, --license-file\n  corp_*"))
    env, _ = redactor.env({"SENTRY_DSN": "https://k@sentry.io/1", "CORP_ID": "42", "ID": "1"})
    assert env == {
        "SENTRY_DSN": marker("https://k@sentry.io/1"),
        "CORP_ID": marker("42"),
        "ID": "1",
    }
    argv, _ = redactor.argv(["--license-file", "/l.txt", "--sentry-dsn=x"])
    assert argv == ["--license-file", marker("/l.txt"), f"--sentry-dsn={marker('x')}"]
    settings = resolve({}, {"redact": "*_DSN corp_*"}, {}, rootdir=Path("/repo"))
    assert settings.redact == ("*_DSN", "CORP_*")
    env_settings = resolve({}, {}, {"PYTEST_LOSSLESS_REDACT": "X_*"}, rootdir=Path("/repo"))
    assert env_settings.redact == ("X_*",)
    with pytest.raises(ConfigError, match="lossless_redact"):
        resolve({}, {"redact": "bad/name"}, {}, rootdir=Path("/repo"))


DIFF = """\
diff --git a/app/settings.py b/app/settings.py
index 1111111..2222222 100644
--- a/app/settings.py
+++ b/app/settings.py
@@ -1,3 +1,6 @@ def connect(api_key="ctx-123456"):
-API_KEY = os.environ["API_KEY"]
+API_KEY = "sk-py-123456"
+token = tokenizer.encode(text)
+CMD = ["serve", "--api-key", "argv-123456", "--port", "8000"]
+URL = "https://h/v1?access_token=query-123456&x=1"
 max_tokens = 128
+key = "model.weight"
+token = f"{prefix}-{name}"
diff --git a/config.yaml b/config.yaml
--- a/config.yaml
+++ b/config.yaml
@@ -1,2 +1,4 @@
 model: tiny
+token: yaml-123456
+password=env-123456
+"client_secret": "json-123456",
diff --git a/weights.bin b/weights.bin
GIT binary patch
literal 12
TcmZ?wbhEHbR!~w^Ff;%F4+;VZ

"""
DIFF_SECRETS = (
    "ctx-123456",
    "sk-py-123456",
    "argv-123456",
    "query-123456",
    "yaml-123456",
    "env-123456",
    "json-123456",
)


def test_diff_lines_that_assign_secrets_are_redacted() -> None:
    text, count, found = Redactor().diff(DIFF)
    for value in DIFF_SECRETS:
        _no_secret(text, value)
        assert marker(value) in text
    assert count == len(DIFF_SECRETS) == len(found)
    # Code that only mentions a secret-looking name keeps its line; names are kept.
    assert "+token = tokenizer.encode(text)" in text
    assert '-API_KEY = os.environ["API_KEY"]' in text
    assert " max_tokens = 128" in text
    assert '+key = "model.weight"' in text  # a lone generic word in code names no credential
    assert '+token = f"{prefix}-{name}"' in text  # an f-string with fields is an expression
    assert f'+API_KEY = "{marker("sk-py-123456")}"' in text
    assert "TcmZ?wbhEHbR!~w^Ff;%F4+;VZ" in text  # binary patches are left whole
    assert len(text.splitlines()) == len(DIFF.splitlines())  # hunks still line up


# What secrets are made of: letters (any script), digits and the usual token punctuation.
_values = st.text(
    alphabet=st.characters(whitelist_categories=("L", "Nd"), whitelist_characters="-_.~+/=!$%^* "),
    min_size=4,
    max_size=24,
).filter(lambda v: v.strip() == v and not v.startswith("-"))


@given(value=_values, form=st.sampled_from(["eq", "space", "env", "header"]))
def test_redaction_hides_the_value_and_is_idempotent(value: str, form: str) -> None:
    redactor = Redactor()
    if form == "env":
        once, _ = redactor.env({"MY_TOKEN": value})
        twice, _ = redactor.env(once)
        assert once == twice == {"MY_TOKEN": marker(value)}
        return
    argv = {
        "eq": [f"--api-key={value}"],
        "space": ["--api-key", value],
        "header": ["-H", f"Authorization: {value}"],
    }[form]
    once, found = redactor.argv(argv)
    twice, again = redactor.argv(once)
    assert once == twice
    assert again == []
    assert found == [value]
    assert marker(value) in " ".join(once)


def test_scrub_replaces_known_values_in_free_text_but_not_markers() -> None:
    text = f"args ['--api-key=hunter2'] {MARK} short ab"
    assert scrub(text, ["hunter2", "ab"]) == f"args ['--api-key={MARK}'] {MARK} short ab"
    assert scrub(MARK, ["sha256", "redacted"]) == MARK


# ---------------------------------------------------------------- the launcher (spawns)


@pytest.fixture
def records() -> list[dict[str, Any]]:
    return []


@pytest.fixture
def launcher(tmp_path: Path, records: list[dict[str, Any]]) -> Iterator[Launcher]:
    run = Launcher(
        allocation=None,
        out_dir=tmp_path / "runs",
        run_timeout=20,
        knobs=("PYTHONHASHSEED",),
        on_record=lambda run: records.append(run.to_json()),  # as the receipt holds it
        grace=0.5,
    )
    yield run
    run.close()


ECHO_AND_FAIL = "import sys; print('args', sys.argv[1:], file=sys.stderr); sys.exit(3)"


@pytest.mark.slow
def test_argv_secrets_never_reach_the_record_or_the_run_error(
    launcher: Launcher, records: list[dict[str, Any]]
) -> None:
    argv = [sys.executable, "-c", ECHO_AND_FAIL, "--api-key=hunter2", "--token", "hunter2"]
    with pytest.raises(RunError) as info:
        launcher(argv)
    message = str(info.value)
    _no_secret(message)  # neither argv nor the stderr tail that echoed it
    assert f"--api-key={MARK}" in message
    assert "exited with code 3" in message
    (record,) = records
    _no_secret(json.dumps(record))
    assert record["argv"][3:] == [f"--api-key={MARK}", "--token", MARK]
    assert record["processes"][0]["argv"][3:] == record["argv"][3:]
    assert info.value.argv is None or SECRET not in " ".join(info.value.argv)


@pytest.mark.slow
def test_env_overrides_with_secret_names_are_redacted(
    launcher: Launcher, records: list[dict[str, Any]], tmp_path: Path
) -> None:
    script = "import os, sys; open(sys.argv[1], 'w').write(os.environ['HF_TOKEN'])"
    result = launcher(
        [sys.executable, "-c", script, "{out}/seen"],
        env={"HF_TOKEN": SECRET, "TOKENIZERS_PARALLELISM": "false", "GONE_KEY": None},
        outputs={"seen": "seen"},
    )
    assert result["seen"].read_text() == SECRET  # the child got the real value
    overrides = records[0]["env"]["overrides"]
    assert overrides == {"HF_TOKEN": MARK, "TOKENIZERS_PARALLELISM": "false", "GONE_KEY": None}
    _no_secret(json.dumps(records[0]))


@pytest.mark.slow
def test_could_not_start_names_the_program_without_its_secrets(launcher: Launcher) -> None:
    with pytest.raises(RunError, match="could not start") as info:
        launcher(["/no/such/program", "--password", SECRET])
    _no_secret(str(info.value))
    assert MARK in str(info.value)
    assert info.value.argv == ["/no/such/program", "--password", MARK]


def test_a_bad_argv_is_quoted_without_its_secrets(launcher: Launcher) -> None:
    with pytest.raises(ConfigError, match="never a shell string") as shell:
        launcher("serve --api-key hunter2")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not a string or path") as typed:
        launcher(["serve", "--token", SECRET, 3])  # type: ignore[list-item]
    for info in (shell, typed):
        _no_secret(str(info.value))
        assert MARK in str(info.value)


@pytest.mark.slow
def test_server_startup_failure_redacts(launcher: Launcher) -> None:
    argv = [sys.executable, "-c", ECHO_AND_FAIL, "--auth", SECRET]
    with pytest.raises(RunError, match="died during startup") as info:
        launcher.server(argv, ready="/health", startup_timeout=20)
    _no_secret(str(info.value))
    _no_secret(json.dumps([run.to_json() for run in launcher.records]))


SERVER = [sys.executable, str(Path(__file__).parents[1] / "data" / "servers" / "worker_server.py")]


@pytest.mark.slow
def test_server_records_keep_tokens_out_of_urls_and_argv(launcher: Launcher) -> None:
    server = launcher.server(
        [*SERVER, "{port}", "--workers", "1"],
        ready="/health?access_token=hunter2",
        env={"VLLM_API_KEY": SECRET},
    )
    server.request("GET", "/health?api_key=hunter2&x=1")
    record = server.stop(grace=2)
    _no_secret(json.dumps(record))
    assert record["requests"][0]["path"] == f"/health?api_key={MARK}&x=1"
    assert record["ready_url"].endswith(f"/health?access_token={MARK}")
    assert record["env"]["overrides"] == {"VLLM_API_KEY": MARK}


# ---------------------------------------------------------------- the receipt and verify


def _runspec(diff: str) -> dict[str, Any]:
    raw = diff.encode()
    return {
        "invocation": {
            "argv": ["pytest", "--hf-token", "cli-123456"],
            "cwd": "/r",
            "rootdir": "/r",
        },
        "source": {
            "revision": "ab" * 20,
            "dirty": bool(diff),
            "diff": diff,
            "diff_sha256": hashlib.sha256(raw).hexdigest(),
            "diff_bytes": len(raw),
            "untracked": [],
            "remote_branches": ["origin/main"],
            "published": True,
            "publication": "published",
        },
        "environment": {"knobs": {"PYTHONHASHSEED": "0"}, "knobs_unset": []},
        "inputs": {},
    }


def _stored_diff(path: Path) -> Path:
    """The stored diff a receipt names (``diffs/<sha256>.diff`` in its session, once per
    session)."""
    return path.parent / json.loads(path.read_text())["runspec"]["source"]["diff_file"]


def test_dirty_diff_is_stored_redacted_and_verify_agrees(tmp_path: Path) -> None:
    receipt = Receipt("tests/test_x.py::test_secret")
    receipt.add_run({"name": "command-01", "argv": ["x"], "processes": []})
    receipt.set_runspec(_runspec(DIFF))
    path = receipt.write(tmp_path)
    stored = _stored_diff(path).read_text()
    for value in DIFF_SECRETS:
        _no_secret(stored, value)
        _no_secret(path.read_text(), value)
    _no_secret(path.read_text(), "cli-123456")
    data = load_json(path)
    source = data["runspec"]["source"]
    assert source["diff_redacted"] is True
    assert source["diff_redactions"] == len(DIFF_SECRETS)
    # diff_sha256 stays the hash of `git diff HEAD --binary` (the source identity); the
    # stored, redacted file has its own hash.
    assert source["diff_sha256"] == hashlib.sha256(DIFF.encode()).hexdigest()
    assert source["diff_stored_sha256"] == hashlib.sha256(stored.encode()).hexdigest()
    assert data["runspec"]["invocation"]["argv"] == ["pytest", "--hf-token", marker("cli-123456")]
    assert [f for f in verify(tmp_path) if "runspec" in f] == []
    # The stored diff is still protected against edits.
    _stored_diff(path).write_text(stored.replace("model: tiny", "model: huge"))
    assert any("diff_stored_sha256" in f for f in verify(tmp_path))


def test_a_clean_diff_is_stored_as_is(tmp_path: Path) -> None:
    diff = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    receipt = Receipt("t::clean")
    receipt.set_runspec(_runspec(diff))
    path = receipt.write(tmp_path)
    assert _stored_diff(path).read_text() == diff
    source = load_json(path)["runspec"]["source"]
    assert source["diff_redacted"] is False
    assert source["diff_redactions"] == 0
    assert source["diff_stored_sha256"] == source["diff_sha256"]
    assert [f for f in verify(tmp_path) if "runspec" in f] == []


def _forge(path: Path, diff: str) -> list[str]:
    """Store ``diff`` where the receipt names its diff, record its hash as the stored one,
    re-seal the receipt (anyone can recompute raw_sha256), and return what verify says about
    the runspec."""
    from pytest_lossless.evidence.receipts import raw_sha256

    _stored_diff(path).write_text(diff)
    data = json.loads(path.read_text())
    data["runspec"]["source"]["diff_stored_sha256"] = hashlib.sha256(diff.encode()).hexdigest()
    data["integrity"]["raw_sha256"] = raw_sha256(data)
    path.write_text(json.dumps(data))
    return [f for f in verify(path.parent) if "runspec" in f]


def test_verify_refuses_a_redaction_claim_the_stored_diff_does_not_bear(tmp_path: Path) -> None:
    receipt = Receipt("t::claim")
    receipt.set_runspec(_runspec(DIFF))
    path = receipt.write(tmp_path)
    # The unredacted diff put back under a claim of redaction.
    assert any("stored as git gave it" in f for f in _forge(path, DIFF))
    # Another text without the markers the receipt counts.
    assert any("redaction markers" in f for f in _forge(path, DIFF.replace("tiny", "huge")))


# ---------------------------------------------------------------- end to end


E2E_TESTS = f"""
import sys

ARGV = [sys.executable, "-c", {ECHO_AND_FAIL!r}, "--api-key={SECRET}", "--token", "{SECRET}"]
ENV = {{"HF_TOKEN": "{SECRET}", "SENTRY_DSN": "https://{SECRET}@sentry.example/1"}}
OK = [sys.executable, "-c", "print('fine')", "--password={SECRET}"]

def test_fails_with_secrets(model_run):
    model_run(ARGV, env=ENV)

def test_passes_with_secrets(model_run):
    model_run(OK, env=ENV)
"""


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(root),
            "PATH": "/usr/bin:/bin:/usr/local/bin",
        },
    )


@pytest.mark.slow
def test_end_to_end_no_secret_reaches_what_ci_uploads(pytester: pytest.Pytester) -> None:
    root = pytester.path
    pytester.makeini("[pytest]\nlossless_redact = *_DSN\n")
    (root / "app.env").write_text("MODEL=tiny\n")
    (root / "settings.py").write_text("API_KEY = None\n")
    _git(root, "init", "-q")
    _git(root, "add", "app.env", "settings.py", "tox.ini")
    _git(root, "commit", "-q", "-m", "base")
    # The dirty tree: a secret pasted into tracked files.
    (root / "app.env").write_text(f"MODEL=tiny\nOPENAI_API_KEY={SECRET}\n")
    (root / "settings.py").write_text(f'API_KEY = "{SECRET}"\n')
    pytester.makepyfile(test_secrets=E2E_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--lossless-receipts", "receipts", "--junitxml", "junit.xml"
    )
    result.assert_outcomes(passed=1, failed=1)
    terminal = "\n".join(result.outlines + result.errlines)
    receipts = root / "receipts"
    files = sorted(receipts.rglob("test_*.json")) + sorted(receipts.rglob("*.diff"))
    assert len(files) == 3, files  # two receipts and their one shared diff (diffs/, #20)
    summary = receipts / "SUMMARY.md"
    assert summary.is_file()
    junit_xml = (root / "junit.xml").read_text()
    # Every text and attribute of the JUnit file, unescaped (the marker's "<" is "&lt;" there).
    junit = "\n".join(
        [*(e.text or "" for e in ElementTree.fromstring(junit_xml).iter())]
        + [v for e in ElementTree.fromstring(junit_xml).iter() for v in e.attrib.values()]
    )
    assert SECRET not in junit_xml
    for name, text in [
        ("terminal", terminal),
        ("junit", junit),
        ("summary", summary.read_text()),
        *((p.name, p.read_text()) for p in files),
    ]:
        assert SECRET not in text, f"{SECRET!r} leaked into {name}:\n{text}"
    # The marker is there instead, the same everywhere, so two runs compare.
    assert f"--api-key={MARK}" in terminal
    assert f"--api-key={MARK}" in junit
    failed_path = next(receipts.rglob("*test_fails_with_secrets.json"))
    failed = json.loads(failed_path.read_text())
    run = failed["runs"][0]
    assert run["argv"][3:] == [f"--api-key={MARK}", "--token", MARK]
    assert run["env"]["overrides"] == {
        "HF_TOKEN": MARK,
        "SENTRY_DSN": marker(f"https://{SECRET}@sentry.example/1"),
    }
    source = failed["runspec"]["source"]
    assert source["diff_redacted"] is True
    assert source["diff_redactions"] == 2
    diff = (failed_path.parent / source["diff_file"]).read_text()
    assert f"OPENAI_API_KEY={MARK}" in diff
    assert f'API_KEY = "{MARK}"' in diff
    # verify agrees with every receipt, the redacted diff and the summary included.
    done = subprocess.run(
        [sys.executable, "-m", "pytest_lossless", "verify", str(receipts)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert SECRET not in done.stdout + done.stderr


# ------------------------------------------------ issue #23: bearer tokens, inherited secrets

TOKEN = "sk-live-0123456789abcdef"


@pytest.mark.parametrize(
    "arg",
    [
        f"Authorization: Bearer {TOKEN}",
        f"authorization=Bearer {TOKEN}",
        f"Bearer {TOKEN}",
        f"Proxy-Authorization: Basic {TOKEN}",
    ],
)
def test_an_authorization_value_yields_the_bare_token_too(arg: str) -> None:
    """The header's value is hidden whole, and the bare credential is among the values found,
    so the same token printed alone (a server echoing it) is scrubbed as well."""
    shown, found = Redactor().argv(["curl", "-H", arg])
    assert TOKEN not in " ".join(shown)
    assert TOKEN in found
    assert TOKEN not in scrub(f"server: accepted token {TOKEN} from 127.0.0.1", found)


def test_secrets_of_the_session_environment_are_scrubbed_from_free_text() -> None:
    environ = {
        "HF_TOKEN": "hf_abcdefghijklmnop",
        "SHORT_KEY": "abc1234",  # under 8 characters: too common to scrub in free text
        "PATH": "/usr/bin:/bin",
        "MY_DB_PASSWORD": "correct horse battery",
    }
    redactor = Redactor.with_patterns((), environ=environ)
    text = (
        "loaded model with hf_abcdefghijklmnop; db correct horse battery; "
        "key abc1234; path /usr/bin:/bin"
    )
    shown, _ = redactor.text(text)
    assert "hf_abcdefghijklmnop" not in shown
    assert "correct horse battery" not in shown
    assert marker("hf_abcdefghijklmnop") in shown
    assert "abc1234" in shown
    assert "/usr/bin:/bin" in shown
    args, _ = redactor.argv(["serve", "--model-url=https://h/hf_abcdefghijklmnop"])
    assert "hf_abcdefghijklmnop" not in " ".join(args)


@pytest.mark.slow
def test_an_inherited_secret_printed_by_the_model_reaches_nothing_ci_uploads(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not passed through env=: inherited from pytest's own environment, and printed."""
    inherited = "ghp_inheritedSecretValue42"
    pytester.makepyfile(
        test_inherit="""
import os, sys

def test_prints_it(model_run):
    header = "Authorization: Bearer " + os.environ["HEADER_PART"]
    model_run([sys.executable, "-c",
               "import os, sys; print('token', os.environ['GH_TOKEN']); "
               "print('given', sys.argv[2].split()[-1]); sys.exit(3)", "-H", header])
"""
    )
    monkeypatch.setenv("GH_TOKEN", inherited)
    monkeypatch.setenv("HEADER_PART", TOKEN)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--lossless-receipts", "receipts", "--junitxml", "junit.xml"
    )
    result.assert_outcomes(failed=1)
    terminal = "\n".join(result.outlines + result.errlines)
    texts = [("terminal", terminal), ("junit", (pytester.path / "junit.xml").read_text())]
    texts += [(p.name, p.read_text()) for p in (pytester.path / "receipts").rglob("*.json")]
    texts += [(p.name, p.read_text()) for p in (pytester.path / "receipts").rglob("*.md")]
    for name, text in texts:
        assert inherited not in text, f"the inherited secret leaked into {name}"
        assert TOKEN not in text, f"the bare bearer token leaked into {name}"
    assert marker(inherited) in terminal


def test_a_redacted_diff_counts_the_markers_it_writes() -> None:
    """A bearer token is hidden whole (one marker) though its bare token is a secret too: the
    count a receipt records is the markers written, which verify checks against the stored
    diff (on the GPU machine, 144 counted against 140 markers before)."""
    from pytest_lossless.core.redact import MARKER_RE, Redactor

    diff = (
        "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n"
        '+headers = {"Authorization": "Bearer abcdefgh12345678"}\n'
        "+API_TOKEN = 'zyxwvuts98765432'\n"
        " already = '<redacted sha256:0123456789ab>'\n"
    )
    text, count, found = Redactor().diff(diff)
    assert "abcdefgh12345678" not in text
    assert "zyxwvuts98765432" not in text
    assert count == len(MARKER_RE.findall(text)) - 1  # the marker that was there is not counted
    assert count == 2
    assert len(found) > count  # the bare bearer token is among the values found
