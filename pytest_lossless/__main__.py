"""``python -m pytest_lossless``: ``verify``, ``summary``, ``accept`` and ``sign``.

``verify`` prints one line per receipt, then each incomplete or contradicting session, the
merged verdict counts, and the hosts and source revisions it saw; it exits 0 when every
receipt and every session is consistent and complete, 1 on any contradiction, incomplete
session or unreadable receipt, 2 when there is nothing to verify or a bad argument.

Nothing is imported from the working folder (a downloaded receipts folder may hold a planted
``numpy.py``): ``python -m`` puts it first on ``sys.path``, so it is taken off before anything
else is imported, and put back, last, only for the modules named with ``-p``.
"""

from __future__ import annotations

import os
import sys


def _forget_working_folder() -> None:
    """Take the entry ``python -m`` put first on ``sys.path`` (the working folder) off it."""
    if sys.path and sys.path[0] in ("", os.getcwd()) and not getattr(sys.flags, "safe_path", False):
        del sys.path[0]


if __name__ == "__main__":  # python -m pytest_lossless; not the console script, not an import
    _forget_working_folder()

import argparse  # noqa: E402 - after the working folder is off sys.path
import contextlib  # noqa: E402
import signal  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TextIO  # noqa: E402

from .core.records import json_object  # noqa: E402
from .core.text import printable  # noqa: E402
from .errors import ConfigError, LosslessError  # noqa: E402
from .evidence.index import INDEX_NAME  # noqa: E402
from .evidence.receipts import ReceiptRecord  # noqa: E402
from .evidence.sessions import EXPORT_JSON, check_campaign  # noqa: E402
from .evidence.summary_md import (  # noqa: E402
    check_summaries,
    summary_lines,
    unfrozen_plans,
    verdict_counts,
    write_summary,
)
from .evidence.verify import verify_folder, verify_receipt  # noqa: E402
from .kinds.registry import KindRegistry, plugin_manager  # noqa: E402


def _usage(command: str, problem: object) -> int:
    """Say on stderr why ``command`` did not run; its exit status, 2 (a usage error)."""
    print(f"pytest-lossless {command}: {problem}", file=sys.stderr)
    return 2


def _describe(record: ReceiptRecord) -> str:
    """A receipt's line: its runs, their lifecycle and its overall verdict, as recorded."""
    verdicts = record.recorded_verdicts or {}
    runs = len(record.block("runs"))
    clean = json_object(verdicts.get("lifecycle")).get("clean")
    parts = [f"{runs} run{'s' if runs != 1 else ''}"]
    if runs:
        parts.append("lifecycle clean" if clean else "lifecycle NOT clean")
    if verdicts.get("overall"):
        parts.append(f"verdict {verdicts['overall']}")
    return f"{record.test_id}: " + ", ".join(parts)


