"""The one way the bench starts a server: a subprocess on a free loopback port.

Ours (`python -m semif_serve`), the baseline (`python -m uvicorn
bench.load.baseline_fastapi:app`) and the open-loop peer (`python -m
bench.load.peer_fastjev`, fastjev's own server) all start here, in their own session so they can
be stopped as a group, and all are always stopped in a `finally`: a failed
benchmark never leaves a server behind. Readiness is polled through the bench's
own client with a deadline, and a server that exits early is reported with the
tail of its log rather than waited on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.common.loadgen import TOKEN_ENV, Target, call

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
STOP_GRACE_S = 10.0  # how long `_stop` waits after SIGTERM before it SIGKILLs
INTERRUPTED_GRACE_S = 2.0  # the same when the bench itself was interrupted: no drain is wanted then


@dataclass(frozen=True)
class Running:
    """A started server: where it listens and its process."""

    target: Target
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return self.target.url

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (Linux /proc; NaN elsewhere)."""
        return cpu_seconds(self.process.pid)


def cpu_seconds(pid: int) -> float:
    """User + system CPU process `pid` has used so far, all its threads (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_bytes(pid: int) -> float:
    """The peak resident set of process `pid` since it started (VmHWM; NaN where /proc has none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float("nan")


def token() -> str:
    """SEMIF_API_TOKEN when set, else a fresh one (>= 32 visible ASCII, as the server demands)."""
    return os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32)


def stub_env(delay_ms: int = 0, queue: int = 32, grace_s: float = STOP_GRACE_S) -> dict[str, str]:
    """Our server on the stub scorer: `delay_ms` per call, `queue` admission slots (the server's own
    defaults, 0 and 32, unless given) and a drain no longer than `_stop` waits before SIGKILL."""
    return {
        "SEMIF_SCORER": "stub",
        "SEMIF_STUB_DELAY_MS": str(delay_ms),
        "SEMIF_MAX_QUEUE": str(queue),
        "SEMIF_SHUTDOWN_GRACE_S": str(grace_s),
    }


def free_port() -> int:
    """A port the OS just considered free on loopback (a benign race: we bind right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def semif_argv() -> list[str]:
    return [sys.executable, "-m", "semif_serve"]


def uvicorn_argv(port: int, access_log: bool = False) -> list[str]:
    """One uvicorn worker; --loop/--http auto pick uvloop/httptools only if installed.

    Quiet (no access log, warnings only) by default; with `access_log`, uvicorn's own
    defaults (log level info, an access line per request on stdout), as deployed.
    """
    quiet = [] if access_log else ["--log-level", "warning", "--no-access-log"]
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.load.baseline_fastapi:app",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
        *quiet,
        "--app-dir",
        str(ROOT),
    ]


def _log_tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


def _wait_ready(
    target: Target,
    process: subprocess.Popen[bytes],
    log: Path,
    timeout: float,
    health: str = "/health",
) -> None:
    """Poll GET `health` until 200; fail fast if the process exits or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode} before it was ready:\n{_log_tail(log)}"
            )
        try:
            if asyncio.run(call(target, "GET", health, timeout=2.0)).status == 200:
                return
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server not ready within {timeout:.0f} s:\n{_log_tail(log)}")


def _stop(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's process group (graceful drain), then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        _kill(process)
    except KeyboardInterrupt:  # interrupted while it drains: it goes now, not left behind
        _kill(process)
        raise


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(5.0)


def stop_children() -> list[int]:
    """SIGKILL every child process of this one still running, and its group; the PIDs.

    After an interrupt: a signal handler that raises inside `subprocess.Popen` (while the child
    execs) loses the handle of a child that exists, so `running` cannot stop it; it is found here.
    """
    import psutil

    children = psutil.Process().children()
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # its group: it leads one once it has started
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=5.0)
    return [child.pid for child in children]


