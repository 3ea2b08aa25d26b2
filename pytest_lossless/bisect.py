"""``python -m pytest_lossless bisect GOOD BAD -- PYTEST_ARGS``: the first commit that changed an
output, judged by the lossless gates' three outcomes, not by pytest's two.

``git bisect run`` takes every failing step for a bad commit: a control that does not repeat, a
missing golden or a broken build would be blamed. Here each step runs the pytest selection in
a subprocess with ``--lossless --lossless-repeat-producers`` (every producer of a golden check
runs the control-runs number of times, so an output that does not repeat is INCONCLUSIVE), and
its session's ``INDEX.json`` and receipts decide the step (:func:`judge_tests`): PASS is good,
FAIL (a comparison that found a changed output) is bad, and INCONCLUSIVE, ERROR, a skipped gate
or a failed build is skipped, as ``git bisect skip`` (exit 125 under ``git bisect run``), with
the reason recorded. The search itself is git's: this module drives ``git bisect start /
good / bad / skip`` in a worktree of its own, so skips behave exactly as git's do.

Isolation: everything happens in temporary git worktrees (the user's checkout, its goldens and
its own bisect state are untouched); the goldens come from one fixed revision of the test
repository (GOOD, or ``--goldens REV``), handed to each step with ``--lossless-goldens``.
``--sources PATH`` bisects the engine repository a test names in ``model_run(sources=...)``
instead: the test repository stays at its current revision, the engine is checked out per step
in a temporary worktree whose path the tests read from ``PYTEST_LOSSLESS_BISECT_SOURCES`` (or
the variable ``--sources-env`` names). Receipts, pytest's output and the step log are kept
outside the worktrees (``--out DIR``, else a new temporary folder that is not removed).

No pytest import: pytest runs as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal, TextIO

from .core.records import (
    JsonObject,
    JsonValue,
    Record,
    from_json,
    json_object,
    json_objects,
    meta,
    spec,
)
from .core.text import printable
from .core.verdict import Verdict, judged_entries
from .errors import LosslessError
from .gates.gate import GateResult

#: The variable that names the engine's worktree to the tests under ``--sources``.
SOURCES_ENV = "PYTEST_LOSSLESS_BISECT_SOURCES"
#: What ``git bisect run`` would make of each mark (a skip is exit 125).
GIT_EXIT = {"good": 0, "bad": 1, "skip": 125}

Mark = Literal["good", "bad", "skip"]
#: A step's verdict, and the mark git gets for it.
MARKS: dict[str, Mark] = {
    "PASS": "good",
    "FAIL": "bad",
    "INCONCLUSIVE": "skip",
    "ERROR": "skip",
    "SKIPPED": "skip",
    "BUILD FAILED": "skip",
    "NO GATE": "skip",
}
_PASSING = ("PASS", "LOSSY-PASS")
_SHA = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.MULTILINE)


class BisectError(LosslessError):
    """A refusal or a usage error: the message says what is wrong and what to do (exit 2)."""


# --- the pure part: what a step's receipts say --------------------------------------------------


@dataclass(frozen=True)
class GateTest:
    """One test of a step's session, as its ``INDEX.json`` entry and its receipt tell it.

    ``failures``: the messages of comparisons that found a changed output (a gate, a lossless
    comparison or a speed gate that says FAIL); ``problems``: what kept the test from judging
    (an error entry, an unclean run, a control that did not repeat).
    """

    test_id: str
    outcome: str
    gate: bool
    overall: str | None
    failures: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class StepVerdict(Record):
    """What one step says: ``verdict`` (a key of :data:`MARKS`), its mark and the exit code
    ``git bisect run`` reads, one line of ``reason``, the failing gates' ``message`` (FAIL
    only), and how many gate tests ran."""

    verdict: str
    mark: Mark = field(init=False, compare=False, metadata=meta(derive=lambda v: MARKS[v.verdict]))
    exit: int = field(
        init=False,
        compare=False,
        metadata=meta(key="git_bisect_run_exit", derive=lambda v: GIT_EXIT[v.mark]),
    )
    reason: str
    message: str = ""
    gates_run: int = 0


def gate_test(entry: JsonObject, receipt: JsonObject | None) -> GateTest:
    """One ``INDEX.json`` test entry and its receipt (None when it wrote none) as a
    :class:`GateTest`: failed comparisons apart from errors, so an error is never a FAIL."""
    failures: list[str] = []
    problems: list[str] = []
    overall = None
    if receipt is not None:
        verdicts = json_object(receipt.get("verdicts"))
        overall = verdicts.get("overall")
        for block, part, verdict in judged_entries(receipt):
            if block == "gates":
                if verdict is Verdict.FAIL and part.get("error"):
                    problems.append(f"{part.get('error')}: {part.get('message') or ''}".strip())
                elif verdict is Verdict.FAIL:
                    failures.append(_gate_message(part))
                continue
            if verdict not in (Verdict.FAIL, Verdict.INCONCLUSIVE):
                continue
            if block == "lossless":
                text = _lossless_message(part)
            else:
                workload = [str(part["workload"])] if part.get("workload") else []
                text = f"{' '.join(['speed gate', *workload])}: {verdict}"
            (failures if verdict is Verdict.FAIL else problems).append(text)
        runs = json_object(verdicts.get("lifecycle")).get("runs")
        for run in json_objects(runs):
            if run.get("clean") is False:
                problems.append(f"run {run.get('name')}: {run.get('summary')}")
    return GateTest(
        test_id=str(entry.get("test_id")),
        outcome=str(entry.get("outcome")),
        gate=bool(entry.get("gate")),
        overall=None if overall is None else str(overall),
        failures=tuple(failures),
        problems=tuple(problems),
        reason=None if entry.get("reason") is None else str(entry.get("reason")),
    )


def _gate_message(gate: Mapping[str, JsonValue]) -> str:
    try:
        return GateResult.from_dict(gate).message()
    except LosslessError:
        return f"artifact {gate.get('artifact')!r}: FAIL"


def _lossless_message(entry: object) -> str:
    """A failed or unjudgeable ``lossless`` entry in a few lines (read leniently: what does not
    fit is left out of the message, which never decides the step)."""
    from .compare.repeatability import LosslessVerdict  # numpy: only when there is one

    try:
        found = from_json(LosslessVerdict, entry, problems=[])
    except Exception as exc:  # a derived value of a hand-edited entry: the step stands
        return f"lossless.compare: unreadable entry ({type(exc).__name__}: {exc})"
    label = found.label or "lossless.compare"
    if found.verdict is Verdict.INCONCLUSIVE and not found.control_repeatable:
        varied = sorted(
            {r.artifact for c in found.control_comparisons for r in c.results if not r.passed}
            | {name for c in found.control_comparisons for name in c.missing}
        )
        return f"{label}: the control is not repeatable ({', '.join(varied)} varied)"
    candidate = found.candidate_comparison
    lines = [f"{label}: {found.verdict}"]
    if candidate is not None:
        lines += [r.message() for r in candidate.results if not r.passed]
        lines += [f"{name}: missing in one run" for name in candidate.missing]
    return "\n".join(lines)


def judge_tests(tests: Sequence[GateTest]) -> StepVerdict:
    """The step's verdict from its tests. A changed output anywhere is FAIL (bad), whatever
    else happened; else anything that kept a gate from judging makes the step unjudgeable:
    INCONCLUSIVE, ERROR or SKIPPED (skipped); else PASS (good). Deselected tests do not
    count; a step whose selection ran no gate at all is NO GATE (skipped)."""
    counted = [t for t in tests if t.outcome != "deselected" and (t.gate or t.overall)]
    ran = [t for t in counted if t.outcome not in ("skipped", "xfailed", "not run")]
    failed = [t for t in counted if t.failures]
    if failed:
        message = "\n".join(f"{t.test_id}:\n" + _indent("\n".join(t.failures)) for t in failed)
        first = failed[0].failures[0].splitlines()[0]
        more = f" (and {len(failed) - 1} more test{'s' if len(failed) > 2 else ''})"
        return StepVerdict(
            "FAIL",
            f"{failed[0].test_id}: {first}" + (more if len(failed) > 1 else ""),
            message,
            len(ran),
        )
    if not counted:
        return StepVerdict("NO GATE", "the selection ran no lossless gate", gates_run=0)
    for test in counted:
        if test.overall == "INCONCLUSIVE":
            why = test.problems[0] if test.problems else "INCONCLUSIVE"
            return StepVerdict("INCONCLUSIVE", f"{test.test_id}: {why}", gates_run=len(ran))
    for test in counted:
        if test.outcome in ("skipped", "xfailed"):
            why = test.reason or test.outcome
            return StepVerdict("SKIPPED", f"{test.test_id}: {why}", gates_run=len(ran))
        if test.outcome != "passed" or test.problems or test.overall not in _PASSING:
            why = (
                test.problems[0]
                if test.problems
                else test.reason or f"{test.outcome}, verdict {test.overall or 'none'}"
            )
            return StepVerdict("ERROR", f"{test.test_id}: {why}", gates_run=len(ran))
    noun = "gate test" if len(ran) == 1 else "gate tests"
    return StepVerdict("PASS", f"{len(ran)} {noun} passed", gates_run=len(ran))


def _first_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def judge_session(receipts: Path, exit_status: int) -> StepVerdict:
    """A step's verdict from the receipts folder its pytest wrote (``exit_status``: pytest's).
    No session index at all (pytest could not start, a usage error) is an ERROR."""
    indexes = sorted(receipts.glob("*/INDEX.json")) if receipts.is_dir() else []
    if len(indexes) != 1:
        what = "no session INDEX.json" if not indexes else f"{len(indexes)} sessions"
        return StepVerdict("ERROR", f"pytest exited {exit_status} and wrote {what}")
    try:
        index = json.loads(indexes[0].read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return StepVerdict("ERROR", f"{indexes[0]}: unreadable ({exc})")
    tests = []
    for entry in index.get("tests") or []:
        receipt = None
        if entry.get("receipt"):
            try:
                receipt = json.loads((indexes[0].parent / entry["receipt"]).read_text("utf-8"))
            except (OSError, ValueError) as exc:
                return StepVerdict("ERROR", f"{entry['receipt']}: unreadable receipt ({exc})")
        tests.append(gate_test(entry, receipt))
    verdict = judge_tests(tests)
    if verdict.mark == "good" and not index.get("finished", False):
        return StepVerdict("ERROR", f"the session did not finish: {index.get('state')}")
    return verdict


# --- git -----------------------------------------------------------------------------------


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        check=False,
        # git's messages are parsed (bisect's "is the first bad commit"): never translated.
        env={**os.environ, "LC_ALL": "C", "LANGUAGE": "C", "GIT_TERMINAL_PROMPT": "0"},
    )
    if check and done.returncode != 0:
        raise BisectError(
            f"git -C {root} {' '.join(args)} failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()}"
        )
    return done


def _toplevel(path: Path, what: str) -> Path:
    done = _git(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise BisectError(f"{what} {path} is not inside a git repository: {done.stderr.strip()}")
    return Path(done.stdout.strip())


def _commit(root: Path, revision: str, what: str) -> str:
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", check=False)
    if done.returncode != 0:
        raise BisectError(f"{what} {revision!r} is not a commit of {root}")
    return done.stdout.strip()


def _subject(root: Path, sha: str) -> str:
    return _git(root, "log", "-1", "--format=%s", sha).stdout.strip()


def _refuse_dirty(root: Path, what: str) -> None:
    changed = _git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip()
    if changed:
        first = changed.splitlines()[0]
        raise BisectError(
            f"{what} {root} has uncommitted changes ({first}, ...): bisect checks out commits, "
            "so changes that are in none of them would be judged nowhere; commit or stash them"
        )


@contextmanager
def _worktree(repo: Path, where: Path, revision: str) -> Iterator[Path]:
    """A detached worktree of ``repo`` at ``revision``, removed (with its bisect state) after."""
    _git(repo, "worktree", "add", "--detach", "--quiet", str(where), revision)
    try:
        yield where
    finally:
        _git(where, "bisect", "reset", check=False)
        _git(repo, "worktree", "remove", "--force", str(where), check=False)
        shutil.rmtree(where, ignore_errors=True)
        _git(repo, "worktree", "prune", check=False)


def _checkout(tree: Path, sha: str) -> None:
    """``sha`` in the step's worktree, with what an earlier step left untracked removed (files
    git ignores, such as build caches, are kept for an incremental ``--build``)."""
    _git(tree, "checkout", "--force", "--quiet", "--detach", sha)
    _git(tree, "clean", "-ffdq")


# --- one bisect ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BisectRequest:
    """What the command line asked for; paths absolute."""

    good: str
    bad: str
    pytest_args: tuple[str, ...]
    cwd: Path
    sources: Path | None = None
    build: tuple[str, ...] | None = None
    goldens: str | None = None
    out: Path | None = None
    control_runs: int | None = None
    sources_env: str = SOURCES_ENV
    python: str = field(default_factory=lambda: sys.executable)


@dataclass(frozen=True, kw_only=True)
class Step(Record):
    """One step of the log (its entry in ``bisect.json``): the commit, its verdict and mark,
    why, and where its evidence is."""

    number: int = spec(key="step")
    commit: str
    subject: str
    verdict: StepVerdict = spec(flatten=True)
    seconds: float
    receipts: Path
    pytest_log: str = spec(derive=lambda step: str(step.folder / "pytest.log"))

    @property
    def folder(self) -> Path:
        return self.receipts.parent

    def line(self) -> str:
        return printable(
            f"step {self.number}: {self.commit[:12]} {self.verdict.mark:<4} "
            f"{self.verdict.verdict:<12} {self.seconds:6.1f} s  {self.subject}"
            + ("" if self.verdict.mark == "good" else f"  [{_first_line(self.verdict.reason)}]")
        )


@dataclass(frozen=True)
class Goldens:
    """The goldens every step compares with: ``folder`` (the project's ``lossless_goldens``)
    of ``revision``, checked out at ``path``."""

    path: Path
    revision: str
    folder: str


class Bisection:
    """One ``bisect``: the worktrees, the steps run so far, the log (printed and kept)."""

    def __init__(
        self,
        request: BisectRequest,
        *,
        tests: Path,
        bisected: Path,
        goldens: Goldens,
        out: Path,
        stream: TextIO,
    ) -> None:
        self.request = request
        self.tests = tests  # the test repository's worktree: pytest's rootdir
        self.bisected = bisected  # the worktree git bisect moves: tests, or the engine's
        self.goldens = goldens
        self.out = out
        self.stream = stream
        self.steps: list[Step] = []
        self.by_commit: dict[str, Step] = {}

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
        with open(self.out / "bisect.log", "a", encoding="utf-8") as log:
            log.write(text + "\n")

    def step(self, sha: str) -> Step:
        """Check ``sha`` out, build, run the selection, judge it; logged as it ends."""
        if sha in self.by_commit:
            return self.by_commit[sha]
        number = len(self.steps) + 1
        folder = self.out / "steps" / f"{number:02d}-{sha[:12]}"
        folder.mkdir(parents=True)
        started = time.monotonic()
        _checkout(self.bisected, sha)
        env = dict(os.environ)
        if self.request.sources is not None:
            env[self.request.sources_env] = str(self.bisected)
        verdict = self._build(folder, env) or self._pytest(folder, env)
        step = Step(
            number=number,
            commit=sha,
            subject=_subject(self.bisected, sha),
            verdict=verdict,
            seconds=round(time.monotonic() - started, 3),
            receipts=folder / "receipts",
        )
        self.steps.append(step)
        self.by_commit[sha] = step
        self.say(step.line())
        self._write_json()
        return step

    def _build(self, folder: Path, env: Mapping[str, str]) -> StepVerdict | None:
        argv = self.request.build
        if not argv:
            return None
        log = folder / "build.log"
        with open(log, "wb") as output:
            try:
                code = _run_into(argv, self.bisected, env, output)
            except OSError as exc:
                return StepVerdict("BUILD FAILED", f"--build {argv[0]}: cannot start ({exc})")
        if code != 0:
            return StepVerdict("BUILD FAILED", f"--build exited {code} (see {log})")
        return None

    def _pytest(self, folder: Path, env: Mapping[str, str]) -> StepVerdict:
        receipts = folder / "receipts"
        argv = [
            self.request.python,
            "-m",
            "pytest",
            "--lossless",
            "--lossless-repeat-producers",
            f"--lossless-receipts={receipts}",
            f"--lossless-goldens={self.goldens.path}",
            # The step's temporary files (diagnostics a failing gate names) are kept with it.
            f"--basetemp={folder / 'tmp'}",
        ]
        if self.request.control_runs is not None:
            argv.append(f"--lossless-control-runs={self.request.control_runs}")
        argv += self.request.pytest_args
        with open(folder / "pytest.log", "wb") as output:
            output.write(f"$ {shlex.join(argv)}\n".encode())
            output.flush()
            code = _run_into(argv, self.tests, env, output)
        return judge_session(receipts, code)

    def _write_json(self) -> None:
        record = {
            "good": self.request.good,
            "bad": self.request.bad,
            "pytest_args": list(self.request.pytest_args),
            "sources": None if self.request.sources is None else str(self.request.sources),
            "build": None if self.request.build is None else list(self.request.build),
            "goldens": {"folder": self.goldens.folder, "revision": self.goldens.revision},
            "steps": [s.to_json() for s in self.steps],
        }
        target = self.out / "bisect.json"
        temporary = target.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, target)


def _run_into(argv: Sequence[str], cwd: Path, env: Mapping[str, str], output: BinaryIO) -> int:
    """Run ``argv`` in ``cwd``, both output streams into ``output``, no input; its exit code."""
    return subprocess.run(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    ).returncode


@dataclass(frozen=True)
class Outcome:
    """How a bisect ended: the first bad commit's step, or the commits it could be."""

    first_bad: Step | None
    candidates: tuple[str, ...] = ()
    why: str = ""


def _search(bisection: Bisection, good: str, bad: str) -> Outcome:
    """Drive ``git bisect`` (no checkout: each step checks out ``BISECT_HEAD`` itself)."""
    tree = bisection.bisected
    done = _git(tree, "bisect", "start", "--no-checkout", bad, good)
    while True:
        text = done.stdout + done.stderr
        found = _SHA.search(text)
        if found:
            sha = found.group(1)
            return Outcome(bisection.by_commit.get(sha) or bisection.step(sha))
        if "only 'skip'ped commits left" in text:
            candidates = tuple(re.findall(r"^([0-9a-f]{40})$", text, re.MULTILINE))
            return Outcome(None, candidates, "only skipped commits are left between")
        if done.returncode != 0:
            raise BisectError(f"git bisect failed: {text.strip()}")
        sha = _git(tree, "rev-parse", "BISECT_HEAD").stdout.strip()
        step = bisection.step(sha)
        done = _git(tree, "bisect", step.verdict.mark, check=False)


def run_bisect(
    request: BisectRequest,
    *,
    ini_goldens: Callable[[Path], str | None],
    stream: TextIO | None = None,
) -> int:
    """The ``bisect`` command: 0 when the first bad commit was found, 1 when not, 2 on a
    refusal or usage error. ``ini_goldens`` reads the project's ``lossless_goldens`` from its
    ini file at a folder (the reader ``accept`` uses), None when unset."""
    out_stream = sys.stdout if stream is None else stream
    try:
        return _run(request, ini_goldens, out_stream)
    except BisectError as exc:
        print(printable(f"pytest-lossless bisect: {exc}", newlines=True), file=sys.stderr)
        return 2


def _run(request: BisectRequest, ini_goldens: Callable[[Path], str | None], stream: TextIO) -> int:
    tests_repo = _toplevel(request.cwd, "the current folder")
    repo = tests_repo if request.sources is None else _toplevel(request.sources, "--sources")
    what = "the test repository" if request.sources is None else "the --sources repository"
    good = _commit(repo, request.good, "GOOD")
    bad = _commit(repo, request.bad, "BAD")
    _refuse_dirty(tests_repo, "the test repository")
    if request.sources is not None:
        _refuse_dirty(repo, "the --sources repository")
    if good == bad:
        raise BisectError(f"GOOD and BAD are the same commit {good[:12]}: nothing to bisect")
    if _git(repo, "merge-base", "--is-ancestor", good, bad, check=False).returncode != 0:
        raise BisectError(
            f"GOOD {request.good} ({good[:12]}) is not an ancestor of BAD {request.bad} "
            f"({bad[:12]}) in {what}: the first commit that changed an output lies between "
            "a good commit and a later bad one; give GOOD older than BAD on its history"
        )
    goldens_default = request.good if request.sources is None else "HEAD"
    goldens_rev = _commit(tests_repo, request.goldens or goldens_default, "--goldens")
    relative = os.path.relpath(request.cwd, tests_repo)
    out = _out_folder(request.out)
    scratch = _temporary("pytest-lossless-bisect-worktrees-")
    try:
        with _worktree(tests_repo, scratch / "goldens", goldens_rev) as golden_tree:
            folder = ini_goldens(golden_tree) or "goldens"
            goldens = Goldens(golden_tree / folder, goldens_rev, folder)
            start = bad if request.sources is None else "HEAD"
            with _worktree(tests_repo, scratch / "tests", start) as test_tree:
                tests = test_tree / relative if relative != "." else test_tree
                bisected = (
                    nullcontext(test_tree)
                    if request.sources is None
                    else _worktree(repo, scratch / "sources", bad)
                )
                with bisected as tree:
                    bisection = Bisection(
                        request, tests=tests, bisected=tree, goldens=goldens, out=out, stream=stream
                    )
                    return _bisect(bisection, good, bad)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _out_folder(given: Path | None) -> Path:
    """The new (or empty) folder for the log: ``--out``, else a new temporary one. One that
    cannot be made or read (a file, a folder below a file, a read-only place) is a refusal
    naming it, never a traceback (#20)."""
    if given is None:
        return _temporary("pytest-lossless-bisect-")
    try:
        given.mkdir(parents=True, exist_ok=True)
        empty = not any(given.iterdir())
    except OSError as exc:
        raise BisectError(
            f"--out {given}: cannot be made a folder ({exc.strerror or exc}): give a new "
            "folder where you can write"
        ) from None
    if not empty:
        raise BisectError(f"--out {given} is not empty: give a new folder (the log goes there)")
    return given


def _temporary(prefix: str) -> Path:
    """A new temporary folder; none where ``TMPDIR`` leads to no writable folder is a refusal
    naming it."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as exc:
        raise BisectError(
            f"cannot make a temporary folder ({exc.strerror or exc}): point TMPDIR at a "
            "folder you can write, or give --out"
        ) from None


def _bisect(bisection: Bisection, good: str, bad: str) -> int:
    """GOOD must be good with a gate that ran, BAD bad; then git's search, and the report."""
    request, repo, out = bisection.request, bisection.bisected, bisection.out
    goldens = f"{bisection.goldens.folder} of {bisection.goldens.revision[:12]}"
    bisection.say(
        printable(
            f"bisect {request.good} ({good[:12]}) .. {request.bad} ({bad[:12]}) of "
            f"{'the test repository' if request.sources is None else request.sources}: "
            f"pytest {shlex.join(request.pytest_args)}; goldens {goldens}; log and receipts "
            f"in {out}"
        )
    )
    first = bisection.step(good)
    if first.verdict.gates_run == 0 or first.verdict.verdict == "NO GATE":
        raise BisectError(
            f"the selection runs no lossless gate at GOOD ({first.verdict.reason}; see "
            f"{first.folder / 'pytest.log'}): select gate tests (marked lossless) that run "
            "there"
        )
    if first.verdict.mark != "good":
        raise BisectError(
            f"GOOD {good[:12]} is not good: {first.verdict.verdict}: {first.verdict.reason} "
            f"(see {first.folder / 'pytest.log'} and {first.receipts})"
        )
    last = bisection.step(bad)
    if last.verdict.mark != "bad":
        bisection.say(
            f"no first bad commit: BAD {bad[:12]} is not bad ({last.verdict.verdict}: "
            f"{last.verdict.reason}), so no output is shown to change between GOOD and BAD"
        )
        return 1
    outcome = _search(bisection, good, bad)
    if outcome.first_bad is not None:
        step = outcome.first_bad
        bisection.say(f"first bad commit: {step.commit} {printable(step.subject)}")
        bisection.say(printable(_indent(step.verdict.message), newlines=True))
        bisection.say(f"receipts: {step.receipts}")
        bisection.say(f"log: {out / 'bisect.log'} ({len(bisection.steps)} steps)")
        return 0
    bisection.say(
        f"no first bad commit: {outcome.why} GOOD and BAD; the first bad commit is one of:"
    )
    for sha in outcome.candidates:
        known = bisection.by_commit.get(sha)
        why = f"  [{known.verdict.verdict}: {known.verdict.reason}]" if known else ""
        bisection.say(printable(f"  {sha} {_subject(repo, sha)}{why}"))
    bisection.say(f"log: {out / 'bisect.log'} ({len(bisection.steps)} steps)")
    return 1


def parse_build(text: str | None) -> tuple[str, ...] | None:
    """``--build CMD``: an argv by shell-like splitting (never run by a shell)."""
    if text is None:
        return None
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise BisectError(f"--build {text!r}: cannot be split into arguments ({exc})") from None
    if not argv:
        raise BisectError("--build '': give the command to run at each step")
    return argv