def verify_command(
    directories: Sequence[Path],
    *,
    plugins: Sequence[str] = (),
    entry_points: bool = True,
    out: TextIO | None = None,
    allow_mixed_revisions: bool = False,
    revision: str | None = None,
    attestation: Path | None = None,
    key: Path | None = None,
) -> int:
    """The ``verify`` subcommand over one or more folders; returns the exit status.

    Gates of kinds that plugins add are re-derived through the same plugins pytest would load:
    the ``pytest11`` entry points (unless ``entry_points`` is False) and each ``-p MODULE``.
    Every session folder found must hold its index (``INDEX.json``); the sessions of all the
    folders merge into one campaign, whose hosts and source revisions are printed.
    ``revision``: every receipt and index must show it. ``attestation`` and ``key``: the
    signed bundle of ``sign`` and the public key it must verify with; every session and every
    loose receipt must then be signed, and every signed digest match the files on disk.
    """
    stream = sys.stdout if out is None else out
    for directory in directories:
        if not directory.exists():
            return _usage("verify", f"{directory}: no such folder")
    if (attestation is None) != (key is None):
        return _usage(
            "verify", "--attestation FILE and --key PUBKEY go together: the bundle sign wrote, "
            "and the public key its signatures must verify with"
        )  # fmt: skip
    public_key = None
    if key is not None:
        from .evidence.attest import AttestationError, load_public_key

        try:
            public_key = load_public_key(key)
        except AttestationError as exc:
            return _usage("verify", exc)
    if revision is not None and not _is_revision(revision):
        return _usage(
            "verify", f"--revision {printable(revision)}: give a commit SHA (at least 7 hex "
            "digits), e.g. --revision $(git rev-parse HEAD)"
        )  # fmt: skip
    try:
        kinds = KindRegistry(plugin_manager(plugins, entry_points=entry_points).hook)
    except LosslessError as exc:
        return _usage("verify", exc)
    # An export's export.json is its table of contents, not a receipt.
    checked = {
        directory: verify_folder(directory, kinds=kinds, skip=lambda p: p.name == EXPORT_JSON)
        for directory in directories
    }
    loaded_by_folder = {directory: found.receipts for directory, found in checked.items()}
    total = sum(len(loaded) for loaded in loaded_by_folder.values())
    indexes = any(d.is_dir() and any(d.rglob(INDEX_NAME)) for d in directories)
    if not total and not indexes:  # an index without receipts still has a session to check
        names = ", ".join(str(d) for d in directories)
        return _usage("verify", f"no receipts (*.json) in {names}: nothing was verified")
    bad = 0
    summaries: list[str] = []
    for directory, loaded in loaded_by_folder.items():
        for path, data in loaded.items():
            if path not in checked[directory].problems:  # not even JSON of a receipt
                bad += 1
                print(f"UNREADABLE {data}", file=stream)
                continue
            problems = checked[directory].problems[path]
            line = _describe(data) if isinstance(data, ReceiptRecord) else str(path.name)
            if problems:
                bad += 1
                print(f"CONTRADICTION {path}: {line}", file=stream)
                for problem in problems:
                    print(f"    - {problem}", file=stream)
            else:
                print(f"OK {path}: {line}", file=stream)
        if directory.is_dir():
            summaries += check_summaries(directory, loaded)
    campaign = check_campaign(
        loaded_by_folder, allow_mixed_revisions=allow_mixed_revisions, revision=revision
    )
    signed: list[str] = []
    if attestation is not None:
        signed = _check_attestation(campaign, attestation, public_key, revision)
        if signed and signed[0] == "":
            return 2  # the bundle could not be read: said on stderr
    print(f"{total - bad} of {total} receipts consistent", file=stream)
    for problem in summaries:
        print(f"CONTRADICTION {problem}", file=stream)
    for finding in campaign.findings:
        print(str(finding), file=stream)
    for line in signed:
        print(line, file=stream)
    merged = {path: data for loaded in loaded_by_folder.values() for path, data in loaded.items()}
    print(f"merged: {total} receipts: {verdict_counts(merged)}", file=stream)
    for line in campaign.seen_lines():
        print(line, file=stream)
    unfrozen = {
        data.test_id: len(found)
        for data in merged.values()
        if isinstance(data, ReceiptRecord) and (found := unfrozen_plans(data))
    }
    if unfrozen:
        count, names = sum(unfrozen.values()), ", ".join(sorted(unfrozen))
        print(
            printable(
                f"NOT FROZEN: {count} gate plan{'s' if count != 1 else ''} in {len(unfrozen)} "
                f"receipt{'s' if len(unfrozen) != 1 else ''} checked against no plan.json "
                f"({names}): freeze them with --update-goldens --lossless"
            ),
            file=stream,
        )
    return 1 if bad or summaries or campaign.findings or signed else 0


def _is_revision(text: str) -> bool:
    return 7 <= len(text) <= 64 and all(c in "0123456789abcdefABCDEF" for c in text)


def _check_attestation(
    campaign: Any, attestation: Path, public_key: Any, revision: str | None
) -> list[str]:
    """The campaign's sessions and loose receipts against a signed bundle: one line per
    finding (``[""]`` when the bundle cannot be read, said on stderr)."""
    from .evidence.attest import AttestationError, check_bundle, revisions_of

    try:
        findings, results = check_bundle(
            attestation,
            public_key,
            folders=[s.folder for s in campaign.sessions if s.index is not None],
            single_receipts=campaign.single_files,
            project=Path.cwd(),
        )
    except AttestationError as exc:
        print(f"pytest-lossless verify: {exc}", file=sys.stderr)
        return [""]
    lines = [str(f) for f in findings]
    if revision is not None:
        for statement in results:
            shown = revisions_of(statement)
            if not shown or not all(r.lower().startswith(revision.lower()) for r in shown):
                lines.append(
                    f"MISMATCH a signed Statement names source revision(s) "
                    f"{', '.join(sorted(shown)) or 'none'}, but --revision {revision} is required"
                )
    campaign.signed = -1 if lines else len(results)
    return lines


