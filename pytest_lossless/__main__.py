"""``python -m pytest_lossless verify DIR``: re-derive every receipt and report contradictions.

Prints one line per receipt; exits 0 when every receipt is consistent, 1 on any
contradiction or unreadable receipt, 2 when there is nothing to verify.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .errors import ReceiptError
from .evidence.receipts import (
    check_summary,
    load_all,
    summary_lines,
    verify_receipt,
    write_summary,
)


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


def verify_command(directory: Path, *, out: TextIO | None = None) -> int:
    """The ``verify`` subcommand; returns the exit status."""
    stream = sys.stdout if out is None else out
    if not directory.exists():
        print(f"pytest-lossless verify: {directory}: no such folder", file=sys.stderr)
        return 2
    loaded = load_all(directory)  # each receipt is read once, for verify and the summary
    if not loaded:
        print(f"pytest-lossless verify: no receipts (*.json) in {directory}: nothing was "
              "verified", file=sys.stderr)
        return 2
    bad = 0
    for path, data in loaded.items():
        if isinstance(data, ReceiptError):
            bad += 1
            print(f"UNREADABLE {data}", file=stream)
            continue
        problems = verify_receipt(path, receipt=data)
        line = _describe(data)
        if problems:
            bad += 1
            print(f"CONTRADICTION {path}: {line}", file=stream)
            for problem in problems:
                print(f"    - {problem}", file=stream)
        else:
            print(f"OK {path}: {line}", file=stream)
    total = len(loaded)
    print(f"{total - bad} of {total} receipts consistent", file=stream)
    summary = check_summary(directory, loaded)
    for problem in summary:
        print(f"CONTRADICTION {problem}", file=stream)
    return 1 if bad or summary else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point (``pytest-lossless``) and ``python -m pytest_lossless``."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_lossless",
        description="pytest-lossless tools: re-derive and check receipts.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "verify", help="recompute every verdict and hash of the receipts in DIR from their "
        "raw blocks; exit 1 on any contradiction")
    check.add_argument("directory", type=Path, metavar="DIR",
                       help="a receipts folder (searched recursively) or one receipt file")
    make = commands.add_parser(
        "summary", help="print the summary of the receipts in DIR (generated from them); "
        "--write stores it as DIR/SUMMARY.md")
    make.add_argument("directory", type=Path, metavar="DIR", help="a receipts folder")
    make.add_argument("--write", action="store_true", help="write DIR/SUMMARY.md")
    args = parser.parse_args(argv)
    if args.command == "verify":
        return verify_command(args.directory)
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
