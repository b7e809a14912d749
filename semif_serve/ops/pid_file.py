"""SEMIF_PID_FILE, as nginx's pid file: what `kill -HUP "$(cat FILE)"` signals.

Rule 1: startup is refused while the file names another live process (two servers, one file:
a reload would reach only one); a file naming a process that is gone, or this very process (PID 1
again in a restarted container), is stale and is replaced.
Rule 2: the file is written only once the server is ready, whole (a temporary file renamed over
it), so a reader never sees half a pid; it is removed at exit only while it still names this
process.
"""

from __future__ import annotations

import contextlib
import os


class PidFileError(ValueError):
    """SEMIF_PID_FILE names another live process: the process stops before the model loads (exit 2)."""


def _recorded(path: str) -> int | None:
    """The pid the file holds, or None when there is no file or no pid in it."""
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            text = file.read().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


def check(path: str) -> None:
    """Refuse a file that names another live process (Rule 1); an unreadable file is refused too."""
    try:
        pid = _recorded(path)
    except OSError as error:
        raise PidFileError(
            f"SEMIF_PID_FILE {path} is unreadable: {error.strerror or error}"
        ) from None
    if pid is not None and pid != os.getpid() and _alive(pid):
        raise PidFileError(
            f"SEMIF_PID_FILE {path} names process {pid}, which is running: another server "
            "uses this file (stop it, or give this one its own SEMIF_PID_FILE)"
        )


def write(path: str) -> None:
    """This process's pid, written whole: a temporary file beside it, renamed over it (Rule 2)."""
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w", encoding="ascii") as file:
        file.write(f"{os.getpid()}\n")
    os.replace(partial, path)


def remove(path: str) -> None:
    """At exit: the file goes, unless it no longer names this process (Rule 2)."""
    with contextlib.suppress(OSError):
        if _recorded(path) == os.getpid():
            os.unlink(path)