def accept_command(
    directory: Path,
    *,
    keyword: str | None = None,
    goldens: Path | None = None,
    store: Path | None = None,
    plugins: Sequence[str] = (),
    entry_points: bool = True,
    out: TextIO | None = None,
    attestation: Path | None = None,
    key: Path | None = None,
) -> int:
    """The ``accept`` subcommand: goldens written from an export (``--lossless-export``), as
    ``--update-goldens`` would have on the machine that made it; 1 when anything is refused,
    2 when the export cannot be read or nothing in it matches ``-k``. With ``attestation``
    and ``key``, an artifact is accepted only when its receipt is one a signed session lists.
    """
    from .evidence.receipts import load_json
    from .goldens.accept import ExportError, accept, keyword_matcher, read_export

    stream = sys.stdout if out is None else out
    if (attestation is None) != (key is None):
        return _usage("accept", "--attestation FILE and --key PUBKEY go together")
    signed: dict[str, str] | None = None
    if attestation is not None and key is not None:
        from .evidence.attest import AttestationError, load_public_key, signed_receipts

        try:
            signed = signed_receipts(attestation, load_public_key(key))
        except AttestationError as exc:
            return _usage("accept", exc)

    def receipt_problems(path: Path) -> list[str]:
        problems = verify_receipt(path, kinds=kinds)
        if signed is not None:
            from .evidence.index import sha256_regular

            if sha256_regular(path) not in signed:
                problems.append(
                    f"it is not a receipt that a session signed in {attestation} lists "
                    "(unsigned, or changed after signing)"
                )
        return problems

    try:
        if keyword:
            keyword_matcher(keyword)
        document = read_export(directory)
        kinds = KindRegistry(plugin_manager(plugins, entry_points=entry_points).hook)
        root = Path.cwd()
        folder = local_goldens(root, goldens)
        exported = document.settings.goldens
        if exported is not None and Path(str(exported)) != folder.relative_to(root):
            print(
                printable(
                    f"pytest-lossless accept: the export's machine wrote its goldens to "
                    f"{exported}; writing this project's, {folder.relative_to(root)}"
                ),
                file=stream,
            )
        decisions = accept(
            directory,
            goldens=folder,
            rootdir=root,
            kinds=kinds,
            receipt_problems=receipt_problems,
            load_receipt=load_json,
            keyword=keyword,
            store=store,
        )
    except (ValueError, ExportError, LosslessError) as exc:
        return _usage("accept", exc)
    if not decisions:
        what = f"matches -k {keyword!r}" if keyword else "is in it"
        print(f"pytest-lossless accept: {directory}: no exported artifact {what}", file=stream)
        return 2 if keyword and document.entries else 0
    for decision in sorted(
        decisions, key=lambda d: (not d.recovered, d.action != "refused", d.label)
    ):
        entry = decision.entry
        where = f"{decision.folder}/{entry.artifact}" if decision.folder else decision.label
        if decision.recovered:  # what a stopped update left beside the test's folder
            where = decision.folder
        detail = f" ({decision.detail})" if decision.detail else ""
        print(printable(f"{decision.action.upper()} {where}{detail}", newlines=True), file=stream)
    refused = sum(1 for d in decisions if d.action in ("refused", "conflict"))
    artifacts = sum(1 for d in decisions if not d.recovered)
    print(f"{artifacts - refused} of {artifacts} artifacts accepted", file=stream)
    return 1 if refused else 0


#: The files pytest reads its ini options from, in its order, and the section of each.
_INI_FILES = (
    ("pytest.ini", "pytest"),
    (".pytest.ini", "pytest"),
    ("pyproject.toml", "tool.pytest.ini_options"),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
)


def _ini_goldens(root: Path) -> str | None:
    """``lossless_goldens`` of the project's ini file at ``root`` (the first file of
    :data:`_INI_FILES` that pytest would use there), or None when it sets none."""
    import configparser
    import importlib

    for name, section in _INI_FILES:
        path = root / name
        if not path.is_file():
            continue
        if name == "pyproject.toml":
            try:
                toml: Any = importlib.import_module("tomllib")
            except ModuleNotFoundError:  # Python 3.10: pytest reads it with tomli
                try:
                    toml = importlib.import_module("tomli")
                except ModuleNotFoundError:
                    continue
            try:
                data = toml.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigError(
                    str(path), "lossless_goldens", f"cannot be read ({exc})"
                ) from None
            options = data.get("tool", {}).get("pytest", {}).get("ini_options")
            if not isinstance(options, dict):
                continue
            value = options.get("lossless_goldens")
            return None if value is None else str(value)
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error) as exc:
            raise ConfigError(str(path), "lossless_goldens", f"cannot be read ({exc})") from None
        if not parser.has_section(section):
            if name.endswith("pytest.ini"):
                return None  # a pytest.ini is pytest's file even without its section
            continue
        return parser.get(section, "lossless_goldens", fallback=None)
    return None


