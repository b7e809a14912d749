"""A real `python -m semif_serve` child (the stub scorer unless SEMIF_SCORER says otherwise), for
tests that need the process: its signals, its exit status, its stderr, its reloads.

Rule: this module starts and reads the process; what a test expects of it stays in the test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from bench.common.procs import free_port
from tests.wire_client import TOKEN, request


class Process:
    """`python -m semif_serve`, its stderr read all along as a log collector would: a server whose
    stderr pipe fills stops on its next log line, and a test that read only when it looked for a
    line stalled it (the access log of a busy few seconds is more than the pipe holds)."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port
        self.stderr: list[str] = []  # every line so far
        self._looked = 0  # how many of them wait_for_line has looked at
        self._grew = asyncio.Event()
        self._ended = False
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := (await self.proc.stderr.readline()).decode():
            self.stderr.append(line)
            self._grew.set()
        self._ended = True
        self._grew.set()

    @classmethod
    async def start(cls, without: tuple[str, ...] = (), **env: str) -> Process:
        """Started and listening, with `env` set over the stub's defaults and the names in `without`
        unset (the token among them)."""
        process = await cls.launch(without, **env)
        await asyncio.wait_for(process.wait_for_line("listening"), 30)
        return process

    @classmethod
    async def launch(cls, without: tuple[str, ...] = (), before: str = "", **env: str) -> Process:
        """As `start`, but returned at once, while it starts (for a signal sent before it is ready).
        `before`: a bash command the child runs first, then becomes the server (`exec`, same pid)."""
        port = free_port()
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEMIF_")}
        environ.update(SEMIF_API_TOKEN=TOKEN, SEMIF_SCORER="stub", SEMIF_PORT=str(port))
        environ.update(env)
        for name in without:
            del environ[name]
        argv = [sys.executable, "-m", "semif_serve"]
        if before:
            argv = ["bash", "-c", f'{before} && exec "$@"', "bash", *argv]
        proc = await asyncio.create_subprocess_exec(
            *argv, env=environ, stderr=asyncio.subprocess.PIPE
        )
        return cls(proc, port)

    async def wait_for_line(self, fragment: str) -> str:
        """The next line, after the last one this returned, that holds `fragment`."""
        while True:
            while self._looked < len(self.stderr):
                line = self.stderr[self._looked]
                self._looked += 1
                if fragment in line:
                    return line
            if self._ended:
                raise AssertionError(
                    f"the server exited without logging {fragment!r}: {''.join(self.stderr)}"
                )
            self._grew.clear()
            await self._grew.wait()

    async def exit_code(self, timeout: float) -> int:
        """Its exit status, once it has exited and all its stderr is read."""
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return await asyncio.wait_for(self.proc.wait(), timeout)

    async def in_flight(self) -> None:
        """Until /health reports one POST in progress (the stub sleeps inside its call)."""
        while (await request(self.port, "GET", "/health", headers=[])).json["in_progress"] != 1:
            await asyncio.sleep(0.02)

    async def reload(self, fragment: str) -> str:
        """SIGHUP, then the first log line holding `fragment` (the reload's outcome)."""
        self.proc.send_signal(signal.SIGHUP)
        return await asyncio.wait_for(self.wait_for_line(fragment), 10)


def replace(path: Path, text: str, mode: int = 0o600) -> None:
    """Write the file as an operator's tooling should: whole, then renamed over the old one."""
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.chmod(mode)
    os.replace(partial, path)
