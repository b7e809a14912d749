"""Processes for the scaling bench: stub replicas on fixed ports, and nginx in front of them.

Rules: this module starts and stops processes and reads nginx's access log; it
knows nothing of load or verdicts (bench/scale/scale.py). Replicas are started through
bench/common/procs.py, so every server the bench runs starts one way; nginx runs from
deploy/nginx's template, rendered as an operator would.

Theory: a Replica keeps its port across restarts, so nginx's upstream list never
changes while replicas are SIGTERMed, SIGKILLed and started again. nginx runs in
the foreground (`daemon off`) as a child with its own prefix, pid, logs and temp
dirs in a fresh folder; when we are root it runs as `nobody` (the master too), so
no test ever runs a root nginx. Both are always stopped in a `finally`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.common import procs
from bench.common.loadgen import Target
from deploy.nginx.render import Edge, render

NGINX_ENV = "SEMIF_NGINX"  # path of the nginx binary, when it is not on PATH
UNPRIVILEGED = "nobody"


def nginx_binary() -> str | None:
    """nginx from SEMIF_NGINX, PATH, or Debian's /usr/sbin (often not on a user's PATH)."""
    for candidate in (os.environ.get(NGINX_ENV), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class Replica:
    """One stub replica on a port of its own, which it keeps across restarts."""

    def __init__(self, env: Mapping[str, str], token: str, log_dir: Path) -> None:
        self.port = procs.free_port()
        self.env = {"SEMIF_HOST": procs.HOST, "SEMIF_PORT": str(self.port), **env}
        self.token, self.log_dir = token, log_dir
        self.running: procs.Running | None = None
        self._stack = contextlib.ExitStack()

    @property
    def address(self) -> str:
        return f"{procs.HOST}:{self.port}"

    @property
    def target(self) -> Target:
        return Target(procs.HOST, self.port, self.token)

    def start(self) -> None:
        """Start and wait until /health answers 200."""
        assert self.running is None, "already running"
        self.running = self._stack.enter_context(
            procs.running(procs.semif_argv(), self.env, self.port, self.token, log_dir=self.log_dir)
        )

    def stop(self) -> None:
        """SIGTERM (drain) and wait for the exit; a no-op when it is not running."""
        self._stack.close()
        self.running = None

    def kill(self) -> None:
        """SIGKILL: no drain, connections reset, in-flight requests cut."""
        if self.running is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.running.process.pid, signal.SIGKILL)
            self.running.process.wait(5.0)
        self.stop()

    def exit_code(self) -> int | None:
        return None if self.running is None else self.running.process.poll()


@contextlib.contextmanager
def fleet(count: int, env: Mapping[str, str], token: str, log_dir: Path) -> Iterator[list[Replica]]:
    """`count` replicas started one after another, all stopped on exit."""
    replicas = [Replica(env, token, log_dir) for _ in range(count)]
    try:
        for replica in replicas:
            replica.start()
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()


@dataclass(frozen=True)
class Nginx:
    """A running nginx: where it listens and where its logs are."""

    target: Target
    run_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def access_log(self) -> Path:
        return self.run_dir / "access.log"

    def log_lines(self) -> list[str]:
        try:
            return self.access_log.read_text().splitlines()
        except FileNotFoundError:
            return []


def _run_dir() -> Path:
    """A fresh folder nginx can write; handed to `nobody` when we are root."""
    run_dir = Path(tempfile.mkdtemp(prefix="semif-nginx-"))
    if os.geteuid() == 0:
        account = pwd.getpwnam(UNPRIVILEGED)
        os.chown(run_dir, account.pw_uid, account.pw_gid)
    return run_dir


def _drop_privileges() -> dict[str, object]:
    """Popen arguments that run nginx as `nobody` when we are root; none otherwise."""
    if os.geteuid() != 0:
        return {}
    account = pwd.getpwnam(UNPRIVILEGED)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"nginx exited with {process.returncode}:\n{log.read_text(errors='replace')[-2000:]}"
            )
        with (
            contextlib.suppress(OSError),
            socket.create_connection((procs.HOST, port), timeout=1.0),
        ):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nginx not listening within {timeout:.0f} s")


@contextlib.contextmanager
def nginx(
    replicas: list[Replica],
    token: str,
    workers: int = 1,
    max_body_bytes: int | None = None,
    ready_timeout: float = 10.0,
) -> Iterator[Nginx]:
    """nginx in the foreground in front of `replicas`, stopped (SIGTERM, then SIGKILL) on exit."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError(f"nginx not found (apt-get install nginx, or set {NGINX_ENV})")
    run_dir = _run_dir()
    port = procs.free_port()
    edge = Edge(
        f"{procs.HOST}:{port}",
        tuple(r.address for r in replicas),
        run_dir,
        workers=str(workers),
        **({"max_body_bytes": max_body_bytes} if max_body_bytes else {}),
    )
    conf = run_dir / "nginx.conf"
    conf.write_text(render(edge))
    stderr = run_dir / "stderr.log"
    argv = [binary, "-p", str(run_dir), "-c", str(conf), "-e", str(stderr), "-g", "daemon off;"]
    try:
        with open(stderr, "ab") as sink:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_drop_privileges(),
            )  # type: ignore[call-overload]
        try:
            _wait_listening(port, process, stderr, ready_timeout)
            yield Nginx(Target(procs.HOST, port, token), run_dir, process)
        finally:
            _stop(process)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM is nginx's fast shutdown; SIGKILL the group if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5.0)


# -- the access log ----------------------------------------------------------------------

_UPSTREAM = re.compile(r"upstream=\[([^\]]*)\] upstream_status=\[([^\]]*)\]")


@dataclass(frozen=True)
class Logged:
    """One access-log line: the request id, the final status, each replica tried and its status."""

    request_id: str
    status: int
    tried: tuple[str, ...]
    statuses: tuple[str, ...]

    @property
    def served_by(self) -> str | None:
        return self.tried[-1] if self.tried else None


def _listed(text: str) -> tuple[str, ...]:
    """nginx's list of tries: ", " between replicas, " : " between upstream groups; "-" for none."""
    return tuple(
        part.strip() for part in re.split(r"[,:]\s(?=\S)", text) if part.strip() not in ("", "-")
    )


def parse_log(lines: list[str]) -> list[Logged]:
    """The lines written with the template's `semif` log_format."""
    logged = []
    for line in lines:
        found = _UPSTREAM.search(line)
        if found:
            _time, request_id, _method, _uri, status = line.split(" ", 5)[:5]
            logged.append(
                Logged(request_id, int(status), _listed(found.group(1)), _listed(found.group(2)))
            )
    return logged