def local_goldens(root: Path, given: Path | None) -> Path:
    """The goldens folder ``accept`` writes: ``--goldens`` (``given``), else the project's
    ``lossless_goldens`` (its ini file at ``root``), else ``goldens``; relative to ``root``,
    and inside it (never a folder an export names)."""
    from .core.paths import inside_root, is_under

    source = "--goldens" if given is not None else f"{root} ini lossless_goldens"
    chosen = given if given is not None else Path(_ini_goldens(root) or "goldens")
    folder = Path(os.path.abspath(root / chosen))
    if not is_under(folder, root) or folder == Path(os.path.abspath(root)):
        raise ConfigError(
            source,
            str(chosen),
            f"the goldens folder is not inside the project {root}: run accept from the "
            "checkout's rootdir, with a goldens folder below it",
        )
    inside_root(folder, root, what="goldens folder")
    return folder


#: The signals that stop a command with one line (Ctrl-C, CI cancel and ``timeout``, a hangup).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CommandInterrupted(KeyboardInterrupt):
    """A stop signal, raised where the command is, so that what it was writing is unwound
    (a staged golden folder or a temporary file removed, a retired golden put back)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def _interrupt(signum: int, frame: object) -> None:
    raise CommandInterrupted(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``pytest-lossless``) and ``python -m pytest_lossless``; a reader
    that stops early (``verify DIR | head``) ends it quietly, as CLI tools do. SIGINT, SIGTERM
    and SIGHUP stop it with one line and the shell's status for the signal (128 + its number):
    what it wrote is whole, the old version or the new one, and running it again finishes."""
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # else no handlers
    previous = {n: signal.signal(n, _interrupt) for n in _STOP_SIGNALS if main_thread}
    try:
        code = _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at nothing so that raises no more.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
    except KeyboardInterrupt as exc:
        number = exc.signum if isinstance(exc, CommandInterrupted) else int(signal.SIGINT)
        words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
        command = f" {words[0]}" if words else ""
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        print(
            f"pytest-lossless{command}: interrupted by {signal.Signals(number).name}: stopped; "
            "what it wrote is whole (the old version or the new one): run it again to finish",
            file=sys.stderr,
        )
        return 128 + number
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return code


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_lossless",
        description="pytest-lossless tools: re-derive and check receipts.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "verify",
        help="recompute every verdict and hash of the receipts in DIR from their "
        "raw blocks; exit 1 on any contradiction",
    )
    check.add_argument(
        "directories",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="a receipts folder (searched recursively: every session folder in it, of any "
        "host), a session folder, or one receipt file",
    )
    _plugin_options(check)
    check.add_argument(
        "--revision",
        metavar="REV",
        default=None,
        help="require every receipt (and signed Statement) to show this source revision "
        "(a commit SHA, or a prefix of at least 7 hex digits)",
    )
    _signature_options(
        check,
        "the signed bundle (*.intoto.jsonl) that sign wrote: every session and receipt "
        "must be signed in it, and every signed digest match the files on disk",
    )
    check.add_argument(
        "--allow-mixed-revisions",
        action="store_true",
        help="accept one session, or the shards of one campaign, whose records name more than "
        "one source revision (sessions of different revisions are each judged on their own)",
    )
    make = commands.add_parser(
        "summary",
        help="print the summary of the receipts in DIR (generated from them); "
        "--write stores it as DIR/SUMMARY.md",
    )
    make.add_argument(
        "directory",
        type=Path,
        metavar="DIR",
        help="a session folder, or a folder of sessions (their merged summary)",
    )
    make.add_argument("--write", action="store_true", help="write DIR/SUMMARY.md")
    _accept_parser(commands)
    _sign_parser(commands)
    _bisect_parser(commands)
    argv, pytest_args = _split_pytest_args(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if getattr(args, "plugins", None):
        # -p names project modules, as under pytest's rootdir: the working folder, but last,
        # so a file there never stands in for an installed module.
        sys.path.append(os.getcwd())
    if args.command == "verify":
        return verify_command(
            args.directories,
            plugins=args.plugins,
            entry_points=args.entry_points,
            allow_mixed_revisions=args.allow_mixed_revisions,
            revision=args.revision,
            attestation=args.attestation,
            key=args.key,
        )
    if args.command == "sign":
        return sign_command(
            args.directory,
            key=args.key,
            out=args.out,
            plugins=args.plugins,
            entry_points=args.entry_points,
        )
    if args.command == "summary":
        if not args.directory.is_dir():
            return _usage("summary", f"{args.directory}: no such folder")
        if args.write:
            try:
                written = write_summary(args.directory)
            except (LosslessError, OSError) as exc:  # a read-only folder, a lock it cannot take
                print(printable(f"pytest-lossless summary: {exc}"), file=sys.stderr)
                return 2
            print(written)
        else:
            print("\n".join(summary_lines(args.directory)))
        return 0
    if args.command == "accept":
        return accept_command(
            args.directory,
            keyword=args.keyword,
            goldens=args.goldens,
            store=args.store,
            plugins=args.plugins,
            entry_points=args.entry_points,
            attestation=args.attestation,
            key=args.key,
        )
    if args.command == "bisect":
        return _bisect_command(args, pytest_args)
    parser.error(f"unknown command {args.command!r}")
    return 2


def _plugin_options(command: argparse.ArgumentParser) -> None:
    """``-p MODULE`` and ``--no-entry-points``: the plugins a command loads, as pytest would."""
    command.add_argument(
        "-p",
        dest="plugins",
        action="append",
        default=[],
        metavar="MODULE",
        help="also load this plugin module (as pytest's -p), e.g. the module that adds an "
        "artifact kind; may be repeated",
    )
    command.add_argument(
        "--no-entry-points",
        dest="entry_points",
        action="store_false",
        help="do not load the plugins installed through pytest11 entry points",
    )


def _signature_options(command: argparse.ArgumentParser, attestation_help: str) -> None:
    """``--attestation FILE`` and ``--key PUBKEY``: the bundle sign wrote and its public key."""
    command.add_argument(
        "--attestation", type=Path, metavar="FILE", default=None, help=attestation_help
    )
    command.add_argument(
        "--key",
        type=Path,
        metavar="PUBKEY",
        default=None,
        help="the ed25519 public key (PEM) the bundle's signatures must verify with",
    )


def _accept_parser(commands: Any) -> None:
    accept = commands.add_parser(
        "accept",
        help="write goldens from an export (--lossless-export DIR), as --update-goldens would "
        "have on the machine that made it; refuses what its runs or receipts do not vouch for",
    )
    accept.add_argument("directory", type=Path, metavar="DIR", help="the export folder")
    accept.add_argument(
        "-k",
        dest="keyword",
        metavar="EXPR",
        default=None,
        help="only tests whose id matches EXPR, as pytest's -k (substrings, and, or, not)",
    )
    accept.add_argument(
        "--goldens",
        type=Path,
        metavar="PATH",
        default=None,
        help="the goldens folder to write, inside the current folder (default: the project's "
        "lossless_goldens from its ini file here, else goldens); never the export's",
    )
    accept.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        default=None,
        help="also keep every accepted artifact in this content-addressed store (lossless_store)",
    )
    _plugin_options(accept)
    _signature_options(
        accept, "accept only artifacts whose receipt a session signed in FILE lists (with --key)"
    )


