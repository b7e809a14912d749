"""The container check's assertions that need a Python: stdlib only, one file.

Rules: the same file runs on the host (`python -m deploy.container.probe ...`) and
inside the image with the image's own Python (`podman exec -i NAME python - ... <
probe.py`), so it imports nothing outside the standard library and nothing of
semif_serve. Each subcommand asserts one thing and exits 1 with one line saying what
it saw; check.sh names the step. Every loop is bounded by a deadline.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# The tiny model's parity request (tests/real_models/test_tiny_served.py asks the same row).
ROW = {
    "id": "t1",
    "state": {"ticket": "printer on fire", "floor": 3},
    "question": "Is this urgent?",
    "options": [
        {"id": "yes", "description": "Yes, urgent"},
        {"id": "no", "description": "No"},
        {"id": "later", "description": "It can wait a day"},
    ],
}
PARITY_FIELDS = ("option_ids", "option_logits", "prompt_sha256")
TOOLS = ("gcc", "cc", "c++", "g++", "clang", "make", "git")


class Failed(Exception):
    """One assertion that did not hold: its message is the check's last line."""


def status(url: str, timeout: float = 4.0) -> int:
    """The HTTP status of GET url; 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def wait(url: str, seconds: float) -> None:
    """GET url answers 200 before the deadline."""
    deadline = time.monotonic() + seconds
    last = 0
    while time.monotonic() < deadline:
        last = status(url)
        if last == 200:
            return
        time.sleep(0.5)
    raise Failed(
        f"GET {url} did not answer 200 within {seconds:.0f} s (last: {last or 'no answer'})"
    )


def decide(base: str, out: Path | None) -> None:
    """POST /decide with the token from SEMIF_API_TOKEN answers 200; the body goes to out."""
    body = json.dumps(ROW).encode()
    headers = {
        "authorization": "Bearer " + os.environ["SEMIF_API_TOKEN"],
        "content-type": "application/json",
    }
    request = urllib.request.Request(
        base.rstrip("/") + "/decide", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = response.read()
    except urllib.error.HTTPError as error:
        raise Failed(f"POST /decide answered {error.code}: {error.read()[:200]!r}") from None
    if out is not None:
        out.write_bytes(answer)


def same(first: Path, second: Path) -> None:
    """Two /decide answers agree exactly on the option ids, logits and prompt hash."""
    a, b = (json.loads(path.read_text()) for path in (first, second))
    for name in PARITY_FIELDS:
        if a.get(name) is None or a.get(name) != b.get(name):
            raise Failed(f"{name} differs: {a.get(name)!r} != {b.get(name)!r}")
    print(f"same {', '.join(PARITY_FIELDS)}: {a['option_logits']} {a['prompt_sha256'][:16]}")


def logs(path: Path) -> None:
    """Every stderr line is one JSON object, and none holds the API token."""
    token = os.environ["SEMIF_API_TOKEN"]
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise Failed("the container wrote no log lines")
    for number, line in enumerate(lines, 1):
        if token in line:
            raise Failed(f"log line {number} holds the API token")
        try:
            parsed: Any = json.loads(line)
        except ValueError:
            raise Failed(f"log line {number} is not JSON: {line[:120]!r}") from None
        if not isinstance(parsed, dict):
            raise Failed(f"log line {number} is JSON but not an object: {line[:120]!r}")
    print(f"{len(lines)} log lines, all JSON objects, no token")


def confined(uid: int, read_only: list[Path], writable: Path) -> None:
    """PID 1 runs as uid; the root and each read-only path refuse writes (EROFS); writable takes one."""
    status_lines = Path("/proc/1/status").read_text().splitlines()
    (uids,) = [line.split()[1:] for line in status_lines if line.startswith("Uid:")]
    if {int(u) for u in uids} != {uid}:
        raise Failed(f"PID 1 runs as uids {uids}, not {uid}")
    for directory in read_only:
        probe = directory / ".semif-write-probe"
        try:
            probe.write_text("x")
        except OSError as error:
            if error.errno != errno.EROFS:
                raise Failed(
                    f"writing under {directory} failed with {error!r}, not EROFS"
                ) from None
        else:
            probe.unlink()
            raise Failed(f"{directory} is writable")
    scratch = writable / ".semif-write-probe"
    scratch.write_text("x")
    scratch.unlink()
    print(f"uid {uid}; read-only: {', '.join(map(str, read_only))}; writable: {writable}")


def minimal() -> None:
    """No compiler, no git, no pip cache and no stray wheel in the image."""
    found = [tool for tool in TOOLS if shutil.which(tool) or Path("/usr/bin", tool).exists()]
    caches = [
        str(p)
        for root in ("/root", "/home", "/tmp", "/opt")
        if Path(root).is_dir()
        for p in Path(root).rglob("*")
        if (p.name == "pip" and p.parent.name == ".cache") or p.suffix == ".whl"
    ]
    if found or caches:
        raise Failed(f"the runtime image holds {found + caches}")
    print(f"no {', '.join(TOOLS)}; no pip cache or wheel")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="probe", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("wait")
    p.add_argument("url")
    p.add_argument("--seconds", type=float, default=120.0)
    p = sub.add_parser("decide")
    p.add_argument("base")
    p.add_argument("--out", type=Path)
    p = sub.add_parser("same")
    p.add_argument("first", type=Path)
    p.add_argument("second", type=Path)
    p = sub.add_parser("logs")
    p.add_argument("path", type=Path)
    p = sub.add_parser("confined")
    p.add_argument("--uid", type=int, required=True)
    p.add_argument("--read-only", type=Path, action="append", required=True)
    p.add_argument("--writable", type=Path, required=True)
    sub.add_parser("minimal")
    args = parser.parse_args(argv)
    try:
        if args.what == "wait":
            wait(args.url, args.seconds)
        elif args.what == "decide":
            decide(args.base, args.out)
        elif args.what == "same":
            same(args.first, args.second)
        elif args.what == "logs":
            logs(args.path)
        elif args.what == "confined":
            confined(args.uid, args.read_only, args.writable)
        else:
            minimal()
    except Failed as failure:
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
