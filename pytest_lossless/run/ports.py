"""Whether a local TCP port is already taken, and by whom, before a server is started on it.

A readiness probe only sees that *something* answers on a port. When another process already
listens there (a stale server of the last job on a fixed port), the probe, and every request
after it, would be answered by that stranger while the server under test fails to bind, and the
run would look ready and clean. So the port is checked before the server starts.

Standard library only; the holder is named from ``/proc`` where it is readable (Linux, same
user), else only the fact is reported.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

#: Host names that mean "this machine" in a readiness URL.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::", "[::1]")

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


def local_port(url: str) -> int | None:
    """The port of ``url`` when it names this machine (and a port), else None."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if port is None or (parts.hostname or "") not in LOCAL_HOSTS:
        return None
    return port


def _in_use(port: int) -> bool:
    """Whether binding ``port`` on the loopback address fails because it is taken."""
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        with sock:
            # SO_REUSEADDR: a port left in TIME_WAIT by an earlier run is free to bind again.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return True
    return False


def _listening_inodes(port: int) -> set[str]:
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[1].endswith(f":{port:04X}"):
                found.add(fields[9])
    return found


def _holders(port: int) -> list[str]:
    """``pid N (comm)`` of each readable process holding a listening socket on ``port``."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return []
    named: list[str] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
            if any(os.readlink(f"/proc/{entry.name}/fd/{fd}") in inodes for fd in fds):
                comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
                named.append(f"pid {entry.name} ({comm})")
        except OSError:
            continue
    return named


def port_taken(port: int) -> str | None:
    """None when ``port`` is free on this machine, else who holds it, in words."""
    if not _in_use(port):
        return None
    holders = _holders(port)
    return ", ".join(holders) if holders else "a process this user cannot see"