def _sign_parser(commands: Any) -> None:
    sign = commands.add_parser(
        "sign",
        help="write each session of DIR as in-toto Statements (Test Result, and the lossless "
        "detail): signed in DSSE envelopes with --key, else unsigned for the CI's own signer",
    )
    sign.add_argument(
        "directory", type=Path, metavar="DIR", help="a receipts folder or a session folder"
    )
    sign.add_argument(
        "--key",
        type=Path,
        metavar="FILE",
        default=None,
        help="an ed25519 private key (unencrypted PEM): write the signed bundle "
        "OUT/lossless.intoto.jsonl",
    )
    sign.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        default=Path("lossless-attestation"),
        help="where to write (default: lossless-attestation)",
    )
    _plugin_options(sign)


def sign_command(
    directory: Path,
    *,
    key: Path | None = None,
    out: Path = Path("lossless-attestation"),
    plugins: Sequence[str] = (),
    entry_points: bool = True,
    stream: TextIO | None = None,
) -> int:
    """The ``sign`` subcommand: 0 when every session was written, 1 when one was refused (its
    evidence contradicts itself, a process outlived it, or the checkout here is not its
    revision; nothing is signed then), 2 on a bad argument or no session."""
    from .evidence.attest import AttestationError, load_private_key, session_folders, sign

    stream = sys.stdout if stream is None else stream
    if not directory.is_dir():
        return _usage("sign", f"{directory}: no such folder")
    if not session_folders(directory):
        why = "a session writes its index when it ends"
        return _usage("sign", f"no session (no {INDEX_NAME}) under {directory}: {why}")
    from .core.paths import folder_problem

    problem = folder_problem(out, write=True)  # a file, below a file, read-only (#20)
    if problem is not None:
        return _usage("sign", f"--out {out}: {problem}: give a folder where you can write")
    try:
        private_key = load_private_key(key) if key is not None else None
        kinds = KindRegistry(plugin_manager(plugins, entry_points=entry_points).hook)
        done = sign(directory, out=out, project=Path.cwd(), private_key=private_key, kinds=kinds)
    except (AttestationError, LosslessError, OSError) as exc:
        return _usage("sign", exc)
    for line in done.recovered:  # what a stopped sign left beside a statements folder
        print(printable(line), file=stream)
    for problem in done.refused:
        print(printable(f"REFUSED {problem}"), file=stream)
    for session_id, result in done.sessions:
        print(printable(f"session {session_id}: {result}"), file=stream)
    if done.refused:
        print(f"nothing signed: {len(done.refused)} problem(s) above", file=stream)
        return 1
    for path in done.written:
        print(f"wrote {path}", file=stream)
    return 0


