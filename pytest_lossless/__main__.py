"""``python -m pytest_lossless``: ``verify`` and ``summary`` over receipts folders.

``verify`` prints one line per receipt; it exits 0 when every receipt is consistent, 1 on any
contradiction or unreadable receipt, 2 when there is nothing to verify or a bad argument.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import LosslessError, ReceiptError
from .evidence.receipts import load_all
from .evidence.summary import check_summary, summary_lines, write_summary
from .evidence.verify import verify_receipt
from .kinds import KindRegistry, plugin_manager


def _describe(data: dict[str, Any]) -> str:
    verdicts = data.get("verdicts") or {}
    runs = len(data.get("runs") or [])
    clean = (verdicts.get("lifecycle") or {}).get("clean")
    parts = [f"{runs} run{'s' if runs != 1 else ''}"]
    if runs:
        parts.append("lifecycle clean" if clean else "lifecycle NOT clean")
    if verdicts.get("overall"):
        parts.append(f"verdict {verdicts['overall']}")
    return f"{data.get('test_id')}: " + ", ".join(parts)


def verify_command(
    directories: Sequence[Path],
    *,
    plugins: Sequence[str] = (),
    entry_points: bool = True,
    out: TextIO | None = None,
) -> int:
    """The ``verify`` subcommand over one or more folders; returns the exit status.

    Gates of kinds that plugins add are re-derived through the same plugins pytest would load:
    the ``pytest11`` entry points (unless ``entry_points`` is False) and each ``-p MODULE``.
    """
    stream = sys.stdout if out is None else out
    for directory in directories:
        if not directory.exists():
            print(f"pytest-lossless verify: {directory}: no such folder", file=sys.stderr)
            return 2
    try:
        kinds = KindRegistry(plugin_manager(plugins, entry_points=entry_points).hook)
    except LosslessError as exc:
        print(f"pytest-lossless verify: {exc}", file=sys.stderr)
        return 2
    loaded_by_folder = {directory: load_all(directory) for directory in directories}
    total = sum(len(loaded) for loaded in loaded_by_folder.values())
    if not total:
        names = ", ".join(str(d) for d in directories)
        print(
            f"pytest-lossless verify: no receipts (*.json) in {names}: nothing was verified",
            file=sys.stderr,
        )
        return 2
    bad = 0
    summaries: list[str] = []
    for directory, loaded in loaded_by_folder.items():
        for path, data in loaded.items():
            if isinstance(data, ReceiptError):
                bad += 1
                print(f"UNREADABLE {data}", file=stream)
                continue
            problems = verify_receipt(path, receipt=data, kinds=kinds)
            line = _describe(data)
            if problems:
                bad += 1
                print(f"CONTRADICTION {path}: {line}", file=stream)
                for problem in problems:
                    print(f"    - {problem}", file=stream)
            else:
                print(f"OK {path}: {line}", file=stream)
        summaries += check_summary(directory, loaded)
    print(f"{total - bad} of {total} receipts consistent", file=stream)
    for problem in summaries:
        print(f"CONTRADICTION {problem}", file=stream)
    return 1 if bad or summaries else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``pytest-lossless``) and ``python -m pytest_lossless``."""
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
        help="a receipts folder (searched recursively) or one receipt file",
    )
    check.add_argument(
        "-p",
        dest="plugins",
        action="append",
        default=[],
        metavar="MODULE",
        help="also load this plugin module (as pytest's -p), e.g. the module "
        "that adds an artifact kind; may be repeated",
    )
    check.add_argument(
        "--no-entry-points",
        dest="entry_points",
        action="store_false",
        help="do not load the plugins installed through pytest11 entry points",
    )
    make = commands.add_parser(
        "summary",
        help="print the summary of the receipts in DIR (generated from them); "
        "--write stores it as DIR/SUMMARY.md",
    )
    make.add_argument("directory", type=Path, metavar="DIR", help="a receipts folder")
    make.add_argument("--write", action="store_true", help="write DIR/SUMMARY.md")
    args = parser.parse_args(argv)
    if args.command == "verify":
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")  # -p names project modules, as under pytest's rootdir
        return verify_command(
            args.directories, plugins=args.plugins, entry_points=args.entry_points
        )
    if args.command == "summary":
        if not args.directory.is_dir():
            print(f"pytest-lossless summary: {args.directory}: no such folder", file=sys.stderr)
            return 2
        if args.write:
            print(write_summary(args.directory))
        else:
            print("\n".join(summary_lines(args.directory)))
        return 0
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
