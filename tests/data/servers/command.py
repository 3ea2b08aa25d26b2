"""A small command for model_run tests: ``python command.py MODE [ARGS]``.

Modes: ``exit CODE`` (writes a line to stderr first), ``write PATH TEXT``, ``hang``,
``hang-ignore-term`` (ignores SIGTERM), ``env NAME PATH`` (writes $NAME to PATH),
``spawn-and-exit`` (leaves a sleeping child behind).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    mode = argv[0]
    if mode == "exit":
        print("loading model ...")
        print(f"fatal: simulated failure with code {argv[1]}", file=sys.stderr)
        return int(argv[1])
    if mode == "write":
        Path(argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[1]).write_text(argv[2])
        return 0
    if mode == "env":
        Path(argv[2]).write_text(os.environ.get(argv[1], "<unset>"))
        return 0
    if mode in ("hang", "hang-ignore-term"):
        if mode == "hang-ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("hanging", file=sys.stderr, flush=True)
        time.sleep(600)
        return 0
    if mode == "spawn-and-exit":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(0.3)
        return 0
    print(f"unknown mode {mode!r}", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