def _split_pytest_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``bisect GOOD BAD -- PYTEST_ARGS``: what follows the first ``--`` is pytest's, untouched."""
    argv = list(argv)
    if argv[:1] != ["bisect"] or "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _bisect_parser(commands: Any) -> None:
    bisect = commands.add_parser(
        "bisect",
        usage="python -m pytest_lossless bisect GOOD BAD [options] -- PYTEST_ARGS...",
        help="find the first commit that changed an output: each step runs the pytest selection "
        "with --lossless in a temporary worktree against fixed goldens; INCONCLUSIVE, errors, "
        "skips and failed builds are skipped, never blamed",
    )
    bisect.add_argument("good", metavar="GOOD", help="a commit whose outputs match the goldens")
    bisect.add_argument("bad", metavar="BAD", help="a later commit whose outputs do not")
    bisect.add_argument(
        "--goldens",
        metavar="REV",
        default=None,
        help="the revision of the test repository whose goldens every step compares with "
        "(default: GOOD; with --sources, the test repository's HEAD)",
    )
    bisect.add_argument(
        "--sources",
        type=Path,
        metavar="PATH",
        default=None,
        help="bisect this engine repository (the one model_run(sources=...) names) instead of "
        "the test repository, which stays at its HEAD; each step's engine worktree is given "
        "to the tests in the variable --sources-env names",
    )
    bisect.add_argument(
        "--sources-env",
        metavar="NAME",
        default="PYTEST_LOSSLESS_BISECT_SOURCES",
        help="the environment variable that holds the engine worktree's path under --sources "
        "(default: PYTEST_LOSSLESS_BISECT_SOURCES)",
    )
    bisect.add_argument(
        "--build",
        metavar="CMD",
        default=None,
        help="run CMD (split like a shell would, never run by one) in the bisected worktree "
        "before each step's tests; a failed build skips the commit",
    )
    bisect.add_argument(
        "--control-runs",
        type=int,
        metavar="N",
        default=None,
        help="runs of every producer and control per step (--lossless-control-runs; default: "
        "the project's setting, 2 unless it says otherwise)",
    )
    bisect.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        default=None,
        help="a new folder for the log (bisect.log, bisect.json) and each step's receipts and "
        "pytest output (default: a new temporary folder, kept)",
    )


def _bisect_command(args: argparse.Namespace, pytest_args: Sequence[str]) -> int:
    from .bisect import BisectError, BisectRequest, parse_build, run_bisect

    try:
        build = parse_build(args.build)
    except BisectError as exc:
        return _usage("bisect", exc)
    if args.control_runs is not None and args.control_runs < 2:
        return _usage("bisect", "--control-runs must be at least 2")
    request = BisectRequest(
        good=args.good,
        bad=args.bad,
        pytest_args=tuple(pytest_args),
        cwd=Path.cwd(),
        sources=None if args.sources is None else args.sources.resolve(),
        build=build,
        goldens=args.goldens,
        out=None if args.out is None else args.out.resolve(),
        control_runs=args.control_runs,
        sources_env=args.sources_env,
    )
    return run_bisect(request, ini_goldens=_ini_goldens)


if __name__ == "__main__":
    sys.exit(main())