@contextlib.contextmanager
def running(
    argv: list[str],
    env: Mapping[str, str],
    port: int,
    api_token: str,
    ready_timeout: float = 60.0,
    log_dir: Path | None = None,
    cwd: Path = ROOT,
    health: str = "/health",
) -> Iterator[Running]:
    """Start argv with env (over ours) in `cwd`, wait until `health` answers 200, stop it on exit.

    Without `log_dir` the log goes to a temporary folder that is removed after a clean exit
    (a bench with the access log on writes megabytes) and kept, for reading, after a failure.
    """
    directory = (
        Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="semif-bench-"))
    )
    log = directory / f"server-{port}.log"
    full_env = {**os.environ, **env, TOKEN_ENV: api_token, "PYTHONUNBUFFERED": "1"}
    # Named callers: `api_token` is one of the file's; setting SEMIF_API_TOKEN too would be refused.
    if "SEMIF_API_TOKENS_FILE" in env:
        for name in (TOKEN_ENV, "SEMIF_API_KEY"):
            full_env.pop(name, None)
    target = Target(HOST, port, api_token)
    with open(log, "wb") as sink:
        process = _popen(argv, full_env, sink, cwd)
        try:
            _wait_ready(target, process, log, ready_timeout, health)
            yield Running(target, process, log)
        except KeyboardInterrupt:
            _stop(process, INTERRUPTED_GRACE_S)
            raise
        finally:
            _stop(process)
    if log_dir is None:  # reached only after a clean exit
        shutil.rmtree(directory, ignore_errors=True)


def _popen(
    argv: list[str], env: Mapping[str, str], sink: IO[bytes], cwd: Path
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=sink,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def semif_serve(
    env: Mapping[str, str],
    api_token: str,
    ready_timeout: float = 60.0,
    log_dir: Path | None = None,
    checkout: Path = ROOT,
) -> contextlib.AbstractContextManager[Running]:
    """Our server with env (SEMIF_SCORER and friends) on a free port.

    `checkout` serves another copy of the code (e.g. a `git archive` of an older commit) side
    by side with this one: it runs there, first on the import path.
    """
    port = free_port()
    settings = {"SEMIF_HOST": HOST, "SEMIF_PORT": str(port), **env}
    if checkout != ROOT:
        settings["PYTHONPATH"] = str(checkout)
    return running(semif_argv(), settings, port, api_token, ready_timeout, log_dir, cwd=checkout)


def fastapi_baseline(
    env: Mapping[str, str],
    api_token: str,
    ready_timeout: float = 60.0,
    log_dir: Path | None = None,
    access_log: bool = False,
) -> contextlib.AbstractContextManager[Running]:
    """The FastAPI + uvicorn baseline over the same stub, on a free port (uvicorn's access log on or off)."""
    port = free_port()
    return running(uvicorn_argv(port, access_log), env, port, api_token, ready_timeout, log_dir)


def peer_fastjev(
    model: Mapping[str, str],
    api_token: str,
    health: str,
    ready_timeout: float = 600.0,
    log_dir: Path | None = None,
) -> contextlib.AbstractContextManager[Running]:
    """fastjev's own System One server (bench/load/peer_fastjev.py) over the snapshot `model` names
    (small_model's settings: SEMIF_MODEL, SEMIF_REVISION, HF_HOME...), on the CPU, on a free port,
    ready when `health` (the peer's own path, which bench/load names) answers."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.load.peer_fastjev",
        "--port",
        str(port),
        "--model",
        model["SEMIF_MODEL"],
        "--revision",
        model["SEMIF_REVISION"],
    ]
    return running(argv, model, port, api_token, ready_timeout, log_dir, health=health)


def tiny_model(out: Path, timeout: float = 300.0) -> dict[str, str]:
    """Build the tiny model with `semif-serve tiny-model` in a child process; its settings."""
    return built_model("tiny-model", out, timeout)


def small_model(out: Path | None = None, timeout: float = 900.0) -> dict[str, str]:
    """Build (or find) SmolLM2 with `semif-serve small-model`; without `out`, in its per-machine cache."""
    return built_model("small-model", out, timeout)


def built_model(command: str, out: Path | None, timeout: float = 300.0) -> dict[str, str]:
    """Run a model builder (`semif-serve <command> [--out DIR]`) in a child process; its KEY=VALUE settings.

    A child keeps transformers out of this process until HF_HOME is known: the hub
    cache path is fixed when huggingface_hub is first imported.
    """
    where = ["--out", str(out)] if out is not None else []
    done = subprocess.run(
        [*semif_argv(), command, *where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command} build failed ({done.returncode}):\n{done.stderr[-2000:]}")
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {key: value for key, value in pairs}
